"""What a sync makes: the wanted exports of a target (format, config, task, graph or generation), recipes made
again from ``export.json``, and the one function that exports a model for a task.

:func:`export_model` is shared by ``hub-export export`` and :mod:`hub_export.hub.sync`: a generative task (see
:data:`hub_export.tasks.TASKS`) makes an ``export_for_generation`` export, any other one graph of the forward, traced
on sample inputs built from the model's config. :func:`rebuild_quantizer` makes a data-free quantizer again from the
recipe an export recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..configs import AutoExportConfig
from ..errors import ConfigError, HubExportError
from ..formats import ExportFormat, backend_for, parse_format
from ..manifest import Manifest
from .source import load_source

__all__ = ["Wanted", "export_model", "load_for_task", "rebuild_quantizer", "recorded", "wanted_configs"]


@dataclass(frozen=True)
class Wanted:
    """What one subfolder must hold: the format, its config, its task and whether it is a generation export."""

    export_format: ExportFormat
    config: dict[str, Any]
    task: str | None
    generation: bool | None  # None: as the existing export was made (a plain graph when there is none)
    multi_token_decode: bool = False
    recorded: bool = False  # found in the target, not requested


def _check_task(task: str | None) -> bool | None:
    """Whether ``task`` is generative (None when no task is given).

    Raises:
        ConfigError: Unknown task.
    """
    if task is None:
        return None
    from ..tasks import TASKS

    if task not in TASKS:
        raise ConfigError(f"Unknown task {task!r}; known tasks: {', '.join(TASKS)}.")
    return TASKS[task].generative


def wanted_configs(
    formats: Sequence[str],
    overrides: Mapping[str, Mapping[str, Any]] | None,
    task: str | None = None,
    generation: bool = False,
) -> dict[str, Wanted]:
    generative = _check_task(task)
    if generation and generative is False:
        raise ConfigError(f"Task {task!r} is not generative; drop --generation or pass a generative --task.")
    if generation:
        generative = True
    wanted: dict[str, Wanted] = {}
    for name in formats:
        fmt = parse_format(name)
        data = {"dynamic": True, **dict((overrides or {}).get(fmt.value, {})), "export_format": fmt.value}
        if data.get("dynamic_shapes") is not None and "dynamic" not in (overrides or {}).get(fmt.value, {}):
            data["dynamic"] = False
        config = AutoExportConfig.from_dict(data).to_dict()
        wanted[backend_for(fmt).layout.subfolder] = Wanted(fmt, config, task, generative)
    if not wanted:
        raise ConfigError("Pass at least one --format.")
    return wanted


#: Quantization recipes sync makes again from their record: (quantizer, mode or method) -> its settings class. They
#: read no calibration data; a calibrated recipe needs the user's samples, which the record only counts.
_REBUILDABLE = {
    ("OnnxRuntimeQuantizer", "weight_only"): "OnnxRuntimeWeightOnlyConfig",
    ("OnnxRuntimeQuantizer", "dynamic"): "OnnxRuntimeDynamicConfig",
    ("NNCFQuantizer", "compress_weights"): "NNCFWeightCompressionConfig",
}


def rebuild_quantizer(recipe: Mapping[str, Any]) -> Any:
    """The quantizer of a recorded recipe (``export.json``'s ``config.quantizer``), or None when it cannot be made
    again from its record (a calibrated or unknown quantizer)."""
    settings = dict(recipe.get("settings") or {})
    key = (recipe.get("quantizer"), settings.pop("method" if "method" in settings else "mode", None))
    if key not in _REBUILDABLE or recipe.get("calibration_samples"):
        return None
    import dataclasses

    import hub_export  # the facade names every quantizer and its settings class (backends' included)

    quantizer_class, settings_class = getattr(hub_export, str(key[0])), getattr(hub_export, _REBUILDABLE[key])
    known = {f.name for f in dataclasses.fields(settings_class)}
    return quantizer_class(config=settings_class(**{k: v for k, v in settings.items() if k in known}))


def config_of(data: Mapping[str, Any]) -> Any:
    """An ``ExportConfig`` from its recorded dict, its quantizer made again from the recipe."""
    data = dict(data)
    recipe = data.pop("quantizer", None)
    config = AutoExportConfig.from_dict(data)
    return config.replace(quantizer=rebuild_quantizer(recipe)) if recipe else config


def missing_packages(fmt: ExportFormat) -> list[str]:
    """The packages a format's backend needs that are not installed."""
    import importlib.util

    return [p for p in backend_for(fmt).packages if importlib.util.find_spec(p) is None]


def recorded(manifest: Manifest) -> Wanted | None:
    """How to make an existing export again from its ``export.json`` (None: its record cannot be re-run)."""
    try:
        fmt = parse_format(manifest.export_format)
    except HubExportError:
        return None
    plan = manifest.generation or {}
    return Wanted(
        fmt,
        manifest.config,
        manifest.task,
        manifest.generation is not None,
        bool(plan.get("multi_token_decode")),
        recorded=True,
    )


def export_model(
    model: Any,
    export_format: ExportFormat,
    config: Any,
    *,
    task: str | None = None,
    generation: bool = False,
    multi_token_decode: bool = False,
) -> Any:
    """Export ``model`` for ``task``: ``export_for_generation`` when ``generation``, else one graph traced on sample
    inputs built from its config. The export records ``task`` (inferred from the config when None)."""
    from ..sample_inputs import dummy_inputs

    exporter = backend_for(export_format).exporter_class()
    inputs = dummy_inputs(model)
    if generation:
        inputs = {k: v for k, v in inputs.items() if not k.startswith("decoder_")}  # generate() builds those
        exported = exporter.export_for_generation(model, inputs, config=config, multi_token_decode=multi_token_decode)
    else:
        exported = exporter.export(model, inputs, config=config)
    if task is not None:
        exported.task = task
    return exported


def load_for_task(source: str, sha: str, task: str | None, **hub: Any) -> Any:
    """Load ``source@sha`` with the auto class of ``task`` (None: the one its config's architecture names)."""
    model_class = None
    if task is not None:
        import transformers

        from ..tasks import auto_class_name

        model_class = getattr(transformers, auto_class_name(task)[0])
    return load_source(source, revision=sha, model_class=model_class, **hub)

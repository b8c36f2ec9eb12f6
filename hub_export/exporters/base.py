"""``HfExporter``: the export pipeline shared by every format.

``export`` traces the model once (:func:`hub_export.exporters._trace.trace`), hands the ExportedProgram to
the format's ``export_program``, measures parity against eager on the sample inputs through the format's
runner, and returns an :class:`~hub_export.model.ExportedModel`. A backend module defines a subclass with the
same verbs: ``export_program``, ``save_program``, ``load_program`` and ``runner_class``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from .._versions import warn_version_drift
from ..configs import ExportConfig
from ..errors import BackendUnavailableError, ConfigError
from ..formats import ExportFormat
from ..manifest import ComponentEntry
from ._trace import DimBounds, Traced, trace

__all__ = ["HfExporter"]


class HfExporter:
    """Base class of the exporters; pick a subclass per format or use ``AutoHfExporter``.

    Class attributes:
        export_format: The format this exporter writes.
        config_class: Its config dataclass.
        packages: Backend packages (import names) it needs; a missing one raises ``BackendUnavailableError``.
        extra: The pip extra that installs them.
        parity_atol: Tolerance recorded with the measured parity.
    """

    export_format: ClassVar[ExportFormat]
    config_class: ClassVar[type[ExportConfig]]
    packages: ClassVar[tuple[str, ...]] = ()
    distributions: ClassVar[tuple[str, ...]] = ("torch", "transformers")
    extra: ClassVar[str] = ""
    parity_atol: ClassVar[float] = 1e-3

    def __init__(self) -> None:
        warn_version_drift(self.distributions)

    # -- public API -------------------------------------------------------------------------------------
    def export(self, model: Any, sample_inputs: dict[str, Any], *, config: ExportConfig | None = None) -> Any:
        """Export ``model`` traced on ``sample_inputs`` (the kwargs of one forward call).

        Args:
            model: A transformers ``PreTrainedModel`` (or any ``torch.nn.Module`` taking kwargs).
            sample_inputs: Sample kwargs; every tensor kwarg becomes a graph input, flags are applied at trace time.
                Inputs the config implies and the sample lacks are added (BERT's ``token_type_ids``, as zeros:
                see :func:`hub_export.sample_inputs.implied_inputs`).
            config: The export config (defaults to this format's config class with its defaults).

        Returns:
            An ``ExportedModel`` with a single ``"model"`` component.

        Raises:
            ExportError: The model cannot be traced or lowered with these inputs.
            BackendUnavailableError: The backend's package is not installed.
        """
        from ..model import ExportedModel
        from ..sample_inputs import implied_inputs

        config = self._check_config(config)
        self.check_available(config)
        component = self.export_component("model", model, implied_inputs(model, dict(sample_inputs)), config)
        return ExportedModel(
            self.export_format,
            config,
            {"model": component},
            config=getattr(model, "config", None),
            generation_config=getattr(model, "generation_config", None),
            source=getattr(model, "_hub_export_source", None),
        )

    def export_for_generation(
        self,
        model: Any,
        inputs: dict[str, Any],
        *,
        config: ExportConfig | dict[str, ExportConfig] | None = None,
        generation_config: Any = None,
        multi_token_decode: bool = False,
    ) -> Any:
        """Export the stages ``model.generate`` runs (``prefill``, ``decode``; ``encoder`` too for seq2seq).

        The stages' inputs are captured from a real ``generate(**inputs, max_new_tokens=2)`` run (see
        :func:`hub_export.utils.decompose_for_generation`); the returned export's ``generate()`` drives them.

        Example::

            exported = DynamoExporter().export_for_generation(model, inputs, config=DynamoConfig(dynamic=True))
            exported.save_pretrained("out")
            ids = ExportedModel.from_pretrained("out").generate(**inputs, max_new_tokens=8)

        Args:
            model: A transformers generative model.
            inputs: The kwargs of ``generate`` (tokenizer/processor output); small but representative.
            config: One export config, or a dict ``{component: config}`` (``"default"`` for the rest).
            generation_config: The ``GenerationConfig`` to capture with and to save (the model's by default).
            multi_token_decode: Capture ``decode`` over two query tokens so the query axis stays symbolic.

        Returns:
            An ``ExportedModel`` with one component per stage and a ``generation`` loop description.
        """
        from ..generation.export import export_for_generation

        return export_for_generation(
            self,
            model,
            inputs,
            config=config,
            generation_config=generation_config,
            multi_token_decode=multi_token_decode,
        )

    def export_component(self, name: str, module: Any, sample_inputs: dict[str, Any], config: ExportConfig) -> Any:
        """Trace, lower and parity-check one component."""
        from ..model import ExportedComponent

        traced = trace(
            module, sample_inputs, config, bounds=self.dynamic_bounds(module, config) if config.dynamic else None
        )
        if config.quantizer is not None:  # an "fx"-stage quantizer (PT2E) rewrites the traced program
            from ..quantization.pt2e import quantize_traced

            traced = quantize_traced(traced, config)
        program = self.export_program(traced, config)
        metadata = _metadata(traced)
        runner = self.runner_class().from_program(program, metadata, device=None)
        produced = runner.run_flat([t.clone() for t in traced.sample])
        parity = {
            "max_abs_diff": _max_abs_diff(traced.expected, produced),
            "atol": self.parity_atol,
            "inputs": {s.name: list(t.shape) for s, t in zip(metadata.inputs, traced.sample)},
        }
        extra = self.component_extra(traced, config)
        if traced.pinned_axes:  # read by the runner's input check, to say why the axis is static
            extra = {**extra, "pinned_axes": traced.pinned_axes}
        metadata = _replace(metadata, parity=parity, extra=extra)
        if config.quantizer is not None:  # the recipe, as plain data (hub_export.quantization)
            metadata = _replace(metadata, quantization=config.quantizer.to_dict())
        return ExportedComponent(name, self.export_format, program, metadata)

    # -- backend verbs ----------------------------------------------------------------------------------
    def check_available(self, config: ExportConfig) -> None:
        """Raise if the backend (or the device the config targets) is unavailable, before any tracing."""
        import importlib.util

        for package in self.packages:
            if importlib.util.find_spec(package) is None:
                raise BackendUnavailableError(
                    f'{type(self).__name__} needs {package!r}; install it with `pip install "hub-export[{self.extra}]"`.'
                )
        if config.quantizer is not None:
            from ..quantization.base import find_quantizer, stage_for

            find_quantizer(config, "")  # type check only
            config.quantizer.check_available(stage_for(config, config.quantizer), config.export_format.value)

    def dynamic_bounds(self, module: Any, config: ExportConfig) -> DimBounds | None:
        """Per-axis ``(min, max)`` for a ``dynamic=True`` trace (see :data:`DimBounds`); None leaves dims unbounded."""
        return None

    def export_program(self, traced: Traced, config: ExportConfig) -> Any:
        """Lower the traced ExportedProgram to this format's program object."""
        raise NotImplementedError

    def component_extra(self, traced: Traced, config: ExportConfig) -> dict[str, Any]:
        """Backend-specific plain data recorded with the component (``extra`` in the manifest)."""
        return {}

    @classmethod
    def save_program(cls, program: Any, directory: Path, component: str) -> list[str]:
        """Write ``program`` into ``directory``; return the relative paths written (main file first)."""
        raise NotImplementedError

    @classmethod
    def load_program(cls, directory: Path, component: str, entry: ComponentEntry) -> Any:
        """Load a program saved by :meth:`save_program`; files are already verified against the manifest."""
        raise NotImplementedError

    @classmethod
    def runner_class(cls) -> type:
        """The runner class of this format."""
        raise NotImplementedError

    # -- helpers ----------------------------------------------------------------------------------------
    def _check_config(self, config: ExportConfig | None) -> ExportConfig:
        if config is None:
            return self.config_class()
        if not isinstance(config, self.config_class) or config.export_format is not self.export_format:
            raise ConfigError(
                f"{type(self).__name__} takes a {self.config_class.__name__}, got {type(config).__name__}; "
                "use AutoHfExporter.from_config(config) to pick the matching exporter."
            )
        return config


def _metadata(traced: Traced) -> ComponentEntry:
    return ComponentEntry(
        files=(),
        architecture=traced.architecture,
        dtype=traced.dtype,
        device=traced.device,
        inputs=tuple(traced.inputs),
        outputs=tuple(traced.outputs),
        input_structure=tuple(traced.input_structure),
        output_structure=traced.output_structure,
        constants=dict(traced.constants),
        dims=dict(traced.dims),
    )


def _replace(entry: ComponentEntry, **changes: Any) -> ComponentEntry:
    import dataclasses

    return dataclasses.replace(entry, **changes)


def _max_abs_diff(expected: list[Any], produced: list[Any]) -> float:
    import torch

    if len(expected) != len(produced):
        raise RuntimeError(f"The exported program returned {len(produced)} outputs, eager returned {len(expected)}.")
    worst = 0.0
    for a, b in zip(expected, produced):
        b = torch.as_tensor(b).to(a.device)
        if a.shape != b.shape:
            raise RuntimeError(f"Output shape {tuple(b.shape)} differs from eager {tuple(a.shape)}.")
        if a.numel():
            worst = max(worst, float((a.double() - b.double()).abs().max()))
    return worst

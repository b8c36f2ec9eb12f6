"""``hub-export export MODEL --format F [--format F2 ...] --output DIR``: export a Hub or local model."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .._progress import stage
from ..errors import HubExportError
from ..formats import ExportFormat, backend_for, parse_format
from ._args import (
    add_command,
    add_format_option,
    add_hub_options,
    add_output_options,
    add_task_option,
    check_task,
    spelled_as_path,
)

__all__ = ["DTYPES", "register", "run", "load_model"]

#: ``--dtype`` choices: ``auto`` keeps the dtype the checkpoint was saved in.
DTYPES = ("auto", "float32", "float16", "bfloat16")
#: ``--quantize`` choices: weight-only quantization, the int4/int8 layouts ONNX Runtime and OpenVINO run.
QUANTIZE = ("int4", "int8")


def register(subparsers: Any) -> None:
    """Add the ``export`` command."""
    parser = add_command(
        subparsers,
        "export",
        help="export a model (Hub repo id or local folder) to one or more formats",
        description="Load MODEL (a Hub repo, pinned to the commit --revision resolves to, or a local folder with "
        "config.json and *.safetensors), trace it on sample inputs, lower it to each --format, check it against the "
        "eager model and save it with its export.json and the model's tokenizer and processor files. With several "
        "formats each goes to OUTPUT/<format folder>. --task text-generation (or another generative task) makes "
        "exports whose generate() runs the model's generation.",
        example="hub-export export me/tiny-llama --task text-generation --format onnx --output ./exports",
    )
    parser.add_argument("model", metavar="MODEL", help="Hub repo id (owner/name) or local model folder")
    add_format_option(parser, help="format to export")
    parser.add_argument(
        "-o",
        "--output",
        "--local-dir",
        dest="output",
        metavar="DIR",
        required=True,
        type=Path,
        help="folder to write the export to",
    )
    parser.add_argument(
        "--dynamic",
        dest="dynamic",
        action="store_true",
        default=True,
        help="dynamic shapes (the default here; in Python an ExportConfig defaults to dynamic=False, as in "
        "transformers.exporters: pass dynamic=True there)",
    )
    parser.add_argument("--static", dest="dynamic", action="store_false", help="static shapes (the sample's sizes)")
    parser.add_argument(
        "--subfolder-per-format",
        action="store_true",
        help="write each format to OUTPUT/<format folder> (always on with several formats)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="JSON or YAML file: {format: {export config fields}} (the file sync --config reads)",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default="auto",
        help="the dtype to export in: the checkpoint's (auto, the default) or float32, float16, bfloat16 "
        "(the model is converted after loading; see docs/precision.md)",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZE,
        default=None,
        help="quantize the weights (activations stay float): onnx gets ONNX Runtime's MatMulNBits (blocks of 32, "
        "symmetric; the layout onnxruntime-genai and transformers.js load), openvino NNCF's weight compression "
        "(int4: int4_sym, groups of 128; int8: int8_asym); a bfloat16 model exports to onnx this way, "
        "one weight at a time (see docs/quantization.md)",
    )
    add_task_option(parser)
    add_hub_options(parser, revision_help="source revision for a Hub model: branch, tag or commit sha (default: main)")
    add_output_options(parser)
    parser.set_defaults(func=run, revision=None)


def load_model(
    model: str,
    revision: str | None = None,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    task: str | None = None,
) -> Any:
    """Load a local model folder, or a Hub model pinned to the commit ``revision`` resolves to, with the auto class
    of ``task`` (default: the one the config's architecture names).

    Raises:
        HubExportError: A local path that is not a model folder (missing, a file, no config.json or no weights).
        HubError: The Hub model cannot be loaded.
    """
    local = Path(model).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise HubExportError(
                f"{model} has no config.json, so it is not a transformers model folder: save the model with "
                "save_pretrained (config.json + *.safetensors), or give a Hub repo id."
            )
        if not any(local.glob("*.safetensors")):
            raise HubExportError(
                f"{model} has no *.safetensors weights; hub_export loads safetensors only (save_pretrained writes them)."
            )
        from ..hub.source import load_model_folder

        with stage(f"loading {model}"):
            return load_model_folder(local, _task_class(task), model)
    if local.exists():
        raise HubExportError(f"{model} is a file; MODEL is a model folder (config.json + *.safetensors) or a repo id.")
    if spelled_as_path(model):
        raise HubExportError(
            f"no folder {model}: MODEL is an existing model folder (config.json + *.safetensors) or a Hub repo id "
            "(owner/name)."
        )
    from ..hub.source import load_source

    return load_source(
        model, revision=revision or "main", model_class=_task_class(task), token=token, endpoint=endpoint
    )


def _task_class(task: str | None) -> Any:
    if task is None:
        return None
    import transformers

    from ..tasks import auto_class_name

    return getattr(transformers, auto_class_name(task)[0])


def _configs(args: argparse.Namespace) -> dict[ExportFormat, Any]:
    from ..configs import AutoExportConfig
    from ..hub.sync import load_sync_config

    overrides = load_sync_config(args.config) if args.config else {}  # the file sync --config reads: JSON or YAML
    configs = {}
    for name in dict.fromkeys(args.formats):
        fmt = parse_format(name)
        data = {"dynamic": args.dynamic, **overrides.get(fmt.value, {}), "export_format": fmt.value}
        configs[fmt] = AutoExportConfig.from_dict(data)
        if args.quantize:
            configs[fmt].quantizer = _weight_quantizer(fmt, args.quantize)
    return configs


def _weight_quantizer(fmt: ExportFormat, kind: str) -> Any:
    """The weight-only quantizer ``--quantize`` gives ``fmt`` (its backend's ``weight_quantizer``).

    Raises:
        HubExportError: A format without one (dynamo, executorch).
    """
    make = backend_for(fmt).weight_quantizer
    if make is None:
        from ..formats import backends

        able = " and ".join(sorted(name for name, b in backends().items() if b.weight_quantizer is not None))
        raise HubExportError(
            f"--quantize applies to the {able} formats, not {fmt.value}: export {fmt.value} without it "
            "(or quantize in Python with PT2EQuantizer; see docs/quantization.md)."
        )
    return make(4 if kind == "int4" else 8)


def run(args: argparse.Namespace, console: Any) -> int:
    """Export and save; one line per format (its folder and parity)."""
    from .._files import check_export_folder
    from ..hub.wanted import export_model
    from ..tasks import auto_class_name

    check_task(args)
    configs = _configs(args)
    per_folder = args.subfolder_per_format or len(configs) > 1
    targets = {fmt: args.output / backend_for(fmt).layout.subfolder if per_folder else args.output for fmt in configs}
    for target in targets.values():  # before minutes of work, not after
        check_export_folder(target)
    model = load_model(args.model, args.revision, token=args.token, endpoint=args.endpoint, task=args.task)
    if args.dtype != "auto":
        import torch

        model = model.to(getattr(torch, args.dtype))
    generation = bool(args.task) and auto_class_name(args.task, model.config)[1]
    done = []
    for fmt, config in configs.items():
        exported = export_model(model, fmt, config, task=args.task, generation=generation)
        target = targets[fmt]
        with stage(f"saving {target}"):
            exported.save_pretrained(target)
        measured = [c.metadata.parity for c in exported.components.values() if c.metadata.parity]
        parity = max(measured, key=lambda p: p["max_abs_diff"])
        console.line(f"{fmt.value}: {target} (max abs diff vs eager {parity['max_abs_diff']:.2e})")
        done.append(
            {
                "format": fmt.value,
                "path": str(target),
                "task": exported.task,
                "generation": exported.generation is not None,
                "max_abs_diff": parity["max_abs_diff"],
                "atol": parity["atol"],
            }
        )
    hint = _generation_hint(model, generation)
    if hint:
        console.warn(hint)
    source = getattr(model, "_hub_export_source", None)
    console.result(
        {
            "model": args.model,
            "source": {"repo_id": source.repo_id, "commit": source.revision} if source else None,
            "exports": done,
        },
        essential=[item["path"] for item in done],
    )
    return 0


def _generation_hint(model: Any, generation: bool) -> str | None:
    """For a generative model exported as one graph: how to get an export that generates."""
    from ..errors import ConfigError
    from ..tasks import auto_class_name, infer_task

    if generation:
        return None
    try:
        task = infer_task(model.config)
    except ConfigError:
        return None
    if not auto_class_name(task, model.config)[1]:
        return None
    return f"one graph of the model's forward (no generate()); add --task {task} to export for generation"

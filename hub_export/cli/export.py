"""``hub-export export MODEL --format F [--format F2 ...] --output DIR``: export a local or Hub model."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..errors import HubExportError
from ..formats import ExportFormat, backend_for, parse_format

__all__ = ["register", "run", "load_model"]


def register(subparsers: Any) -> None:
    """Add the ``export`` command."""
    parser = subparsers.add_parser("export", help="export a model (Hub repo id or local folder) to one or more formats")
    parser.add_argument("model", help="Hub repo id or local model folder (config.json + safetensors)")
    parser.add_argument(
        "--format",
        "-f",
        dest="formats",
        action="append",
        required=True,
        choices=[f.value for f in ExportFormat],
        help="format to export (repeatable)",
    )
    parser.add_argument("--output", "-o", required=True, type=Path, help="output folder")
    parser.add_argument("--revision", default="main", help="source revision (Hub models)")
    parser.add_argument("--dynamic", dest="dynamic", action="store_true", default=True, help="dynamic shapes (default)")
    parser.add_argument("--static", dest="dynamic", action="store_false", help="static shapes")
    parser.add_argument(
        "--subfolder-per-format",
        action="store_true",
        help="write each format to OUTPUT/<format folder> (always on with several formats)",
    )
    parser.add_argument("--config", type=Path, help="JSON file: {format: export config fields}")
    parser.set_defaults(func=run)


def load_model(model: str, revision: str = "main") -> Any:
    """Load a local model folder, or a Hub model pinned to the commit ``revision`` resolves to."""
    local = Path(model)
    if local.is_dir():
        from ..hub.source import _model_class

        if not any(local.glob("*.safetensors")):
            raise HubExportError(f"{local} has no *.safetensors weights; hub_export loads safetensors only.")
        return _model_class(local).from_pretrained(str(local)).eval()
    from ..hub.source import load_source

    return load_source(model, revision=revision)


def _configs(args: argparse.Namespace) -> dict[ExportFormat, Any]:
    import json

    from ..configs import AutoExportConfig

    overrides = json.loads(args.config.read_text()) if args.config else {}
    configs = {}
    for name in dict.fromkeys(args.formats):
        fmt = parse_format(name)
        data = {"dynamic": args.dynamic, **overrides.get(fmt.value, {}), "export_format": fmt.value}
        configs[fmt] = AutoExportConfig.from_dict(data)
    return configs


def run(args: argparse.Namespace) -> int:
    """Export and save; prints one line per format."""
    from ..export.auto import exporter_class
    from ..sample_inputs import dummy_inputs

    configs = _configs(args)
    model = load_model(args.model, args.revision)
    inputs = dummy_inputs(model)
    per_folder = args.subfolder_per_format or len(configs) > 1
    for fmt, config in configs.items():
        exported = exporter_class(fmt)().export(model, inputs, config=config)
        target = args.output / backend_for(fmt).layout.subfolder if per_folder else args.output
        exported.save_pretrained(target)
        parity = exported.components["model"].metadata.parity
        print(f"{fmt.value}: {target} (max abs diff vs eager {parity['max_abs_diff']:.2e})")
    return 0

"""Where an export's time goes, at real size: the export of one model to one format, split into timed stages.

The stages are hub_export's own (``tracing``, ``lowering to <format>``, ``checking parity``: what the CLI prints)
and, inside them, the calls that do the work, timed by wrapping them for this process only: the eager run that
gives the parity reference, ``torch.export.export``, ``run_decompositions``, ``torch.onnx.export``, the ONNX
optimizer and fusions, OpenVINO's ``convert_model``, the parity runner's build (an ONNX Runtime session, an OpenVINO
compiled model) and its run. A wrapped call nested in another is counted in both (inclusive seconds). Run it under
``py-spy record --format raw`` for a sampled breakdown of the rest.

    python benchmarks/export_profile.py --model qwen2.5-0.5b --format onnx
    python benchmarks/export_profile.py --model qwen2.5-0.5b --format openvino --generation --layers 4

Each run appends one JSON line to ``--results`` (stages, calls, export s, load average, versions).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the hub_export of this checkout, not an installed one

#: (module, attribute path, label): calls timed while exporting, when their module is importable.
TIMED = [
    ("hub_export.export.exporter", "trace", "trace (eager reference + torch.export)"),
    ("torch.export", "export", "torch.export.export"),
    ("torch.export.exported_program", "ExportedProgram.run_decompositions", "run_decompositions"),
    ("torch.onnx", "export", "torch.onnx.export"),
    ("onnxscript.optimizer", "optimize_ir", "onnx optimizer (optimize_ir)"),
    ("onnxscript.rewriter.onnx_fusions", "fuse", "onnx fusions"),
    ("hub_export.backends.onnx.exporter", "fold_weight_transposes", "fold weight transposes"),
    ("hub_export.backends.onnx.runner", "OnnxRunner.for_parity", "parity runner: ORT session"),
    ("hub_export.backends.onnx.runner", "OnnxRunner.run_flat", "ORT run"),
    ("openvino", "convert_model", "openvino.convert_model"),
    ("hub_export.backends.openvino.runner", "OpenVINORunner.for_parity", "parity runner: OV compile"),
    ("hub_export.backends.openvino.runner", "OpenVINORunner.run_flat", "OV run"),
    ("hub_export.backends.dynamo.runner", "DynamoRunner.from_program", "parity runner: program.module()"),
    ("hub_export.backends.dynamo.runner", "DynamoRunner.run_flat", "pt2 run"),
    ("hub_export.backends.executorch.exporter", "ExecutorchExporter.export_program", "executorch lowering"),
    ("hub_export.generation.export", "decompose_with_capture", "generation: capture generate()"),
    ("hub_export.generation.export", "check_one_graph", "generation: one-graph check"),
]


class Calls:
    """Inclusive seconds and counts of the wrapped calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.count: dict[str, int] = collections.defaultdict(int)

    def wrap(self, function: Any, label: str) -> Any:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start
                self.count[label] += 1

        return timed


@contextlib.contextmanager
def timed_calls(calls: Calls) -> Any:
    """Wrap every importable call of :data:`TIMED` for the duration of the block."""
    undo = []
    for module_name, path, label in TIMED:
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        *parents, name = path.split(".")
        for part in parents:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, name):
            continue
        original = owner.__dict__.get(name, getattr(owner, name)) if isinstance(owner, type) else getattr(owner, name)
        wrapped: Any = calls.wrap(getattr(owner, name), label)
        if isinstance(original, classmethod):
            wrapped = classmethod(calls.wrap(original.__func__, label))
        setattr(owner, name, wrapped)
        undo.append((owner, name, original))
    try:
        yield
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


class Stages:
    """A :class:`hub_export._progress.StageListener` that keeps each stage's seconds."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)

    def started(self, name: str) -> None:
        pass

    def finished(self, name: str, seconds: float, failed: bool) -> None:
        self.seconds[name] += seconds


def _skipped_rules_seconds(exported: Any) -> float:
    """Seconds onnxscript's multi-output default rules (which the export leaves out) take on the exported graph: what
    the optimizer would spend on them, measured in the same process."""
    from onnxscript import rewriter

    rules = [r for r in rewriter._DEFAULT_REWRITE_RULES if not r._target_pattern.has_single_output_node]
    started = time.perf_counter()
    for component in exported.components.values():
        rewriter.pattern.RewriteRuleSet(rules).apply_to_model(component.program)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Build, export with the stages timed, print the table and append the row."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--format", default="onnx")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--generation", action="store_true")
    parser.add_argument("--label", default="", help="what code this measures (recorded with the row)")
    parser.add_argument("--results", type=Path, default=HERE / "export-profile.jsonl")
    args = parser.parse_args(argv)

    import torch
    from _models import build
    from scale import _export, _inputs, versions

    from hub_export._progress import listen

    started = time.perf_counter()
    model = build(args.model, getattr(torch, args.dtype), layers=args.layers)
    build_s = time.perf_counter() - started
    sample = _inputs(1, 32, 0)
    calls, stages = Calls(), Stages()
    with timed_calls(calls), listen(stages):
        started = time.perf_counter()
        exported = _export("hub", args.format, model, sample, args.generation)
        export_s = time.perf_counter() - started
    skipped = _skipped_rules_seconds(exported) if args.format == "onnx" else None
    row = {
        "model": args.model,
        "dtype": args.dtype,
        "format": args.format,
        "layers": args.layers,
        "generation": args.generation,
        "label": args.label,
        "build_s": build_s,
        "export_s": export_s,
        "stages": dict(stages.seconds),
        "skipped_rules_s": skipped,
        "calls": {k: [v, calls.count[k]] for k, v in calls.seconds.items()},
        "load_average": os.getloadavg(),
        "versions": versions(),
        "measured": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(f"{args.model} {args.dtype} {args.format}{' generation' if args.generation else ''}: export {export_s:.1f} s")
    for name, seconds in stages.seconds.items():
        print(f"  stage {name:<40} {seconds:7.1f} s")
    for name, (seconds, count) in row["calls"].items():
        print(f"    {name:<42} {seconds:7.1f} s  x{count}")
    if skipped is not None:
        print(f"  the rewrite rules the optimizer skips (multi-output), run on the exported graph: {skipped:.1f} s")
    print(f"  load average {row['load_average'][0]:.1f}")
    with open(args.results, "a") as handle:
        handle.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

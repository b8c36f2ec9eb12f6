"""Per-call cost of ``ExportedModel.__call__`` over the raw runtime call, on every backend, and the compiled ``.pt2``.

Not a test. The small Llama of ``benchmarks/generation.py`` (58M parameters, random weights) is exported once per
backend with ``dynamic=True`` (and once more with ``DynamoConfig(compile="aoti")``), saved and loaded, and called on
batch 1, sequence 128. Each backend runs in a process of its own; in it, the raw runtime call and
``exported(**inputs)`` alternate call by call (the first of a pair alternating too), so a busy neighbour slows both
alike:

* ONNX Runtime: ``session.run(None, feed)`` with numpy inputs made once;
* OpenVINO: ``request.infer(arrays)`` on the runner's own infer request;
* Dynamo: ``ExportedProgram.module()(*flat)``; compiled: the AOTInductor model on the same flat inputs;
* ExecuTorch: ``method.execute(flat)``.

Printed per backend: the medians, the paired median of wrapper / raw, the time each ``exported(**inputs)`` call spends
outside the runtime's own call (the runner's session, request, module or method is wrapped to time it: signature
checks, conversions, rebuilding the ModelOutput), that time as a share of the raw call, and eager PyTorch / each
(eager runs in the same process, in its own block, with torch's threads set to the cores available). On a busy
machine the paired ratio carries the neighbours' noise; the time outside the runtime does not. Usage::

    python benchmarks/runner_overhead.py [--iters 30] [--backends onnx openvino dynamo dynamo-aoti executorch]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BACKENDS = ("onnx", "openvino", "dynamo", "dynamo-aoti", "executorch")


def _model() -> Any:
    """The 58M Llama of benchmarks/generation.py (same shape, same seed)."""
    from generation import small_llama  # this script's own folder is on sys.path

    return small_llama()


def _timed_ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


class _Inside:
    """Stands in for the runtime object a runner calls (ORT session, OpenVINO request, ExecuTorch method) and adds
    the seconds spent in its ``method`` to :attr:`seconds`; every other attribute is the object's own."""

    def __init__(self, target: Any, method: str) -> None:
        self._target, self._method, self.seconds = target, method, 0.0

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name != self._method:
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


class _InsideCall(_Inside):
    """:class:`_Inside` for a runtime that is called itself (the Dynamo module, the AOTInductor model)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._target(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


#: backend -> (the runner attribute holding the runtime, the method a call runs)
_RUNTIME = {"onnx": ("session", "run"), "openvino": ("request", "infer"), "executorch": ("method", "execute")}


def _raw_call(backend: str, exported: Any, flat: list[Any]) -> Callable[[], Any]:
    """The runtime's own call on inputs converted once (bound now: :func:`_time_inside` later wraps the runner's)."""
    runner = exported.runners["model"]
    if backend == "onnx":
        feed = {name: flat[i].numpy() for i, name in runner._feed}
        run = runner.session.run
        return lambda: run(None, feed)
    if backend == "openvino":
        arrays = {port: flat[i].numpy() for i, port in runner._inputs}
        infer = runner.request.infer
        return lambda: infer(arrays)
    if backend.startswith("dynamo"):
        import torch

        inputs = [t.contiguous() for t in flat]
        module = runner.module

        def call() -> Any:
            with torch.no_grad():
                return module(*inputs)

        return call
    inputs = [t.contiguous() for t in flat]
    execute = runner.method.execute
    return lambda: execute(inputs)


def _time_inside(backend: str, runner: Any) -> _Inside:
    """Wrap the runner's runtime so that the time ``ExportedModel`` spends inside it is counted."""
    if backend.startswith("dynamo"):
        runner.module = inside = _InsideCall(runner.module, "")
        return inside
    attribute, method = _RUNTIME[backend]
    inside = _Inside(getattr(runner, attribute), method)
    setattr(runner, attribute, inside)
    return inside


def child(backend: str, iters: int, workdir: Path) -> dict[str, Any]:
    """Export, load and time one backend (in this process)."""
    import torch

    from hub_export import ExportedModel
    from hub_export.export.auto import exporter_class

    model = _model()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 32000, (1, 128), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    fmt = "dynamo" if backend.startswith("dynamo") else backend
    exporter = exporter_class(fmt)()
    options: dict[str, Any] = {"dynamic": True}
    if backend == "dynamo-aoti":
        options["compile"] = "aoti"
    start = time.perf_counter()
    exported = exporter.export(model, inputs, config=exporter.config_class(**options))
    export_s = time.perf_counter() - start
    folder = exported.save_pretrained(workdir / backend)
    exported = ExportedModel.from_pretrained(folder, trust_native_code=backend == "dynamo-aoti")
    runner = exported.runners["model"]
    flat = runner.flatten_inputs(inputs)
    raw = _raw_call(backend, exported, flat)

    def wrapper() -> Any:
        return exported(**inputs)

    def eager() -> Any:
        with torch.no_grad():
            return model(**inputs)

    inside = _time_inside(backend, runner)
    for fn in (raw, wrapper, eager):
        for _ in range(3):
            fn()
    samples: dict[str, list[float]] = {"raw": [], "wrapper": [], "eager": [], "outside": []}
    samples["eager"] = [_timed_ms(eager) for _ in range(iters)]
    for i in range(iters):
        for key in ("raw", "wrapper") if i % 2 == 0 else ("wrapper", "raw"):
            before = inside.seconds
            samples[key].append(_timed_ms(raw if key == "raw" else wrapper))
            if key == "wrapper":
                samples["outside"].append(samples[key][-1] - (inside.seconds - before) * 1000)
    with torch.no_grad():
        diff = float((exported(**inputs).logits - model(**inputs).logits).abs().max())
    return {
        "backend": backend,
        **{k: statistics.median(v) for k, v in samples.items()},
        "paired": statistics.median(w / r for w, r in zip(samples["wrapper"], samples["raw"])),
        "python": 1 + statistics.median(samples["outside"]) / statistics.median(samples["raw"]),
        "export_s": export_s,
        "max_abs_diff": diff,
        "load": os.getloadavg()[0],
    }


def main() -> None:
    """Run each backend in its own process and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.iters, Path(args.workdir))))
        return
    before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="hub_export_overhead_") as tmp:
        for backend in args.backends:
            command = [sys.executable, __file__, "--child", backend, "--iters", str(args.iters), "--workdir", tmp]
            done = subprocess.run(command, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode or not lines:
                tail = " | ".join(done.stderr.strip().splitlines()[-2:])[-300:]
                rows.append({"backend": backend, "error": tail})
                continue
            rows.append(json.loads(lines[-1]))
            print(f"{backend}: done, load {rows[-1]['load']:.1f}", flush=True)
    import torch

    print(
        f"\nsmall Llama (58M), batch 1, sequence 128; torch {torch.__version__}, {os.cpu_count()} cores; median ms of "
        f"{args.iters} calls each; load average {before:.1f} before, {os.getloadavg()[0]:.1f} after\n"
    )
    print(
        "| backend | eager PyTorch (ms) | raw runtime (ms) | ExportedModel (ms) | ExportedModel / raw (paired) | "
        "outside the runtime (ms) | (raw + outside) / raw | eager / ExportedModel | max abs diff |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            print(f"| {r['backend']} | failed: {r['error']} | | | | | | | |")
            continue
        print(
            f"| {r['backend']} | {r['eager']:.1f} | {r['raw']:.1f} | {r['wrapper']:.1f} | {r['paired']:.3f}x | "
            f"{r['outside']:.2f} | {r['python']:.4f}x | {r['eager'] / r['wrapper']:.2f}x | {r['max_abs_diff']:.1e} |"
        )


if __name__ == "__main__":
    main()

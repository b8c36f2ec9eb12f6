"""A two-graph Dynamo generation export (``prefill`` + ``decode``) of a real-size model: its files and the memory of
loading it and generating, each relative to the weights, with the components sharing ``shared.safetensors`` and,
in the same run, each component holding its own copy (``save_programs`` switched off: the layout before issue #17).

A generation export on Dynamo is usually one graph; this one is forced to two (as when the one-graph check fails,
or for ``compile="aoti"``, a static cache, encoder-decoder or multimodal exports), so both components are written.

    flock /work/tmp/s12/bench.lock env PYTHONPATH=$PWD .venv/bin/python benchmarks/pt2_shared.py --layers 4

``--compile aoti`` compares compiled exports instead (``DynamoConfig(compile="aoti")``, each exported and compiled
once per layout): ``compiled_weights="shared"``, AOTInductor packages without weights, which read the program's
tensors (``shared.safetensors`` and the ``.pt2`` files) at load, against ``compiled_weights="packed"`` (the
default), their weights frozen into each (inductor's ``freezing``, the linear layers' weights prepacked for oneDNN);
it also times the greedy tokens of a generate.

Each load + generate runs in a fresh process (RSS above the process with the libraries imported). Each save reports
its seconds, the bytes it wrote and read (``/proc/self/io``: write and read calls) and its RSS peak, over the weights.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the hub_export of this checkout
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")


def _child(folder: Path) -> None:
    """Load + generate in this fresh process; print the RSS figures, whether the components share memory and the
    seconds of a second generate (the first warms the kernels up)."""
    import torch
    from scale import RssSampler, _inputs

    from hub_export import ExportedModel

    sample = _inputs(1, 32, 0)
    sampler = RssSampler()
    base = sampler.reset()
    loaded = ExportedModel.from_pretrained(folder, trust_native_code=True)
    with torch.no_grad():
        tokens = loaded.generate(**sample, max_new_tokens=8)
    held = sampler.now() - base
    peak = sampler.peak - base
    start = time.perf_counter()
    with torch.no_grad():
        loaded.generate(**sample, max_new_tokens=16, min_new_tokens=16)
    seconds = time.perf_counter() - start
    prefill, decode = (_tensors(loaded.runners[n].module) for n in ("prefill", "decode"))
    shared = sum(n in decode and prefill[n].data_ptr() == decode[n].data_ptr() for n in prefill)
    print(
        json.dumps(
            {
                "held": held,
                "peak": peak,
                "shared": shared,
                "params": len(prefill),
                "tokens": tokens.tolist(),
                "tokens_per_s": 16 / seconds,
            }
        )
    )


def _tensors(module: Any) -> dict[str, Any]:
    """A runner's weights: a module's parameters, or the constants handed to an AOTInductor package (none when the
    package holds its own)."""
    if hasattr(module, "named_parameters"):
        return dict(module.named_parameters())
    return dict(getattr(module, "hub_export_constants", None) or {})


def _io() -> dict[str, int]:
    """This process's I/O counters (``wchar``: bytes handed to write calls; ``rchar``: bytes read)."""
    with open("/proc/self/io") as handle:
        return {key: int(value) for key, value in (line.split(": ") for line in handle)}


def _fresh(folder: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(folder)], capture_output=True, text=True, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--child", type=Path)
    parser.add_argument("--compile", choices=("aoti",), default=None, help="compare compiled exports (see above)")
    args = parser.parse_args()
    if args.child:
        return _child(args.child)
    if args.compile:
        return _compiled(args)
    import pytest
    import torch
    from _models import build, unique_weight_bytes
    from scale import RssSampler, _inputs, versions

    from hub_export import DynamoConfig, DynamoExporter
    from hub_export import formats as registry
    from hub_export.generation import export as generation_export

    print(f"load average {os.getloadavg()}; {versions()}")
    model = build(args.model, layers=args.layers)
    weights = unique_weight_bytes(model)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generation_export, "_export_one_graph", lambda *a: "two graphs (benchmark)")
        exported = DynamoExporter().export_for_generation(model, _inputs(1, 16, 0), config=DynamoConfig(dynamic=True))
    with torch.no_grad():
        expected = model.generate(**_inputs(1, 32, 0), max_new_tokens=8, do_sample=False).tolist()
    del model
    sampler = RssSampler()
    rows, saves = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for layout in ("shared", "own copies"):
            with pytest.MonkeyPatch.context() as patch:
                if layout != "shared":
                    backend = registry.backend_for("dynamo")
                    patch.setitem(registry._BACKENDS, "dynamo", dataclasses.replace(backend, save_programs=None))
                for component in exported.components.values():  # written from the programs, not copied
                    component._files_dir = None
                base, before = sampler.reset(), _io()
                start = time.perf_counter()
                folder = exported.save_pretrained(Path(tmp) / layout.replace(" ", "-"))
                save_s = time.perf_counter() - start
                after, save_peak = _io(), sampler.peak - base
            files = {p.name: p.stat().st_size for p in folder.iterdir()}
            fresh = _fresh(folder)
            assert fresh.pop("tokens") == expected, layout
            written, read = (after[k] - before[k] for k in ("wchar", "rchar"))
            rows.append((layout, sum(files.values()) / weights, fresh["held"] / weights, fresh["peak"] / weights))
            saves.append((layout, save_s, written / weights, read / weights, save_peak / weights))
            print(f"{layout}: files {files}; save {save_s:.1f} s; shared params {fresh['shared']}/{fresh['params']}")
    print(f"\n{args.model} layers={args.layers or 'all'}: weights {weights / 1e6:.0f} MB; tokens == eager")
    print("| layout | files / weights | RSS after load + generate / weights | peak / weights |\n|---|---|---|---|")
    for layout, files_ratio, held, peak in rows:
        print(f"| {layout} | {files_ratio:.3f}x | {held:.2f}x | {peak:.2f}x |")
    print("\n| layout | save s | bytes written / weights | bytes read / weights | save RSS peak / weights |")
    print("|---|---|---|---|---|")
    for layout, seconds, written, read, save_peak in saves:
        print(f"| {layout} | {seconds:.1f} | {written:.2f}x | {read:.2f}x | {save_peak:.2f}x |")
    print(f"load average after: {os.getloadavg()}")


def _compiled(args: argparse.Namespace) -> None:
    """``--compile aoti``: the same model exported and compiled twice, packages without weights (``"shared"``) and
    packages holding their own frozen weights (``"packed"``); files, RSS and tokens/s of each in a fresh process."""
    import torch
    from _models import build, unique_weight_bytes
    from scale import _inputs, versions

    from hub_export import DynamoConfig, DynamoExporter

    print(f"load average {os.getloadavg()}; {versions()}")
    model = build(args.model, layers=args.layers)
    weights = unique_weight_bytes(model)
    with torch.no_grad():
        expected = model.generate(**_inputs(1, 32, 0), max_new_tokens=8, do_sample=False).tolist()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for layout, weights_at in (
            ("packages read shared.safetensors (compiled_weights='shared')", "shared"),
            ("each package holds its frozen weights (compiled_weights='packed')", "packed"),
        ):
            start = time.perf_counter()
            config = DynamoConfig(dynamic=True, compile="aoti", compiled_weights=weights_at)
            exported = DynamoExporter().export_for_generation(model, _inputs(1, 16, 0), config=config)
            export_s = time.perf_counter() - start
            folder = exported.save_pretrained(Path(tmp) / weights_at)
            del exported
            files = {p.name: p.stat().st_size for p in folder.iterdir()}
            fresh = _fresh(folder)
            assert fresh.pop("tokens") == expected, layout
            rows.append((layout, sum(files.values()) / weights, fresh, export_s))
            print(f"{layout}: files {files}; export {export_s:.0f} s; shared {fresh['shared']}/{fresh['params']}")
    print(f"\n{args.model} layers={args.layers or 'all'}: weights {weights / 1e6:.0f} MB; tokens == eager")
    print("| compiled export | files / weights | RSS after load + generate / weights | peak / weights | tokens/s |")
    print("|---|---|---|---|---|")
    for layout, files_ratio, fresh, _ in rows:
        print(
            f"| {layout} | {files_ratio:.3f}x | {fresh['held'] / weights:.2f}x | {fresh['peak'] / weights:.2f}x "
            f"| {fresh['tokens_per_s']:.1f} |"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

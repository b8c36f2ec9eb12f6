"""Generation export time side by side: hub_export's ONNX and OpenVINO exports against onnxruntime-genai's model builder
and optimum-intel, in one run, interleaved.

Each tool converts the same saved Hugging Face folder (random weights at a real size, ``_speed_tools.SIZES``) to its
files on disk, in a fresh process of its own: load the model, export or build, save (``_speed_worker.py prepare``,
the "prepare" of ``generation.py --compare``). Every round runs every tool once, the order rotating between rounds,
and each output is deleted after it is timed. ``--compare-rev REV`` adds our tools at another git revision of this
repository (a worktree under ``--workdir``), so a change is measured against its baseline in the same run.

The table: median seconds and spread per tool, and the median of the per-round ratios of ours to the peer for the
same runtime (hub-onnx / genai, hub-openvino / optimum). Printed with the load average before and after, the hardware
and the versions; ``--results`` appends one JSON line per run::

    python benchmarks/export_time.py --size qwen2-0.5b --rounds 3 --peer-python peers/bin/python --workdir export-times
    python benchmarks/export_time.py --compare-rev HEAD~3 --peer-python peers/bin/python --workdir export-times
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))

from _speed_compare import hardware, versions  # noqa: E402
from _speed_tools import SIZES, build_hf_model  # noqa: E402

#: tool -> (the peer of the same runtime, or None for a peer itself)
TOOLS = {"hub-onnx": "genai", "genai": None, "hub-openvino": "optimum", "optimum": None}


def _checkout(rev: str, workdir: Path) -> Path:
    """A worktree of this repository at ``rev`` (made once per commit)."""
    commit = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", rev], capture_output=True, text=True, check=True)
    sha = commit.stdout.strip()
    tree = workdir / f"rev-{sha[:12]}"
    if not tree.is_dir():
        subprocess.run(["git", "-C", str(PROJECT), "worktree", "add", "--detach", str(tree), sha], check=True)
    return tree


def _prepare(tool: str, source: Path | None, size_dir: Path, peer_python: str) -> float:
    """Seconds ``tool`` takes to convert ``size_dir/hf`` in a process of its own (``source``: our checkout to run)."""
    base = tool.split("@", 1)[0]
    peer = TOOLS[base] is None
    project = source or PROJECT
    env = dict(os.environ)
    if not peer:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project), env.get("PYTHONPATH", "")]))
    out = size_dir / f"timed-{tool.replace('@', '-')}"
    shutil.rmtree(out, ignore_errors=True)
    command = [peer_python if peer else sys.executable, str(project / "benchmarks" / "_speed_worker.py")]
    done = subprocess.run([*command, "prepare", base, str(size_dir), str(out)], capture_output=True, text=True, env=env)
    shutil.rmtree(out, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])[-400:]
        raise RuntimeError(f"{tool} failed (exit {done.returncode}): {tail}")
    return float(json.loads(lines[-1])["prepare_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="qwen2-0.5b", choices=sorted(SIZES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=list(TOOLS))
    parser.add_argument("--compare-rev", default=None, help="also time our tools at this git revision")
    parser.add_argument("--peer-python", default=os.environ.get("PEER_PYTHON", sys.executable))
    parser.add_argument("--workdir", type=Path, default=Path("export-times"))
    parser.add_argument("--results", type=Path, default=None, help="append this run's figures to a JSON-lines file")
    args = parser.parse_args(argv)

    size_dir = args.workdir / args.size
    if not (size_dir / "prompt.json").is_file():
        import torch

        build_hf_model(args.size, size_dir / "hf")
        ids = torch.randint(3, SIZES[args.size]["vocab_size"], (1, 64), generator=torch.Generator().manual_seed(0))
        (size_dir / "prompt.json").write_text(json.dumps({"input_ids": ids.tolist()}))
    sources: dict[str, Path | None] = {tool: None for tool in args.tools}
    if args.compare_rev:
        tree = _checkout(args.compare_rev, args.workdir.resolve())
        for tool in args.tools:
            if TOOLS[tool] is not None:
                sources[f"{tool}@{args.compare_rev}"] = tree
    names = list(sources)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    load_before = os.getloadavg()[0]
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            took = _prepare(name, sources[name], size_dir, args.peer_python)
            seconds[name].append(took)
            print(f"round {round_index + 1}: {name} {took:.1f} s", flush=True)
    load_after = os.getloadavg()[0]

    print(f"\n{args.size}, {args.rounds} rounds, load average {load_before:.1f} before, {load_after:.1f} after")
    print(f"hardware: {hardware()}\nversions: {versions(args.peer_python)}\n")
    print("| tool | export s (median) | spread (min-max) | vs the peer (median of per-round ratios) |")
    print("|---|---:|---|---:|")
    ratios: dict[str, float] = {}
    for name in names:
        peer = TOOLS[name.split("@", 1)[0]]
        ratio = ""
        if peer in seconds:
            ratios[name] = statistics.median(a / b for a, b in zip(seconds[name], seconds[peer], strict=True))
            ratio = f"{ratios[name]:.2f}x ({peer})"
        values = seconds[name]
        print(f"| {name} | {statistics.median(values):.1f} | {min(values):.1f}-{max(values):.1f} | {ratio} |")
    if args.results:
        record: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%d %H:%M"),
            "size": args.size,
            "rounds": args.rounds,
            "seconds": seconds,
            "ratios": ratios,
            "compare_rev": args.compare_rev,
            "load_average": [load_before, load_after],
            "hardware": hardware(),
            "versions": versions(args.peer_python),
        }
        with args.results.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

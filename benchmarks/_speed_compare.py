"""``benchmarks/generation.py --compare [--contention]``: our backends beside the runtime-specific tools, interleaved.

For each model size: a random-weight model is saved once (``save_pretrained``); every tool builds its artifacts from
it in a process of its own (our exports; onnxruntime-genai's model builder; optimum-intel's export), timed. Then
``--rounds`` rounds: in each, every tool runs in a fresh process (one at a time, so memory is one model's and no two
runtimes' thread pools meet), the order rotating between rounds, and generates ``--new-tokens`` greedy tokens after
the prompt ``--repeats`` times after a warm-up. With ``--contention``, two busy processes (a Python spin loop each)
run through every round, the same for every tool.

Tables, per size: tokens/s (median of all runs) and its spread (min-max), CPU ms per token (all threads of the tool's
process: the cost a shared machine pays), each row against eager and against the best peer on the same runtime and
precision (the median of the per-round ratios, so a slow round slows both sides), and whether the tokens equal eager's
(fp32) or how many do (quantized rows). Printed with the load average before and after, the hardware and versions.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _speed_tools import SIZES, TOOLS, Tool, build_hf_model  # noqa: E402

WORKER = Path(__file__).resolve().parent / "_speed_worker.py"
PROJECT = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    """What the rounds measured for one tool."""

    tool: Tool
    prepare_s: float | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None


def _python(tool: Tool, peer_python: str) -> str:
    return peer_python if tool.peer else sys.executable


def _env(tool: Tool) -> dict[str, str]:
    env = dict(os.environ)
    if not tool.peer:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH", "")]))
    return env


def _available(tool: Tool, peer_python: str) -> str | None:
    """None when the tool's package imports under its interpreter, else why it is skipped."""
    code = f"import importlib; importlib.import_module({tool.module!r})"
    done = subprocess.run([_python(tool, peer_python), "-c", code], capture_output=True, text=True, env=_env(tool))
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or ["?"])[-1]
    where = "--peer-python" if tool.peer else "this environment"
    return f"{tool.module} does not import under {where} ({last[:160]})"


def _worker(tool: Tool, peer_python: str, args: list[str], timeout: float) -> dict[str, Any]:
    command = [_python(tool, peer_python), str(WORKER), *args]
    done = subprocess.run(command, capture_output=True, text=True, env=_env(tool), timeout=timeout)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])[-400:]
        raise RuntimeError(f"{tool.name} {args[0]} failed (exit {done.returncode}): {tail}")
    return json.loads(lines[-1])


def _burners(count: int) -> list[subprocess.Popen]:
    code = "while True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=30)


def prepare_size(size: str, workdir: Path, tools: list[Tool], peer_python: str, rows: dict[str, Row]) -> dict:
    """The model of ``size`` and every tool's artifacts (reused when already in ``workdir``)."""
    import torch

    size_dir = workdir / size
    size_dir.mkdir(parents=True, exist_ok=True)
    info_path = size_dir / "model.json"
    if not info_path.is_file():
        info = build_hf_model(size, size_dir / "hf")
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(3, SIZES[size]["vocab_size"], (1, 64), generator=generator)
        (size_dir / "prompt.json").write_text(json.dumps({"input_ids": ids.tolist()}))
        info_path.write_text(json.dumps(info))
    for tool in tools:
        row = rows[tool.name]
        row.skipped = _available(tool, peer_python)
        if row.skipped:
            print(f"  skip {tool.name}: {row.skipped}", flush=True)
            continue
        out = size_dir / tool.name
        done = size_dir / f"{tool.name}.prepared.json"
        if done.is_file():
            row.prepare_s = json.loads(done.read_text())["prepare_s"]
            continue
        print(f"  preparing {tool.name} ({size})", flush=True)
        try:
            result = _worker(tool, peer_python, ["prepare", tool.name, str(size_dir), str(out)], timeout=7200)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            row.skipped = f"preparing failed: {exc}"
            print(f"  skip {tool.name}: {row.skipped}", flush=True)
            continue
        row.prepare_s = result["prepare_s"]
        done.write_text(json.dumps(result))
    return json.loads(info_path.read_text())


def measure(size_dir: Path, tools: list[Tool], rows: dict[str, Row], args: Any) -> None:
    """``args.rounds`` rounds, each tool once per round in its own process, the order rotating."""
    live = [t for t in tools if not rows[t.name].skipped]
    for round_index in range(args.rounds):
        shift = round_index % max(1, len(live))
        order = live[shift:] + live[:shift]
        for tool in order:
            command = ["run", tool.name, str(size_dir), str(size_dir / tool.name)]
            command += ["--new-tokens", str(args.new_tokens), "--repeats", str(args.repeats)]
            try:
                result = _worker(tool, args.peer_python, command, timeout=3600)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                rows[tool.name].skipped = f"run failed: {exc}"
                print(f"  {tool.name} failed: {exc}", flush=True)
                live.remove(tool)
                continue
            result["round"] = round_index
            rows[tool.name].runs.append(result)
            print(
                f"  round {round_index + 1}/{args.rounds} {tool.name}: "
                f"{', '.join(f'{s:.1f}' for s in result['tok_s'])} tok/s, load {result['load']:.1f}",
                flush=True,
            )


def _round_medians(row: Row) -> dict[int, float]:
    return {run["round"]: statistics.median(run["tok_s"]) for run in row.runs}


def _paired(row: Row, other: Row) -> float | None:
    """Median over rounds of (row's median / other's median) in the same round."""
    mine, theirs = _round_medians(row), _round_medians(other)
    ratios = [mine[r] / theirs[r] for r in mine if r in theirs and theirs[r] > 0]
    return statistics.median(ratios) if ratios else None


def _best_peer(row: Row, rows: dict[str, Row]) -> Row | None:
    peers = [
        r
        for r in rows.values()
        if r.tool.peer and r.runs and (r.tool.runtime, r.tool.precision) == (row.tool.runtime, row.tool.precision)
    ]
    if not peers:
        return None
    return max(peers, key=lambda r: statistics.median(s for run in r.runs for s in run["tok_s"]))


def table(size: str, info: dict, rows: dict[str, Row], args: Any, loads: tuple[float, float]) -> str:
    """The markdown table of one size."""
    eager = rows.get("eager")
    reference = eager.runs[0]["ids"] if eager and eager.runs else None
    mode = "under contention (2 busy processes of ours)" if args.contention else "no busy processes of ours"
    lines = [
        f"### {size}: {info['params'] / 1e6:.0f}M parameters, {info['weight_bytes'] / 1e6:.0f} MB fp32, {mode}",
        "",
        f"prompt 64 random ids, {args.new_tokens} new tokens, greedy, batch 1; {args.rounds} rounds x "
        f"{args.repeats} runs after a warm-up, tools interleaved; load average {loads[0]:.1f} before, "
        f"{loads[1]:.1f} after",
        "",
        "| tool | runtime | precision | tok/s (median) | spread (min-max) | CPU ms/token | vs eager | "
        "vs best peer, same runtime and precision | tokens == eager | ready (prepare + load), s |",
        "|---|---|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for row in rows.values():
        tool = row.tool
        if row.skipped or not row.runs:
            lines.append(f"| {tool.name} | {tool.runtime} | {tool.precision} | skipped: {row.skipped} | | | | | | |")
            continue
        speeds = [s for run in row.runs for s in run["tok_s"]]
        cpu = statistics.median(run["cpu_ms_per_token"] for run in row.runs)
        vs_eager = _paired(row, eager) if eager and eager.runs and row is not eager else None
        peer = None if tool.peer else _best_peer(row, rows)
        vs_peer = _paired(row, peer) if peer else None
        same = "?"
        if reference is not None:
            ids = row.runs[0]["ids"]
            matches = sum(a == b for a, b in zip(ids, reference))
            same = "yes" if ids == reference else f"{matches}/{len(reference)}"
        ready = (row.prepare_s or 0.0) + statistics.median(run["ready_s"] for run in row.runs)
        lines.append(
            f"| {tool.name} | {tool.runtime} | {tool.precision} | {statistics.median(speeds):.1f} | "
            f"{min(speeds):.1f}-{max(speeds):.1f} | {cpu:.2f} | "
            f"{f'{vs_eager:.2f}x' if vs_eager else ('1.00x' if row is eager else '')} | "
            f"{f'{vs_peer:.2f}x ({peer.tool.name})' if vs_peer and peer else ''} | {same} | {ready:.1f} |"
        )
    return "\n".join(lines)


def versions(peer_python: str) -> str:
    """Versions of the project's packages and of the peers' environment."""
    import importlib.metadata as md

    def have(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "-"

    ours = ", ".join(
        f"{n} {have(n)}" for n in ("torch", "transformers", "onnxruntime", "openvino", "nncf", "executorch")
    )
    code = (
        "import importlib.metadata as m\n"
        "for n in ('onnxruntime-genai', 'optimum-intel', 'optimum', 'transformers', 'openvino', 'onnxruntime'):\n"
        "    try: print(n, m.version(n))\n"
        "    except Exception: print(n, '-')\n"
    )
    try:
        peer = subprocess.run([peer_python, "-c", code], capture_output=True, text=True, timeout=120).stdout
        peers = ", ".join(line.strip() for line in peer.splitlines() if line.strip())
    except (OSError, subprocess.TimeoutExpired) as exc:
        peers = f"unavailable ({exc})"
    return f"ours: python {platform.python_version()}, {ours}; peers' environment: {peers}"


def hardware() -> str:
    """CPU model and the cores this process may use."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), model)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} cores available"


def _append_results(path: Path, size: str, rows: dict[str, Row], args: Any, loads: tuple[float, float]) -> None:
    """One JSON line per row: what the table is computed from (every run's tokens/s, CPU time, load, tokens)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with path.open("a", encoding="utf-8") as handle:
        for row in rows.values():
            record = {
                "date": stamp,
                "size": size,
                "contention": bool(args.contention),
                "tool": row.tool.name,
                "runtime": row.tool.runtime,
                "precision": row.tool.precision,
                "prepare_s": row.prepare_s,
                "skipped": row.skipped,
                "load_before": loads[0],
                "load_after": loads[1],
                "runs": row.runs,
            }
            handle.write(json.dumps(record) + "\n")


def run(args: Any) -> None:
    """Prepare, measure and print the tables of every requested size."""
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tools = [TOOLS[name] for name in args.tools]
    outputs = []
    for size in args.sizes:
        rows = {t.name: Row(t) for t in tools}
        print(f"{size}: preparing in {workdir / size}", flush=True)
        info = prepare_size(size, workdir, tools, args.peer_python, rows)
        burners = _burners(2) if args.contention else []
        try:
            time.sleep(2 if burners else 0)
            before = os.getloadavg()[0]
            measure(workdir / size, tools, rows, args)
            after = os.getloadavg()[0]
        finally:
            _stop(burners)
        outputs.append(table(size, info, rows, args, (before, after)))
        if getattr(args, "results", None):
            _append_results(Path(args.results), size, rows, args, (before, after))
            from charts import speed_bars  # the bar charts next to docs/benchmarks.md's tables

            speed_bars(Path(args.results))
    print()
    print(f"hardware: {hardware()}")
    print(f"versions: {versions(args.peer_python)}")
    for text in outputs:
        print()
        print(text)

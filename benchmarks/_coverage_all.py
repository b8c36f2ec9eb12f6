"""``coverage.py --all``: every model type of transformers' auto mappings, sharded, and its part of the matrix.

The driver runs one backend after another over the shard's types (so a partial run has whole columns), the
pending cells of ``--batch`` types per child process (``coverage.py --child --all``). A watchdog kills a child
that writes no row for ``--timeout`` + 60 s (a hang in native code that SIGALRM cannot interrupt) and records the
cell as timed out; a child that dies records its cell as a crash; either way the next child resumes after it.
Rows carry their time ``t``: across the shard files of ``docs/coverage-all/`` the latest row of a cell wins.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _coverage_generation import GENERATIVE_HEADS, is_generation_backend
from _coverage_quantized import QUANTIZED
from _failure_classes import CLASSES, classify

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "docs" / "coverage-all"
ALL_BACKENDS = ["dynamo", "onnx", "openvino", "executorch"]
#: the generation columns (``export_for_generation`` + ``generate``), run on the generative heads only
GENERATION_BACKENDS = [f"gen-{b}" for b in ALL_BACKENDS]
#: the quantized generation columns (weight-only int8 / int4 on ONNX and OpenVINO: ``_coverage_quantized``)
QUANTIZED_BACKENDS = list(QUANTIZED)
TOOL_NAMES = {"hub": "hub_export", "peer": "transformers.exporters"}
SKIP = ("*", "*")


def parse_shard(text: str | None) -> tuple[int, int]:
    """``'i/n'`` -> (i, n), 1 <= i <= n; None -> (1, 1)."""
    if not text:
        return 1, 1
    i, n = (int(x) for x in text.split("/"))
    if not 1 <= i <= n:
        raise ValueError(f"--shard {text}: expected i/n with 1 <= i <= n")
    return i, n


def shard_of(archs: list[Any], shard: tuple[int, int]) -> list[Any]:
    i, n = shard
    return archs[i - 1 :: n]


def spread(archs: list[Any]) -> list[Any]:
    """Round-robin over the heads (each head's types in name order): a partial run covers every head."""
    groups: dict[str, list[Any]] = {}
    for arch in archs:
        groups.setdefault(arch.head, []).append(arch)
    order = []
    for i in range(max((len(g) for g in groups.values()), default=0)):
        order += [g[i] for _head, g in sorted(groups.items()) if i < len(g)]
    return order


def load_rows(paths: list[Path]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(type, tool, backend) -> the latest row over ``paths`` (skip rows under (type, '*', '*'))."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            key = (row["case"], row["tool"], row["backend"])
            if key not in rows or row.get("t", 0) >= rows[key].get("t", 0):
                rows[key] = row
    return rows


def _append(path: Path, row: dict[str, Any]) -> None:
    row.setdefault("t", round(time.time(), 1))
    cls = classify(row)
    if cls:
        row["class"] = cls
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(row) + "\n")


def _line_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _run_child(cells: list[tuple[str, str, str]], results: Path, timeout: int) -> str | None:
    """Run ``cells`` in one child; None when it finished, else why it stopped ('timed out...' / 'process died').

    The child limits each cell's CPU time itself; this watchdog kills it when it spends ``timeout`` + 120 s of CPU
    without writing a row (a long native call the child's timer cannot interrupt), or writes nothing for
    max(3600, 10 x timeout) s of wall time (a deadlock, which spends no CPU)."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "coverage.py"), "--child", json.dumps(cells), "--all"]
    cmd += ["--results", str(results), "--timeout", str(timeout)]
    proc = subprocess.Popen(cmd, start_new_session=True)
    seen, last, last_cpu = _line_count(results), time.monotonic(), 0.0
    wall_limit = max(3600, 10 * timeout)
    while True:
        try:
            code = proc.wait(timeout=5)
            return None if code == 0 else f"process died (exit code {code})"
        except subprocess.TimeoutExpired:
            pass
        now_lines, cpu = _line_count(results), _cpu_seconds(proc.pid)
        if now_lines != seen:
            seen, last, last_cpu = now_lines, time.monotonic(), cpu
        elif cpu - last_cpu > timeout + 120 or time.monotonic() - last > wall_limit:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its workers
            proc.wait()
            spent = f"{cpu - last_cpu:.0f} s of CPU, {time.monotonic() - last:.0f} s"
            return f"timed out (no result after {spent}; process killed)"


def drive_all(
    archs: list[Any],
    tools: list[str],
    backends: list[str],
    results: Path,
    timeout: int,
    batch: int,
    rerun: bool,
    retry: tuple[str, ...] = (),
    by_type: bool = False,
) -> None:
    """Run every cell of ``archs`` missing from ``results`` (``rerun``: every cell; ``retry``: also the cells
    whose latest row failed with one of these classes, e.g. ``tiny-config`` after a shrinker fix).

    Backend after backend over every type (whole columns), or with ``by_type`` every backend of a type one after
    another in the same child, which builds the type's tiny model once for all of them."""
    started = time.time()
    since = started if rerun else 0.0

    def stale(row: dict[str, Any] | None) -> bool:
        if row is None:
            return True
        if row.get("t", 0) >= started:
            return False
        return row.get("t", 0) < since or (not row.get("ok") and row.get("class") in retry)

    for arch in archs:  # types this environment cannot even enumerate a builder for
        if arch.skip and (arch.model_type, *SKIP) not in load_rows([results]):
            _append(
                results, {"case": arch.model_type, "head": arch.head, "tool": "*", "backend": "*", "skip": arch.skip}
            )
    runnable = [a for a in archs if not a.skip]
    for column in [backends] if by_type else [[b] for b in backends]:
        print(f"== {', '.join(column)}: {len(runnable)} types", flush=True)
        for start in range(0, len(runnable), batch):
            chunk = runnable[start : start + batch]

            def pending() -> list[tuple[str, str, str]]:
                rows = load_rows([results])
                return [
                    (a.model_type, tool, backend)
                    for a in chunk
                    for backend in column
                    for tool in tools
                    if (a.model_type, *SKIP) not in rows
                    and stale(rows.get((a.model_type, tool, backend)))
                    and (not is_generation_backend(backend) or a.head in GENERATIVE_HEADS)
                ]

            cells = pending()
            while cells:
                why = _run_child(cells, results, timeout)
                left = pending()
                if left and left == cells or (why and left):
                    stuck = left[0]
                    _append(
                        results,
                        {
                            "case": stuck[0],
                            "tool": stuck[1],
                            "backend": stuck[2],
                            "ok": False,
                            "reason": why or "process ended without a result",
                        },
                    )
                    left = pending()
                cells = left


def write_all(out: Path) -> None:
    """Write the every-architecture matrix (:func:`section`) from the files of ``docs/coverage-all/``."""
    lines = section()
    if not lines:
        raise SystemExit(f"no results in {RESULTS_DIR}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines[1:]) + "\n")
    print(f"wrote {out}")


def main_all(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--all``: run the shard's cells, then rewrite ``docs/support-matrix-all.md`` (or ``--out``)."""
    from _tiny_configs import enumerate_architectures

    shard = parse_shard(args.shard)
    default_name = "all.jsonl" if shard == (1, 1) else f"shard-{shard[0]}-of-{shard[1]}.jsonl"
    results = args.results or RESULTS_DIR / default_name
    out = args.out or ROOT / "docs" / "support-matrix-all.md"
    if args.report_only:
        write_all(out)
        return
    archs = enumerate_architectures()
    if args.types:
        known = {a.model_type for a in archs}
        unknown = [t for t in args.types if t not in known]
        if unknown:
            parser.error(f"unknown model types {unknown}")
        archs = [a for a in archs if a.model_type in args.types]
    archs = shard_of(archs, shard)  # by name, so a shard's types do not depend on --order
    if args.order == "spread":
        archs = spread(archs)
    if args.fresh and results.exists():
        results.unlink()
    backends = args.backends or ALL_BACKENDS
    print(f"{len(archs)} model types (shard {shard[0]}/{shard[1]}) -> {results}", flush=True)
    retry = tuple(args.retry or ())
    by_type = args.group == "type"
    drive_all(archs, args.tools, backends, results, args.timeout or 300, args.batch, args.rerun, retry, by_type)
    write_all(out)


# ---- report --------------------------------------------------------------------------------------------------
def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.replace("|", "/").replace("\x1b", "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _cause(row: dict[str, Any]) -> str:
    """The one-line reason, with the chained root cause or the traceback line naming it."""
    reason = row.get("reason", "?")
    if row.get("cause"):
        return _short(f"{reason.split(': ', 1)[0]}: … {row['cause']}", 240)
    for line in reversed(row.get("trace", "").splitlines()):
        line = line.strip(" -")
        if (
            any(
                m in line
                for m in (
                    "No ONNX function found",
                    "No conversion rule found",
                    "GuardOnDataDependent",
                    "cannot be exported",
                    "ManifestError",
                )
            )
            and line not in reason
        ):
            reason = f"{reason.split(': ', 1)[0]}: … {line}"
            break
    return _short(reason)


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "—"
    if row.get("ok"):
        return "✅"
    return f"❌ {row.get('class') or classify(row)}"


TOOLS_BOTH = ("hub", "peer")

#: why the peer's cells of a backend fail as they do, shown under that backend's side by side (probed on tiny BERT
#: with transformers 5.23.0, openvino 2026.4.1, executorch 1.5.1 on the machine the matrix ran on: a 2-core x86 CPU
#: with avx512_bf16 and 24 GB of memory)
PEER_NOTES = {
    "openvino": [
        "Why the peer's cells fail the parity check: it records `INFERENCE_PRECISION_HINT=f32` in the saved IR but",
        "compiles with the CPU plugin's default, which is bfloat16 on a CPU with avx512_bf16 (this one): the same",
        "compiled IR of tiny BERT differs from eager by 3.0e-3 as the peer runs it and by 8.9e-8 compiled with",
        "`INFERENCE_PRECISION_HINT=f32`. hub_export compiles float32 models in float32 (see precision.md). On a CPU",
        "without bfloat16 the peer's column would differ.",
    ],
    "executorch": [
        "Why the peer's cells crash: it plans the program's memory at its own bounds for every dynamic axis; loading",
        "tiny BERT's program and running it once takes the process to 14.6 GB, and the cell, which goes on to the",
        "other shape and a reload of the saved program, is stopped by the kernel's out-of-memory killer at 23 GB",
        "resident. hub_export bounds batch and sequence (`ExecutorchExporter.max_batch`, `max_sequence_cap`, the",
        "config's limits) and refuses, before lowering, a plan too large to load.",
    ],
}


def _side_by_side(rows: dict[tuple[str, str, str], dict[str, Any]], built: list[str], backends: list[str]) -> list[str]:
    """Both tools on the model types each backend ran with both: passes, and failing cells per class."""
    lines = [
        "",
        "## Side by side (the model types both tools ran)",
        "",
        "The peer ran on fewer types than hub_export; on the types both ran, failing cells per class (fewer is better).",
        "",
    ]
    for backend in backends:
        both = [t for t in built if (t, "hub", backend) in rows and (t, "peer", backend) in rows]
        both = [t for t in both if all(rows[(t, tool, backend)].get("class") != "tiny-config" for tool in TOOLS_BOTH)]
        if not both:
            continue
        failing = {
            tool: [rows[(t, tool, backend)] for t in both if not rows[(t, tool, backend)].get("ok")]
            for tool in TOOLS_BOTH
        }
        classes = [c for c in CLASSES if any(r.get("class") == c for rs in failing.values() for r in rs)]
        passes = {tool: len(both) - len(failing[tool]) for tool in TOOLS_BOTH}
        lines += [
            f"**{backend}** ({len(both)} types): hub_export passes {passes['hub']}, transformers.exporters "
            f"{passes['peer']}.",
            "",
            "| class | hub_export | transformers.exporters |",
            "|---|---|---|",
        ]
        for cls in classes:
            counts = [sum(r.get("class") == cls for r in failing[tool]) for tool in TOOLS_BOTH]
            lines.append(f"| {cls} | {counts[0]} | {counts[1]} |")
        lines.append("")
        if backend in PEER_NOTES:
            lines += [*PEER_NOTES[backend], ""]
    return lines


def section(paths: list[Path] | None = None) -> list[str]:
    """The Markdown lines of the every-architecture part of the matrix ([] when no results)."""
    paths = paths if paths is not None else sorted(RESULTS_DIR.glob("*.jsonl"))
    rows = load_rows(paths)
    if not rows:
        return []
    for row in rows.values():
        if not row.get("ok") and not row.get("skip"):
            row["class"] = classify(row)
    types = sorted({k[0] for k in rows})
    heads: dict[str, str] = {}
    for (case, _tool, _backend), row in rows.items():
        if row.get("head"):
            heads[case] = row["head"]
    enumerated: list[str] = types
    skipped = {t: rows[(t, *SKIP)]["skip"] for t in types if (t, *SKIP) in rows}
    try:  # the enumeration (and the head of types whose every row failed before the build said it)
        from _tiny_configs import enumerate_architectures

        archs = enumerate_architectures()
        enumerated = sorted({a.model_type for a in archs} | set(types))
        for arch in archs:
            heads.setdefault(arch.model_type, arch.head)
            if arch.skip:  # known before any run: no builder for it here
                skipped.setdefault(arch.model_type, arch.skip)
    except Exception:  # noqa: BLE001 - the report also works from the files alone
        pass
    pending = [t for t in enumerated if t not in types and t not in skipped]
    columns = ALL_BACKENDS + GENERATION_BACKENDS + QUANTIZED_BACKENDS
    backends = [b for b in columns if any(k[2] == b for k in rows)]
    tools = [t for t in ("hub", "peer") if any(k[1] == t for k in rows)]
    ran = [t for t in types if t not in skipped]
    built = {
        t for t in ran if not all(rows[k].get("class") == "tiny-config" for k in rows if k[0] == t and k[1] != "*")
    }

    def passed(of: list[str], tool: str, backend: str) -> str:
        got = [rows[(t, tool, backend)] for t in of if t in built and (t, tool, backend) in rows]
        got = [r for r in got if r.get("class") != "tiny-config"]
        return f"{sum(bool(r.get('ok')) for r in got)}/{len(got)}" if got else "—"

    lines = [
        "",
        "# Every architecture of transformers (auto-enumerated)",
        "",
        "Generated by `python benchmarks/coverage.py --all` (sharded: `--shard i/n`; merged by `--all --report-only`).",
        "Every model type of transformers' auto mappings, exported with the first head that maps it (image-text-to-text,",
        "speech seq2seq, seq2seq LM, CTC, masked LM, causal LM, image / sequence / token classification, else AutoModel),",
        "built from its config class's defaults with the size fields shrunk (`benchmarks/_tiny_configs.py`), random",
        "weights, `dynamic=True`, run at the sample shape and at another batch/length, compared with eager PyTorch",
        "(hub_export: every output leaf, max abs diff <= 1e-4 on Dynamo, 1e-3 elsewhere; after a save and reload too;",
        "peer: the main tensor). A failing cell shows its failure class (legend below); measured on a 2-core x86 CPU;",
        "`—` = not run (yet). Totals count the model types that were built; `tiny-config` types (the harness could",
        "not build the tiny model or its inputs) are listed apart and not counted.",
        "",
        "The `gen-<backend>` columns run generation on the generative heads (causal-lm, seq2seq-lm, speech-seq2seq,",
        "image-text-to-text): `export_for_generation(model, prompt, dynamic=True)`, then `generate()` of 8 greedy",
        "tokens on the prompt and on a left-padded batch of two of another length, then `save_pretrained`,",
        "`ExportedModel.from_pretrained` and that batch again; a cell passes when every run is token-identical to eager",
        "`model.generate`. Audio-language models get prompts with audio (their forward cells ran text alone); a tiny",
        "config gets the generation settings its checkpoints carry (an encoder-decoder's decoder start id, a causal",
        "LM's `is_decoder`), noted in its row; an eager `generate` that fails on the tiny model is `tiny-config`.",
        "",
        f"**{len(enumerated)} model types enumerated**: {len(skipped)} skipped (reasons below), "
        f"{len(ran) - len(built)} not built tiny (`tiny-config`), {len(built)} built and run"
        + (f", **{len(pending)} not run** (listed at the end)" if pending else "")
        + ".",
        "",
        f"Tools run: {', '.join(TOOL_NAMES[t] for t in tools)}; backends run: {', '.join(backends)} "
        f"({sum(1 for k in rows if k[1] != '*')} cells). A backend column counts only the types it was run on.",
        "",
        "## Model types per head",
        "",
        "| head | enumerated | skipped | tiny-config | built | "
        + " | ".join(f"{b} {t}" for b in backends for t in tools)
        + " |",
        "|---|---|---|---|---|" + "---|" * (len(backends) * len(tools)),
    ]
    for head in sorted({heads.get(t, "?") for t in enumerated}):
        of = [t for t in enumerated if heads.get(t, "?") == head]
        sk = [t for t in of if t in skipped]
        tc = [t for t in of if t in ran and t not in built]
        cells = " | ".join(passed(of, tool, b) for b in backends for tool in tools)
        lines.append(f"| {head} | {len(of)} | {len(sk)} | {len(tc)} | {len([t for t in of if t in built])} | {cells} |")
    lines += [
        "",
        "## Totals (passed / built model types)",
        "",
        "| backend | " + " | ".join(TOOL_NAMES[t] for t in tools) + " |",
        "|---|" + "---|" * len(tools),
    ]
    for backend in backends:
        cells = []
        for tool in tools:
            got = [rows[(t, tool, backend)] for t in sorted(built) if (t, tool, backend) in rows]
            got = [r for r in got if r.get("class") != "tiny-config"]
            passed = sum(bool(r.get("ok")) for r in got)
            share = f" ({100 * passed / len(got):.0f}%)" if got else ""
            cells.append(f"{passed} / {len(got)}{share}" if got else "—")
        lines.append(f"| {backend} | " + " | ".join(cells) + " |")
    counts: dict[tuple[str, str, str], int] = collections.Counter()
    for (case, tool, backend), row in rows.items():
        if tool != "*" and not row.get("ok") and case in built and row.get("class") != "tiny-config":
            counts[(row["class"], tool, backend)] += 1
    classes = [c for c in CLASSES if c != "tiny-config" and any(k[0] == c for k in counts)]
    lines += [
        "",
        "## Failure classes (failing cells per backend)",
        "",
        "| class | " + " | ".join(f"{b} {t}" for b in backends for t in tools) + " | meaning |",
        "|---|" + "---|" * (len(backends) * len(tools) + 1),
    ]
    for cls in classes:
        cells = " | ".join(str(counts.get((cls, t, b), 0) or "") for b in backends for t in tools)
        lines.append(f"| {cls} | {cells} | {CLASSES[cls]} |")
    if "peer" in tools:
        lines += _side_by_side(rows, sorted(built), backends)
    lines += ["", "## Representative failures per class", ""]
    for cls in classes:
        examples = []
        for (case, tool, backend), row in sorted(rows.items()):
            if tool != "*" and case in built and not row.get("ok") and row.get("class") == cls:
                if not any(e[0] == case for e in examples):
                    examples.append((case, tool, backend, row))
        picked = examples[:3]
        lines.append(f"* **{cls}** ({len(examples)} model types)")
        lines += [f"  * {case} / {backend} {tool}: {_cause(row)}" for case, tool, backend, row in picked]
    header = " | ".join(f"{b} {t}" for b in backends for t in tools)
    lines += [
        "",
        "## Matrix",
        "",
        f"| model type | head | {header} |",
        "|---|---|" + "---|" * (len(backends) * len(tools)),
    ]
    for t in ran:
        if t not in built:
            continue
        cells = " | ".join(_cell(rows.get((t, tool, b))) for b in backends for tool in tools)
        lines.append(f"| {t} | {heads.get(t, '')} | {cells} |")
    lines += ["", "## Failing cells", ""]
    for tool in tools:
        lines += [f"### {TOOL_NAMES[tool]}", ""]
        failing = [
            rows[(t, tool, b)]
            for t in sorted(built)
            for b in backends
            if (t, tool, b) in rows
            and not rows[(t, tool, b)].get("ok")
            and rows[(t, tool, b)]["class"] != "tiny-config"
        ]
        lines += [f"* **{r['case']}** / {r['backend']} `{r['class']}`: {_cause(r)}" for r in failing] or ["None."]
        lines.append("")
    lines += ["## Not built tiny (`tiny-config`: the shrinker's or the sample builder's side)", ""]
    for t in ran:
        if t in built:
            continue
        row = next(rows[k] for k in sorted(rows) if k[0] == t and k[1] != "*")
        lines.append(f"* **{t}** ({heads.get(t, '')}): {_cause(row)}")
    lines += ["", "## Skipped model types", ""]
    lines += [f"* **{t}** ({heads.get(t, '')}): {_short(why)}" for t, why in sorted(skipped.items())] or ["None."]
    if pending:
        lines += ["", f"## Not run ({len(pending)} model types)", ""]
        for head in sorted({heads.get(t, "?") for t in pending}):
            of = [t for t in pending if heads.get(t, "?") == head]
            lines.append(f"* {head} ({len(of)}): " + ", ".join(of))
    return lines

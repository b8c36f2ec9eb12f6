"""Architecture coverage: every zoo model through every backend, hub_export vs the peer ``transformers.exporters``.

Not a test. For each case of ``tests/zoo.py`` and each backend, the model is exported with ``dynamic=True`` on
its sample kwargs, by hub_export (``exporter_class(fmt)()`` + the format's config class) and by the peer
(``AutoHfExporter`` + ``AutoExportConfig``), then run at the sample shape and at another batch/sequence length
and compared with eager PyTorch:

* hub_export: max abs diff over every flattened output leaf (``hub_export.signature.flatten_value``: logits, caches,
  hidden states...), and the output class must be the eager one;
* peer: max abs diff of ``logits``, else ``last_hidden_state``, else the first tensor output (the peer's
  runners rebuild outputs differently; this is the tensor every task reads).

A cell passes when the export succeeded, both shapes ran, and the max diff is <= 1e-4 (dynamo) / 1e-3 (others);
with ``--all`` also after a round trip (``save_pretrained``, ``from_pretrained``, the other shape on the loaded
export: a manifest the library refuses to write fails the cell).
Each case runs in a child process; a cell that hangs past ``--timeout`` (or kills its process) is recorded as
failed and the child restarts on the next cell (``--all``: the limit is CPU seconds, so a loaded machine does not
fail cells). Results go to a JSON-lines file (``docs/coverage-results.jsonl``,
committed with the matrix, so ``--report-only`` rebuilds it anywhere); a run only adds the cells the file lacks
(``--rerun``: the selected cells again; the latest row of a cell wins), so partial runs merge. The Markdown matrix
(``docs/support-matrix.md``) is written from it, with a column per backend and tool the file holds. Usage::

    python benchmarks/coverage.py [--backends dynamo onnx openvino executorch] [--cases llama bert]
        [--tools hub peer] [--timeout 120] [--results docs/coverage-results.jsonl] [--rerun] [--report-only]
    python benchmarks/coverage.py --backends gen-dynamo gen-onnx gen-openvino   # the generation cells

Every architecture (``--all``): instead of the zoo, every model type of transformers' auto mappings
(``benchmarks/_tiny_configs.py``: causal / masked LM, sequence / token classification, seq2seq LM, image
classification, CTC, speech seq2seq, image-text-to-text, AutoModel as the fallback head), each built from its
config class's defaults with the size fields shrunk, with sample inputs found from its main input name. The
backends run one after another over every type (dynamo, then onnx, openvino, executorch), so a partial run has
whole columns; ``--group type`` runs every backend of a type in one child instead, which builds its tiny model once. ``--shard i/n`` (1-based) takes every n-th type, so shards fan out (``benchmarks/coverage-workflow.yml``);
each shard writes ``docs/coverage-all/shard-i-of-n.jsonl``, and ``--all --report-only`` merges every file of
that folder into ``docs/support-matrix-all.md`` (the latest row of a cell wins). Failing cells get a one-line reason
and a failure class (``benchmarks/_failure_classes.py``); types that cannot run here are listed with the reason::

    python benchmarks/coverage.py --all [--shard 1/4] [--backends dynamo onnx] [--types llama bert] [--timeout 300]
    python benchmarks/coverage.py --all --report-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _coverage_generation import GENERATIVE_FAMILIES, is_generation_backend, run_generation_cell  # noqa: E402

DEFAULT_BACKENDS = ["dynamo", "onnx", "openvino"]
#: ``export_for_generation`` + ``generate`` cells (benchmarks/_coverage_generation.py), generative families only
GENERATION_BACKENDS = ["gen-dynamo", "gen-onnx", "gen-openvino", "gen-executorch"]
#: quantized generation cells (benchmarks/_coverage_quantized.py): closeness to eager, not identity
QUANTIZED_BACKENDS = ["gen-onnx-int8", "gen-onnx-int4", "gen-openvino-int8", "gen-openvino-int4"]
#: column order of the matrix; a backend is shown when the results file has a row for it
ALL_BACKENDS = [*DEFAULT_BACKENDS, "executorch", *GENERATION_BACKENDS, *QUANTIZED_BACKENDS]
TOOLS = ["hub", "peer"]
TOOL_NAMES = {"hub": "hub_export", "peer": "transformers.exporters"}


def atol(backend: str) -> float:
    """The pass threshold of a backend."""
    return 1e-4 if backend == "dynamo" else 1e-3


def _reason(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= 180 else text[:177] + "..."


def _root_cause(exc: BaseException) -> str | None:
    """The innermost exception chained under ``exc`` (what a wrapping ExportError hides), with where it was raised."""
    inner, seen = exc, {id(exc)}
    while (inner.__cause__ or inner.__context__) is not None and len(seen) < 20:
        inner = inner.__cause__ or inner.__context__
        if id(inner) in seen:
            break
        seen.add(id(inner))
    if inner is exc:
        return None
    frames = traceback.extract_tb(inner.__traceback__)
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return _reason(inner) + where


def _diff(got: Any, expected: Any, name: str = "output") -> float:
    """Max abs diff of two tensors; NaN where both are NaN counts as equal, NaN on one side only as inf.

    Raises:
        AssertionError: The shapes differ.
    """
    import torch

    if tuple(got.shape) != tuple(expected.shape):
        raise AssertionError(f"output shape mismatch: {name} {tuple(got.shape)} != eager {tuple(expected.shape)}")
    got, expected = got.detach().double().cpu(), expected.detach().double().cpu()
    if got.numel() == 0:
        return 0.0
    delta = (got - expected).abs()
    delta[torch.isnan(got) & torch.isnan(expected)] = 0.0
    return math.inf if torch.isnan(delta).any() else float(delta.max())


def _flat(value: Any, sizes: set[str] | None = None) -> list[tuple[str, Any]]:
    """The tensor leaves of an output; ``sizes``: paths where an int counts as a tensor (an export returns a size
    of a dynamic dim as a 0-d tensor where eager returns an int)."""
    from hub_export.structure import flatten_value

    leaves: list[tuple[str, Any]] = []
    flatten_value(value, (), leaves, None if sizes is None else set(sizes))
    return leaves


def _compare_hub(got: Any, expected: Any) -> float:
    if type(got) is not type(expected):
        raise AssertionError(f"output class {type(got).__name__} != eager {type(expected).__name__}")
    got_leaves = dict(_flat(got))
    expected_leaves = dict(_flat(expected, set(got_leaves)))
    if list(got_leaves) != list(expected_leaves):
        missing = sorted(set(expected_leaves) ^ set(got_leaves))[:4]
        raise AssertionError(f"output leaves differ from eager: {missing}")
    return max((_diff(got_leaves[k], expected_leaves[k], k) for k in expected_leaves), default=0.0)


def _main_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    for key in ("logits", "last_hidden_state"):
        item = value.get(key) if hasattr(value, "get") else None
        if isinstance(item, torch.Tensor):
            return item
    for _name, leaf in _flat(value):
        return leaf
    raise AssertionError("no tensor output")


def _compare_peer(got: Any, expected: Any) -> float:
    return _diff(_main_tensor(got), _main_tensor(expected))


def _export(tool: str, backend: str, model: Any, sample: dict[str, Any]) -> Any:
    if tool == "hub":
        from hub_export.configs import AutoExportConfig
        from hub_export.export.auto import exporter_class

        config = AutoExportConfig.config_class(backend)(dynamic=True)
        return exporter_class(backend)().export(model, sample, config=config)
    from transformers.exporters import AutoExportConfig, AutoHfExporter

    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": True})
    return AutoHfExporter.from_config(config).export(model, sample, config)


#: the last model type built in this child (``--all``): the cells of its other backends reuse it
_BUILT: dict[str, Any] = {}


def _build(case_name: str, all_mode: bool) -> Any:
    """Build a case; with ``all_mode`` the last one is kept, so a child running several backends of one type
    (``--group type``) builds its tiny model and finds its inputs once (every backend gets the same model)."""
    if all_mode:
        from _tiny_configs import build_case

        if case_name not in _BUILT:
            _BUILT.clear()  # one model at a time: the child's memory stays that of one type
            _BUILT[case_name] = build_case(case_name)
        return _BUILT[case_name]
    from zoo import build

    return build(case_name)


def run_cell(case_name: str, tool: str, backend: str, all_mode: bool = False) -> dict[str, Any]:
    """Export one case with one tool and backend, run both shapes, compare with eager.

    ``all_mode``: the case is a model type built by ``_tiny_configs.build_case``; a build failure is a row whose
    reason starts with ``[build]``, and an environment that cannot build it a ``skip`` row.
    """
    import torch

    row: dict[str, Any] = {"case": case_name, "tool": tool, "backend": backend, "ok": False}
    try:
        row["stage"] = "build"
        try:
            case = _build(case_name, all_mode)
        except Exception as exc:
            if all_mode:
                from _tiny_configs import skip_reason

                why = skip_reason(exc)
                if why:
                    return {"case": case_name, "tool": "*", "backend": "*", "skip": why}
            raise
        if all_mode:
            row["head"] = case.head
            if case.notes:
                row["notes"] = "; ".join(case.notes)
        if is_generation_backend(backend):
            row.pop("stage")
            return run_generation_cell(case, tool, backend, row, all_mode)
        row["stage"] = "eager"
        with torch.no_grad():
            expected = [case.model(**inputs) for inputs in (case.sample, case.other)]
        if all_mode:  # random weights that overflow make a degenerate reference
            try:
                leaves = _flat(expected[0]) + _flat(expected[1])
            except Exception:  # noqa: BLE001 - an output the exporter refuses: the export stage reports it
                leaves = []
            for name, leaf in leaves:
                if leaf.is_floating_point() and not bool(torch.isfinite(leaf).all()):
                    raise ValueError(f"eager output {name} is not finite (the tiny random model overflows)")
        row.pop("stage")
        start = time.perf_counter()
        exported = _export(tool, backend, case.model, case.sample)
        row["export_s"] = round(time.perf_counter() - start, 2)
        compare = _compare_hub if tool == "hub" else _compare_peer
        diffs = []
        for where, inputs, eager in (("sample", case.sample, expected[0]), ("other", case.other, expected[1])):
            row["stage"] = f"run {where}"
            with torch.no_grad():
                diffs.append(compare(exported(**inputs), eager))
        row.pop("stage")
        if all_mode and max(diffs) > atol(backend) and tool == "hub":
            expected = _tie_reference(case, exported, compare, expected, diffs, row)
        row["max_diff"] = max(diffs)
        row["ok"] = row["max_diff"] <= atol(backend)
        if not row["ok"]:
            row["reason"] = (
                f"max abs diff {row['max_diff']:.2e} > {atol(backend):g} (sample {diffs[0]:.1e}, other {diffs[1]:.1e})"
            )
        elif all_mode:  # the round trip: save_pretrained, from_pretrained, the other shape on the loaded export
            _round_trip(tool, exported, case.other, expected[1], compare, backend, row)
    except BaseException as exc:  # noqa: BLE001 - every failure is a result
        if isinstance(exc, KeyboardInterrupt):
            raise
        stage = row.pop("stage", None)
        if all_mode and stage == "eager":
            stage = "build"  # the tiny model does not run its own sample inputs
        row["reason"] = (f"[{stage}] " if stage else "") + _reason(exc)
        row["trace"] = "".join(traceback.format_exception(exc)[-3:])[-(3000 if all_mode else 1500) :]
        if all_mode:
            cause = _root_cause(exc)
            if cause:
                row["cause"] = cause
    return row


def _tie_reference(
    case: Any, exported: Any, compare: Any, expected: list[Any], diffs: list[float], row: dict[str, Any]
) -> list[Any]:
    """Where the export differs from eager and the model takes a top-k: eager again with ties kept at the lower
    index (ONNX's TopK rule, ``_tiny_random.lower_index_ties``); when the export matches that reference, it is the
    reference (``diffs`` updated in place, a note added). Returns the reference outputs."""
    import torch
    from _tiny_random import lower_index_ties

    with lower_index_ties() as calls, torch.no_grad():
        tied = [case.model(**inputs) for inputs in (case.sample, case.other)]
    if not calls:
        return expected
    with torch.no_grad():
        again = [compare(exported(**inputs), eager) for inputs, eager in zip((case.sample, case.other), tied)]
    if max(again) >= max(diffs):
        return expected
    diffs[:] = again
    note = "top-k ties kept at the lower index in eager (ONNX's TopK rule; torch's is unspecified)"
    row["notes"] = f"{row['notes']}; {note}" if row.get("notes") else note
    return tied


def _round_trip(
    tool: str, exported: Any, inputs: dict[str, Any], eager: Any, compare: Any, backend: str, row: dict[str, Any]
) -> None:
    """Save the export, load it back, run ``inputs`` on the loaded one (stages ``save``, ``load``, ``run loaded``)."""
    import tempfile

    import torch

    if tool == "hub":
        from hub_export.model import ExportedModel
    else:
        from transformers.exporters import ExportedModel
    row["ok"] = False  # until the loaded export ran
    with tempfile.TemporaryDirectory(prefix="coverage-") as folder:
        row["stage"] = "save"
        exported.save_pretrained(Path(folder) / "export")
        row["stage"] = "load"
        loaded = ExportedModel.from_pretrained(Path(folder) / "export")
        row["stage"] = "run loaded"
        with torch.no_grad():
            diff = compare(loaded(**inputs), eager)
    row.pop("stage")
    row["round_trip"] = True
    row["ok"] = diff <= atol(backend)
    if not row["ok"]:
        row["reason"] = f"after save/load: max abs diff {diff:.2e} > {atol(backend):g} (other shape)"


def _alarm(_signum: int, _frame: Any) -> None:
    raise TimeoutError("cell timed out")


def _cpu_alarm(_signum: int, _frame: Any) -> None:
    raise TimeoutError("cell timed out (CPU time limit)")


def child(cells: list[tuple[str, str, str]], results: Path, timeout: int, all_mode: bool = False) -> None:
    """Run cells in order, appending one JSON line per cell (flushed, so a crash loses only the current cell).

    ``all_mode``: rows carry their time (``t``, the latest row of a cell wins across shard files), and a type the
    environment cannot build gets one skip row; its other cells are then not run."""
    warnings.filterwarnings("ignore")
    if all_mode:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    # --all: the limit is CPU time (the process's own work), so a shared, loaded machine does not fail cells
    signal.signal(signal.SIGPROF if all_mode else signal.SIGALRM, _cpu_alarm if all_mode else _alarm)
    skipped: set[str] = set()
    for case_name, tool, backend in cells:
        if case_name in skipped:
            continue
        print(f"  {case_name:12s} {tool:4s} {backend:10s}", end=" ", flush=True)
        start = time.process_time()
        if all_mode:
            signal.setitimer(signal.ITIMER_PROF, timeout)
        else:
            signal.alarm(timeout)
        try:
            row = run_cell(case_name, tool, backend, all_mode)
        finally:
            if all_mode:
                signal.setitimer(signal.ITIMER_PROF, 0)
            else:
                signal.alarm(0)
        if all_mode:
            row["cpu_s"] = round(time.process_time() - start, 1)
        if "skip" in row:
            skipped.add(case_name)
            print("SKIP", row["skip"], flush=True)
        else:
            print("ok" if row["ok"] else "FAIL", row.get("max_diff", ""), row.get("export_s", ""), flush=True)
        if all_mode:
            from _failure_classes import classify

            row["t"] = round(time.time(), 1)
            if classify(row):
                row["class"] = classify(row)
        with results.open("a") as handle:
            handle.write(json.dumps(row) + "\n")


def _done(results: Path, skip: int = 0) -> set[tuple[str, str, str]]:
    """Cells with a row in ``results``, past its first ``skip`` lines."""
    if not results.exists():
        return set()
    lines = results.read_text().splitlines()[skip:]
    return {(r["case"], r["tool"], r["backend"]) for r in map(json.loads, lines)}


def drive(
    cases: list[str], tools: list[str], backends: list[str], results: Path, timeout: int, rerun: bool = False
) -> None:
    """Run every missing cell (every cell with ``rerun``), one child process per case, restarting after a cell
    kills or hangs its child. Rows are appended; the report keeps the latest row of each cell."""
    start = len(results.read_text().splitlines()) if rerun and results.exists() else 0
    from zoo import FAMILIES

    for case_name in cases:
        print(case_name, flush=True)
        pending = [
            (case_name, t, b)
            for b in backends
            for t in tools
            if (case_name, t, b) not in _done(results, start)
            and (not is_generation_backend(b) or FAMILIES.get(case_name) in GENERATIVE_FAMILIES)
        ]
        while pending:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                json.dumps(pending),
                "--results",
                str(results),
                "--timeout",
                str(timeout),
            ]
            try:
                subprocess.run(cmd, timeout=timeout * len(pending) + 60, check=False)
                why = "process died"
            except subprocess.TimeoutExpired:
                why = "timed out (process killed)"
            pending = [cell for cell in pending if cell not in _done(results, start)]
            if pending:
                stuck = pending.pop(0)
                row = {"case": stuck[0], "tool": stuck[1], "backend": stuck[2], "ok": False, "reason": why}
                with results.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")


# lines of a backend's long error that name the actual cause (the first line is often generic)
_CAUSES = ("No ONNX function found", "No conversion rule found", "Unsupported", "not supported", "Error:")


#: known limitations: case -> [(a marker of its failure's reason or traceback, "" for any, the one-line reason shown)]
_KNOWN = {
    "mamba2": [
        (
            "0x:21",
            "known gap: lowers to ExecuTorch (exact size bounds, `sym_min` admitted: patches/executorch.py) "
            "but the runtime cannot allocate the method at load (MemoryAllocationFailed 0x21); not investigated",
        )
    ],
    "swin": [
        (
            "timed out",
            "known gap: the XNNPACK lowering did not finish within 15 min on this 2-core CPU (Swin also "
            "spends 50-80 s in torch's run_decompositions for OpenVINO)",
        )
    ],
    "llava": [
        (
            "",
            "known gap: as one graph, LLaVA's check that the placeholders match the image features pins the "
            "image count (the other shape fails) and traces to `aten._is_all_true`, which ONNX and ExecuTorch's edge "
            "dialect lack; its `export_for_generation` split passes on every backend",
        )
    ],
}


def _why(row: dict[str, Any]) -> str:
    """The row's reason, plus the line of its traceback naming the cause when the first line is generic."""
    text = row.get("reason", "") + row.get("trace", "")
    for marker, known in _KNOWN.get(row.get("case", ""), []):
        if row.get("tool") == "hub" and marker in text:
            return known
    reason = row.get("reason", "?")
    for line in row.get("trace", "").splitlines():
        line = line.strip(" -")
        if any(marker in line for marker in _CAUSES[:3]) and line not in reason:
            reason = f"{reason.split(': ', 1)[0]}: … {line}"
            break
    reason = reason.replace("|", "/").replace("\x1b", "")
    return reason if len(reason) <= 240 else reason[:237] + "..."


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "—"
    diff = row.get("max_diff")
    shown = "" if diff is None else (" inf" if math.isinf(diff) else f" {diff:.0e}")
    secs = f" · {row['export_s']:.1f}s" if "export_s" in row else ""
    return ("✅" if row["ok"] else "❌") + shown + secs


def report(results: Path, out: Path, backends: list[str], tools: list[str]) -> None:
    """Write the Markdown support matrix from the results file (latest row per cell wins)."""
    from zoo import FAMILIES, ZOO

    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in map(json.loads, results.read_text().splitlines()):
        rows[(row["case"], row["tool"], row["backend"])] = row
    cases = [name for name in ZOO if any((name, t, b) in rows for t in tools for b in backends)]
    lines = [
        "# Support matrix",
        "",
        "Generated by `python benchmarks/coverage.py` (do not edit by hand). Each tiny model of `tests/zoo.py`",
        "(random weights, hidden 32, 2 layers) is exported with `dynamic=True` on its sample inputs, then run at the",
        "sample shape and at another batch/sequence length, and compared with eager PyTorch on CPU.",
        "",
        "* **hub** = hub_export: max abs diff over every flattened output (logits, caches, hidden states), and the",
        "  output class must match eager.",
        "* **peer** = `transformers.exporters`: max abs diff of `logits`, else `last_hidden_state`, else the first",
        "  tensor output.",
        "* Pass: exported, ran both shapes, max diff <= 1e-4 (dynamo) / 1e-3 (others). A cell reads",
        "  `pass/fail  max-abs-diff · export-seconds`; `—` = not run.",
        "* `gen-<backend>` (generative families: decoder, moe, ssm, seq2seq, vlm): `export_for_generation(dynamic=True)`, then",
        "  8 greedy tokens from the prompt and from a left-padded batch of another length; pass = token-identical to",
        "  eager `model.generate` (shown as diff 0). The peer's `ExportedModel` has no `generate()`.",
        "",
        "## Totals",
        "",
        "![The matrix below as a heatmap: green passed, red failed, grey not run](images/support-matrix.png)",
        "",
        "| backend | " + " | ".join(TOOL_NAMES[t] for t in tools) + " |",
        "|---|" + "---|" * len(tools),
    ]
    for backend in backends:
        cells = []
        for tool in tools:
            ran = [rows[(c, tool, backend)] for c in cases if (c, tool, backend) in rows]
            cells.append(f"{sum(r['ok'] for r in ran)} / {len(ran)}" if ran else "—")
        lines.append(f"| {backend} | " + " | ".join(cells) + " |")
    header = " | ".join(f"{b} {t}" for b in backends for t in tools)
    rule = "|---|---|" + "---|" * (len(backends) * len(tools))
    lines += ["", "## Matrix", "", f"| architecture | family | {header} |", rule]
    for case in cases:
        cells = " | ".join(_cell(rows.get((case, t, b))) for b in backends for t in tools)
        lines.append(f"| {case} | {FAMILIES.get(case, '')} | {cells} |")
    for tool in tools:
        ran = [rows[(c, tool, b)] for c in cases for b in backends if (c, tool, b) in rows]
        failing = [row for row in ran if not row["ok"]]
        lines += ["", f"## Failing {TOOL_NAMES[tool]} cells", ""]
        reasons = [f"* **{r['case']}** / {r['backend']}: {_why(r)}" for r in failing]
        lines += reasons or ["None."]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backends",
        nargs="+",
        default=None,
        choices=ALL_BACKENDS,
        help=f"default: {' '.join(DEFAULT_BACKENDS)} (--all: these and executorch; the gen- columns only when named)",
    )
    parser.add_argument("--cases", nargs="+", default=None)
    parser.add_argument("--tools", nargs="+", default=TOOLS, choices=TOOLS)
    parser.add_argument("--timeout", type=int, default=None, help="seconds per cell (default 120; --all: 300)")
    parser.add_argument(
        "--results",
        type=Path,
        default=None,
        help="default: docs/coverage-results.jsonl "
        "(--all: docs/coverage-all/shard-i-of-n.jsonl, or all.jsonl unsharded)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: docs/support-matrix.md (--all: docs/support-matrix-all.md)"
    )
    parser.add_argument("--fresh", action="store_true", help="discard earlier results instead of resuming")
    parser.add_argument("--rerun", action="store_true", help="run the selected cells again, even those in --results")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--all", action="store_true", help="every model type of transformers' auto mappings")
    parser.add_argument("--types", nargs="+", default=None, help="--all: only these model types")
    parser.add_argument("--shard", default=None, help="--all: 'i/n' (1-based), every n-th type from the i-th")
    parser.add_argument("--batch", type=int, default=8, help="--all: model types per child process")
    parser.add_argument("--retry", nargs="+", default=None, help="--all: rerun the cells failing with these classes")
    parser.add_argument(
        "--order", choices=["name", "spread"], default="name", help="--all: by name, or round-robin over the heads"
    )
    parser.add_argument(
        "--group",
        choices=["backend", "type"],
        default="backend",
        help="--all: run backend after backend (whole columns), or every backend of a type in one child (its tiny "
        "model is built once)",
    )
    args = parser.parse_args()
    if args.child:
        child([tuple(cell) for cell in json.loads(args.child)], args.results, args.timeout, args.all)
        return
    if args.all:
        from _coverage_all import main_all

        main_all(args, parser)
        return
    from zoo import ZOO

    args.results = args.results or ROOT / "docs" / "coverage-results.jsonl"
    args.out = args.out or ROOT / "docs" / "support-matrix.md"
    args.backends = args.backends or DEFAULT_BACKENDS
    args.timeout = args.timeout or 120
    cases = args.cases or list(ZOO)
    unknown = [c for c in cases if c not in ZOO]
    if unknown:
        parser.error(f"unknown cases {unknown}; the zoo has {sorted(ZOO)}")
    if args.fresh and args.results.exists():
        os.remove(args.results)
    if not args.report_only:
        drive(cases, args.tools, args.backends, args.results, args.timeout, rerun=args.rerun)
    write_matrix(args.out, args.results)


def write_matrix(out: Path, results: Path = ROOT / "docs" / "coverage-results.jsonl") -> None:
    """Write the zoo's matrix from ``results`` (``--all`` writes its own: ``_coverage_all.write_all``)."""
    ran = {(row["tool"], row["backend"]) for row in map(json.loads, results.read_text().splitlines())}
    backends = [b for b in ALL_BACKENDS if any((t, b) in ran for t in TOOLS)]
    report(results, out, backends, [t for t in TOOLS if any((t, b) in ran for b in backends)])
    if out.name == "support-matrix.md":  # the heatmap the page shows (benchmarks/charts.py)
        from charts import support_heatmap

        support_heatmap(results, out.parent / "images" / "support-matrix.png")


if __name__ == "__main__":
    main()

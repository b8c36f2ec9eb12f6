"""Pictures of the benchmark tables, drawn with matplotlib from the same result files the tables are written from.

* ``docs/images/support-matrix.png``: the zoo's support matrix (``docs/coverage-results.jsonl``) as a heatmap, one
  row per architecture and one column per backend and tool: passed, failed, not run.
* ``docs/images/large-int4-memory.png``: the int4 exports of real-size models (``benchmarks/large-int4-results.jsonl``)
  as bars per model and format: the bfloat16 weights, the export's peak anonymous memory, its files, against the
  machine's memory.
* ``docs/images/generation-speed-<size>.png``: generation speed (``benchmarks/results/generation-speed.jsonl``) as
  bars, one chart per model size: each tool's median tokens/s in its latest run without ``--contention``, grouped by
  runtime, hub_export's exports beside the runtimes' own tools.

``benchmarks/coverage.py``, ``benchmarks/generation.py`` and ``benchmarks/large_int4.py`` call it after writing their tables; run it alone to redraw:

    python benchmarks/charts.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COVERAGE = ROOT / "docs" / "coverage-results.jsonl"
SPEED = ROOT / "benchmarks" / "results" / "generation-speed.jsonl"
LARGE = ROOT / "benchmarks" / "large-int4-results.jsonl"
OUT = ROOT / "docs" / "images"
_BACKENDS = ("dynamo", "onnx", "openvino", "executorch", "gen-dynamo", "gen-onnx", "gen-openvino", "gen-executorch")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def support_heatmap(results: Path = COVERAGE, out: Path = OUT / "support-matrix.png") -> Path:
    """The support matrix as a heatmap (green passed, red failed, grey not run)."""
    from matplotlib.colors import ListedColormap

    plt = _pyplot()
    rows = _rows(results)
    cases = list(dict.fromkeys(row["case"] for row in rows))
    ran = {(row["tool"], row["backend"]) for row in rows}
    columns = [(b, t) for b in _BACKENDS for t in ("hub", "peer") if (t, b) in ran]
    cell = {(row["case"], row["backend"], row["tool"]): row["ok"] for row in rows}
    grid = [[{None: 0, False: 1, True: 2}[cell.get((c, b, t))] for b, t in columns] for c in cases]
    figure, axes = plt.subplots(figsize=(2 + 0.55 * len(columns), 1 + 0.2 * len(cases)))
    axes.imshow(grid, cmap=ListedColormap(["#d0d7de", "#cf222e", "#2da44e"]), vmin=0, vmax=2, aspect="auto")
    axes.set_xticks(range(len(columns)), [f"{b}\n{'hub_export' if t == 'hub' else 'peer'}" for b, t in columns])
    axes.set_yticks(range(len(cases)), cases)
    axes.tick_params(axis="x", labelrotation=90, labelsize=7, top=True, labeltop=True, bottom=False, labelbottom=False)
    axes.tick_params(axis="y", labelsize=7)
    passed = {t: sum(1 for (_, _, tool), ok in cell.items() if tool == t and ok) for t in ("hub", "peer")}
    axes.set_title(f"Support matrix: green passed, red failed, grey not run\n(passed: hub_export {passed['hub']}, "
                   f"peer {passed['peer']})", fontsize=9)  # fmt: skip
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def speed_bars(results: Path = SPEED, out_dir: Path = OUT) -> list[Path]:
    """One bar chart per model size: median tokens/s of each tool's latest run without contention."""
    plt = _pyplot()
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for row in _rows(results):
        if row.get("contention") or row.get("skipped") or not row.get("runs"):
            continue
        key = (row["size"], row["tool"])
        if key not in latest or row["date"] >= latest[key]["date"]:
            latest[key] = row
    written = []
    for size in sorted({size for size, _ in latest}):
        tools = sorted((row for (s, _), row in latest.items() if s == size), key=lambda r: (r["runtime"], r["tool"]))
        medians = [statistics.median(t for run in row["runs"] for t in run["tok_s"]) for row in tools]
        colors = ["#8c959f" if r["tool"] == "eager" else "#0969da" if r["tool"].startswith("hub-") else "#bf8700"
                  for r in tools]  # fmt: skip
        figure, axes = plt.subplots(figsize=(7, 0.6 + 0.32 * len(tools)))
        labels = [f"{r['tool']} ({r['runtime']}, {r['precision']})" for r in tools]
        axes.barh(range(len(tools)), medians, color=colors)
        axes.set_yticks(range(len(tools)), labels, fontsize=8)
        axes.invert_yaxis()
        for i, value in enumerate(medians):
            axes.text(value, i, f" {value:.0f}", va="center", fontsize=7)
        axes.set_xlabel("tokens/s (median, greedy, batch 1; higher is better)", fontsize=8)
        axes.set_title(f"Generation speed, {size}\nhub_export (blue), the runtimes' own tools (gold), eager (grey)",
                       fontsize=9)  # fmt: skip
        figure.tight_layout()
        out = out_dir / f"generation-speed-{size}.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, dpi=110)
        plt.close(figure)
        written.append(out)
    return written


def large_memory_bars(results: Path = LARGE, out: Path = OUT / "large-int4-memory.png") -> Path:
    """Per model and format (latest row): weights, peak anonymous memory while exporting, files (GB), with the
    machine's memory as a line. An export the kernel killed for memory shows the peak it had reached (its weights
    from another row of the model, no files); other failures are left out."""
    import os

    plt = _pyplot()
    rows = _rows(results)
    weights = {r["model"]: r["weights_gb"] for r in rows if "weights_gb" in r}
    latest = {}
    for r in rows:
        if "error" not in r:
            latest[(r["model"], r["format"])] = r
        elif "export_peak_anon_gb" in r and r["model"] in weights:
            killed = {"weights_gb": weights[r["model"]], "peak_anon_gb": r["export_peak_anon_gb"], "files_gb": 0.0}
            latest[(r["model"], r["format"])] = {**killed, "killed": True}
    cells = sorted(latest.items(), key=lambda item: (-item[1]["weights_gb"], item[0][1]))
    figure, axes = plt.subplots(figsize=(7, 0.9 + 0.75 * len(cells)))
    series = [("weights_gb", "bfloat16 weights", "#8c959f"), ("peak_anon_gb", "peak anonymous memory, exporting",
              "#0969da"), ("files_gb", "int4 files", "#1a7f37")]  # fmt: skip
    for offset, (key, label, color) in enumerate(series):
        values = [row[key] for _, row in cells]
        positions = [i + (offset - 1) * 0.27 for i in range(len(cells))]
        axes.barh(positions, values, height=0.25, color=color, label=label)
        for y, value in zip(positions, values):
            axes.text(value, y, f" {value:.1f}", va="center", fontsize=7)
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    axes.axvline(
        machine, color="#cf222e", linestyle="--", linewidth=1, label=f"the machine's memory ({machine:.0f} GB)"
    )
    names = [f"{m} {f} int4" + ("\n(killed: out of memory)" if row.get("killed") else "") for (m, f), row in cells]
    axes.set_yticks(range(len(cells)), names, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("GB", fontsize=8)
    axes.legend(fontsize=7, loc="lower right")
    axes.set_title("Exporting to int4 from bfloat16 (benchmarks/large_int4.py)", fontsize=9)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    print(support_heatmap(out=args.out / "support-matrix.png"))
    print(large_memory_bars(out=args.out / "large-int4-memory.png"))
    for path in speed_bars(out_dir=args.out):
        print(path)


if __name__ == "__main__":
    main()

"""benchmarks/charts.py draws the pictures next to the docs' tables from the same result files."""

from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import charts  # noqa: E402


def test_the_support_heatmap_and_the_speed_bars_are_drawn_from_the_results(tmp_path: Path) -> None:
    heatmap = charts.support_heatmap(out=tmp_path / "support-matrix.png")
    bars = charts.speed_bars(out_dir=tmp_path)
    cases = {line.split('"case": "')[1].split('"')[0] for line in charts.COVERAGE.read_text().splitlines()}
    with Image.open(heatmap) as image:
        assert image.height > 20 * len(cases)  # a row per architecture
    assert {p.name for p in bars} == {"generation-speed-small.png", "generation-speed-qwen2-0.5b.png",
                                      "generation-speed-llama-1b.png"}  # fmt: skip
    for name in ("support-matrix.png", *(p.name for p in bars)):  # the docs show each of them
        assert (ROOT / "docs" / "images" / name).is_file()
        assert (
            f"images/{name}"
            in (ROOT / "docs" / "support-matrix.md").read_text() + (ROOT / "docs" / "benchmarks.md").read_text()
        )


def test_the_large_int4_memory_bars_are_drawn_from_the_results(tmp_path: Path) -> None:
    import json

    chart = charts.large_memory_bars(out=tmp_path / "large-int4-memory.png")
    rows = [json.loads(line) for line in charts.LARGE.read_text().splitlines()]
    cells = {(r["model"], r["format"]) for r in rows if "error" not in r or "export_peak_anon_gb" in r}
    with Image.open(chart) as image:
        assert image.height > 50 * len(cells)  # three bars per model and format
    assert (ROOT / "docs" / "images" / "large-int4-memory.png").is_file()
    assert "images/large-int4-memory.png" in (ROOT / "docs" / "benchmarks.md").read_text()

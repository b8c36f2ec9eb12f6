"""GitHub Actions plumbing shared by ``sync`` and ``publish``: step outputs and the job summary.

When ``GITHUB_OUTPUT`` is set, ``key=value`` lines are appended to that file (the step's outputs); when
``GITHUB_STEP_SUMMARY`` is set, markdown is appended to it (shown on the run's summary page). Outside Actions
both are no-ops.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["write_outputs", "write_summary", "summary_markdown"]


def write_outputs(values: Mapping[str, Any]) -> None:
    """Append ``key=value`` lines to ``$GITHUB_OUTPUT`` (booleans as ``true``/``false``, None as empty)."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        for key, value in values.items():
            text = ("true" if value else "false") if isinstance(value, bool) else ("" if value is None else str(value))
            if "\n" in text:
                raise ValueError(f"output {key} holds a newline")
            out.write(f"{key}={text}\n")


def write_summary(markdown: str) -> None:
    """Append markdown to ``$GITHUB_STEP_SUMMARY``."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(markdown.rstrip("\n") + "\n")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)  # pragma: no cover


def summary_markdown(
    title: str,
    status: str,
    rows: list[tuple[str, str, str, Any, Any, int | None]],
    commit_url: str | None,
    pr_url: str | None,
    tag: str | None,
) -> str:
    """A job-summary section: a status line, a table (format, folder, state, parity, atol, size) and links."""
    lines = [f"### {title}", "", status, ""]
    if rows:
        lines += ["| format | folder | state | max abs diff vs eager | atol | size |", "|---|---|---|---|---|---|"]
        for fmt, folder, state, diff, atol, size in rows:
            diff_text = "-" if diff is None else f"{diff:.2e}"
            atol_text = "-" if atol is None else f"{atol:g}"
            lines.append(f"| {fmt} | `{folder}/` | {state} | {diff_text} | {atol_text} | {_size(size)} |")
        lines.append("")
    if commit_url:
        lines.append(f"Commit: {commit_url}")
    if pr_url:
        lines.append(f"Pull request: {pr_url}")
    if tag:
        lines.append(f"Tag: `{tag}`")
    return "\n".join(lines) + "\n"

"""The exports of a commit, as the repo page shows them: one row per ``export.json`` (the repo's root or a subfolder).

``export.json`` is untrusted: it is read as plain JSON (bounded), every field is checked for its type before use and
shown as text (the templates escape it); nothing it names is imported, loaded or run. A field of the wrong shape shows
as missing. The embedded hub does not import the exporter: this reads the manifest's documented keys
(``docs/manifest.md``) and no more.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from hub_export.embedded_hub._gitstore import GitRepo

__all__ = ["ExportRow", "exports_of", "formats_of"]

_MAX_MANIFEST = 4 * 1024 * 1024
_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")
_SHA = re.compile(r"[0-9a-f]{40}")
_WORD = re.compile(r"[A-Za-z0-9_.+-]{1,64}")


@dataclass
class ExportRow:
    """One export of a repo (every field already checked for its type)."""

    folder: str  # "" for the repo's root
    format: str | None = None
    task: str | None = None
    size: int = 0
    files: list[tuple[str, int, str]] = field(default_factory=list)  # (path, size, role)
    parity: list[tuple[str, float, float]] = field(default_factory=list)  # (component, max abs diff, atol)
    source_repo: str | None = None
    source_revision: str | None = None
    versions: list[tuple[str, str]] = field(default_factory=list)
    generation: bool = False
    problem: str | None = None  # why the row is incomplete

    @property
    def worst(self) -> tuple[float, float] | None:
        """The component furthest from eager: ``(max abs diff, atol)``."""
        if not self.parity:
            return None
        _, diff, atol = max(self.parity, key=lambda p: p[1] / p[2] if p[2] else math.inf)
        return diff, atol

    @property
    def within(self) -> bool | None:
        """Whether every component is within its tolerance (None: no parity recorded)."""
        return None if not self.parity else all(diff <= atol for _, diff, atol in self.parity)


def _text(value: Any, pattern: re.Pattern[str] = _WORD) -> str | None:
    return value if isinstance(value, str) and pattern.fullmatch(value) else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _row(folder: str, data: Any) -> ExportRow:
    row = ExportRow(folder)
    if not isinstance(data, dict):
        row.problem = "export.json is not a JSON object"
        return row
    row.format, row.task = _text(data.get("export_format")), _text(data.get("task"))
    row.generation = isinstance(data.get("generation"), dict)
    files = data.get("files")
    listed = files if isinstance(files, list) else []
    found = data.get("components")
    components: dict[str, Any] = found if isinstance(found, dict) else {}
    for name, component in list(components.items())[:64]:
        if not isinstance(component, dict):
            continue
        if not isinstance(files, list):  # schema_version 1: each component lists file objects
            listed += [f for f in component.get("files") or [] if isinstance(f, dict)]
        parity = component.get("parity")
        if isinstance(parity, dict):
            diff, atol = _number(parity.get("max_abs_diff")), _number(parity.get("atol"))
            if diff is not None and atol is not None:
                row.parity.append((str(name)[:64], diff, atol))
    for item in listed[:4096]:
        if isinstance(item, dict) and isinstance(item.get("path"), str) and isinstance(item.get("size"), int):
            role = item.get("role")
            role = role if isinstance(role, str) else ""
            row.files.append((item["path"][:512], max(item["size"], 0), role[:32]))
    row.size = sum(size for _, size, _ in row.files)
    source = data.get("source")
    if isinstance(source, dict):
        row.source_repo = _text(source.get("repo_id"), _REPO_ID) if len(str(source.get("repo_id"))) <= 200 else None
        row.source_revision = _text(source.get("revision"), _SHA)
    versions = data.get("created_with")
    if isinstance(versions, dict):
        row.versions = [(k, v) for k, v in list(versions.items())[:16] if _text(k) and _text(v)]
    return row


def _manifest_paths(repo: GitRepo, tree: str) -> list[tuple[str, str]]:
    """``(folder, blob oid)`` of each ``export.json`` at the root or one folder down."""
    found = []
    for name, is_dir, oid in repo.entries(tree):
        if not is_dir and name == "export.json":
            found.append(("", oid))
        elif is_dir:
            hit = repo.lookup(oid, "export.json")
            if hit is not None and not hit[0]:
                found.append((name, hit[1]))
    return found


def exports_of(repo: GitRepo, tree: str) -> list[ExportRow]:
    """The exports of the commit whose root tree is ``tree``."""
    rows = []
    for folder, oid in _manifest_paths(repo, tree):
        info = repo.file_info(oid)
        if info.lfs_oid or info.size > _MAX_MANIFEST:
            rows.append(ExportRow(folder, problem="export.json is too large to read here"))
            continue
        try:
            data = json.loads(repo.read_object(oid)[1])
        except (ValueError, UnicodeDecodeError, RecursionError):
            rows.append(ExportRow(folder, problem="export.json is not valid JSON"))
            continue
        rows.append(_row(folder, data))
    return rows


def formats_of(repo: GitRepo, tree: str) -> list[str]:
    """The export folders of a commit (a cheap look for the repo list: no manifest is read)."""
    return [folder or "." for folder, _ in _manifest_paths(repo, tree)]

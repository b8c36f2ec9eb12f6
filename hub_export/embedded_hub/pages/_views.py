"""What each page shows, read from the store: plain data for the templates (``templates/``), no HTML here.

Reads are bounded: a file is shown as text up to :data:`MAX_TEXT` bytes, a listing a page at a time, a commit's
changed files up to :data:`MAX_CHANGES`. What is costly and cannot change (a commit's exports, a card's HTML) is kept
per object id in :class:`Cache`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from hub_export.embedded_hub._catalog import card_data
from hub_export.embedded_hub._discussions import Discussions
from hub_export.embedded_hub._gitstore import Commit, GitRepo
from hub_export.embedded_hub.pages._cards import MAX_CARD_BYTES, render_card
from hub_export.embedded_hub.pages._exports import ExportRow, exports_of
from hub_export.errors import StoreError

__all__ = [
    "MAX_CHANGES",
    "MAX_TEXT",
    "PAGE",
    "Cache",
    "blob_view",
    "card",
    "comment_html",
    "commit_view",
    "exported_at",
    "exports",
    "history_view",
    "link",
    "metadata",
    "page_number",
    "pull_request_view",
    "tree_view",
    "when",
]

MAX_TEXT = 512 * 1024
MAX_CHANGES = 1000
PAGE = 50


class Cache:
    """A bounded map of results that never change for their key (keys name immutable git objects)."""

    def __init__(self, size: int = 8192):
        self._items: OrderedDict[tuple, Any] = OrderedDict()
        self._size, self._lock = size, threading.Lock()

    def get(self, key: tuple, make: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


def page_number(value: str | None) -> int:
    """A ``?p=`` page number (400 unless digits)."""
    if not value:
        return 0
    if not value.isdigit() or len(value) > 6:
        raise StoreError(f"Invalid page: {value!r}")
    return int(value)


def when(timestamp: float) -> str:
    """A commit time as the pages show it."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M UTC")


def exports(cache: Cache, repo: GitRepo, commit: Commit) -> list[ExportRow]:
    return cache.get(("exports", str(repo.path), commit.tree), lambda: exports_of(repo, commit.tree))


def exported_at(cache: Cache, repo: GitRepo, commit: Commit, folders: list[str], depth: int = 500) -> dict[str, int]:
    """When each export folder's ``export.json`` took the content it has at ``commit`` (the commit time), looking back
    at most ``depth`` commits of first-parent history (older: the time of the oldest commit looked at)."""

    def make() -> dict[str, int]:
        def manifest(tree: str, folder: str) -> str | None:
            hit = repo.lookup(tree, f"{folder}/export.json" if folder else "export.json")
            return hit[1] if hit and not hit[0] else None

        pending = {folder: manifest(commit.tree, folder) for folder in folders}
        oldest_same = dict.fromkeys(folders, commit.timestamp)
        found: dict[str, int] = {}
        for older in repo.history(commit.oid, limit=depth):  # newest first
            for folder in list(pending):
                if manifest(older.tree, folder) == pending[folder]:
                    oldest_same[folder] = older.timestamp
                else:
                    found[folder] = oldest_same[folder]
                    del pending[folder]
            if not pending:
                break
        return {**found, **{folder: oldest_same[folder] for folder in pending}}

    return cache.get(("exported-at", str(repo.path), commit.oid, tuple(folders)), make)


def card(cache: Cache, repo: GitRepo, commit: Commit, prefix: str) -> tuple[str | None, str | None]:
    """``(the card's sanitized HTML, a note when it is not shown)``."""
    hit = repo.lookup(commit.tree, "README.md")
    if hit is None or hit[0]:
        return None, None
    info = repo.file_info(hit[1])
    if info.lfs_oid or info.size > MAX_CARD_BYTES:
        return None, f"The model card is too large to show here ({info.size} bytes)."

    def make() -> str:
        text = repo.read_object(hit[1])[1].decode("utf-8", "replace")
        return render_card(text, files_url=f"{prefix}/blob/{commit.oid}", resolve_url=f"{prefix}/resolve/{commit.oid}")

    return cache.get(("card", hit[1], prefix, commit.oid), make), None


def comment_html(cache: Cache, text: str, prefix: str) -> str:
    """A discussion comment's Markdown as sanitized HTML (links to files point at ``main``)."""
    key = ("comment", hashlib.sha256(text.encode()).hexdigest(), prefix)
    return cache.get(
        key, lambda: render_card(text, files_url=f"{prefix}/blob/main", resolve_url=f"{prefix}/resolve/main")
    )


def metadata(cache: Cache, repo: GitRepo, sha: str) -> dict[str, Any]:
    return cache.get(("card-data", str(repo.path), sha), lambda: card_data(repo, sha))


def tree_view(repo: GitRepo, commit: Commit, path: str) -> list[dict[str, Any]]:
    """The entries of the folder ``path`` (404 when it is not a folder of the commit)."""
    hit = repo.lookup(commit.tree, path)
    if hit is None or not hit[0]:
        raise StoreError(f"{path or '/'} is not a folder at {commit.oid[:7]}", 404)
    rows = []
    for name, is_dir, oid in repo.entries(hit[1]):
        row: dict[str, Any] = {"name": name, "path": f"{path}/{name}" if path else name, "dir": is_dir}
        if not is_dir:
            info = repo.file_info(oid)
            row.update(size=info.size, lfs=bool(info.lfs_oid))
        rows.append(row)
    return rows


def blob_view(repo: GitRepo, commit: Commit, path: str) -> dict[str, Any]:
    """A file: its text (JSON indented) when it is small UTF-8, else its size and sha256."""
    hit = repo.lookup(commit.tree, path)
    if hit is None or hit[0]:
        raise StoreError(f"{path} is not a file at {commit.oid[:7]}", 404)
    info = repo.file_info(hit[1])
    out: dict[str, Any] = {"size": info.size, "lfs": bool(info.lfs_oid), "text": None, "sha256": info.lfs_oid}
    if info.lfs_oid:
        return out
    if info.size <= MAX_TEXT:
        data = repo.read_object(hit[1])[1]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and "\x00" not in text:
            if path.endswith(".json"):
                try:
                    text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
                except (ValueError, RecursionError):
                    pass
            out["text"] = text
            return out
    digest = hashlib.sha256()
    for piece in repo.stream_blob(hit[1]):
        digest.update(piece)
    out["sha256"] = digest.hexdigest()
    return out


def history_view(repo: GitRepo, head: str, page: int) -> tuple[list[Commit], bool]:
    """One page of first-parent history from ``head``, and whether there is more."""
    commits = []
    for i, commit in enumerate(repo.history(head, limit=(page + 1) * PAGE + 1)):
        if i >= page * PAGE:
            commits.append(commit)
    return commits[:PAGE], len(commits) > PAGE


def commit_view(repo: GitRepo, commit: Commit) -> list[dict[str, Any]]:
    """The files a commit changed against its first parent: ``{"path", "change"}`` (added, modified, deleted)."""
    after = repo.files(commit.tree)
    before = repo.files(repo.read_commit(commit.parents[0]).tree) if commit.parents else {}
    changes = [
        {"path": p, "change": "added" if p not in before else "modified"} for p in after if before.get(p) != after[p]
    ]
    changes += [{"path": p, "change": "deleted"} for p in before if p not in after]
    return sorted(changes, key=lambda c: c["path"])[:MAX_CHANGES]


def pull_request_view(board: Discussions, item: dict[str, Any]) -> dict[str, Any]:
    """A pull request's changed files, the export folders they touch, and its conflicts with main."""
    base, changes = board.changes(item) if item["isPullRequest"] and item["status"] != "merged" else ({}, {})
    files = [
        {"path": p, "change": "deleted" if o is None else ("added" if p not in base else "modified")}
        for p, o in sorted(changes.items())
    ][:MAX_CHANGES]
    folders = sorted({f["path"].split("/")[0] for f in files if f["path"].endswith("export.json")})
    return {"files": files, "formats": folders, "conflicts": board.conflicts(item), "exports": []}


def link(prefix: str, kind: str, rev: str, path: str = "") -> str:
    """``/{repo}/{kind}/{rev}/{path}``, each piece quoted (a rev of ``refs/pr/1`` keeps its slashes)."""
    return f"{prefix}/{kind}/{quote(rev, safe='/')}" + (f"/{quote(path)}" if path else "")

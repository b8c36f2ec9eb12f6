"""What the embedded Hub says about its repos: ``model_info`` and ``list_models`` (search, author, tags, sort, pages).

A repo's card data is the YAML front matter of ``README.md`` on ``main`` (read bounded, parsed with
``yaml.safe_load``, never executed); its tags are the card's ``tags`` plus its ``library_name`` and
``pipeline_tag``, as the Hub derives them. A listing shows only the repos the request may read.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from hub_export.embedded_hub._gitstore import GitRepo, HubStore
from hub_export.errors import StoreError

__all__ = ["card_data", "iter_repos", "repo_info", "select"]

_MAX_CARD = 1024 * 1024
_SORTS = {"lastModified", "createdAt", "id", "downloads", "likes", "trendingScore"}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def iter_repos(store: HubStore, repo_type: str) -> Iterator[GitRepo]:
    """Every repo of ``repo_type`` in the store, by id."""
    base = store.root / "repos" / f"{repo_type}s"
    if not base.is_dir():
        return
    for namespace in sorted(p for p in base.iterdir() if p.is_dir()):
        for folder in sorted(namespace.glob("*.git")):
            if (folder / "hub.json").is_file():
                try:
                    yield store.get(repo_type, f"{namespace.name}/{folder.name[:-4]}")
                except StoreError:
                    continue


def card_data(repo: GitRepo, sha: str) -> dict[str, Any]:
    """The YAML front matter of ``README.md`` at ``sha`` ({} when there is none or it is not a mapping)."""
    hit = repo.lookup(repo.read_commit(sha).tree, "README.md")
    if hit is None or hit[0]:
        return {}
    info = repo.file_info(hit[1])
    if info.lfs_oid or info.size > _MAX_CARD:
        return {}
    text = repo.read_object(hit[1])[1].decode("utf-8", "replace")
    match = re.match(r"---\s*\n(.*?)\n---\s*(\n|$)", text, re.S)
    if not match:
        return {}
    import yaml  # here: importing the package needs no third-party module

    try:
        data = yaml.safe_load(match[1])
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _tags(card: dict[str, Any]) -> list[str]:
    tags = card.get("tags") or []
    tags = [str(t) for t in tags] if isinstance(tags, list) else [str(tags)]
    for key in ("library_name", "pipeline_tag"):
        if isinstance(card.get(key), str) and card[key] not in tags:
            tags.append(card[key])
    return tags


def repo_info(store: HubStore, repo: GitRepo, sha: str, *, siblings: list[dict] | None, card: bool) -> dict[str, Any]:
    """A repo as ``model_info`` / ``list_models`` give it (``siblings`` None: left out, as in a plain listing)."""
    commit = repo.read_commit(sha)
    meta = store.meta(repo)
    data = card_data(repo, sha)
    out: dict[str, Any] = {
        "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
        "id": repo.repo_id,
        "modelId": repo.repo_id,
        "author": repo.repo_id.split("/")[0],
        "sha": sha,
        "lastModified": _iso(commit.timestamp),
        "createdAt": _iso(meta["createdAt"]),
        "private": meta["private"],
        "disabled": False,
        "gated": meta.get("gated", False),
        "downloads": 0,
        "likes": 0,
        "tags": _tags(data),
        "library_name": data.get("library_name") if isinstance(data.get("library_name"), str) else None,
        "pipeline_tag": data.get("pipeline_tag") if isinstance(data.get("pipeline_tag"), str) else None,
    }
    if siblings is not None:
        out["siblings"] = siblings
    if card:
        out["cardData"] = data
    return out


def select(
    items: list[dict[str, Any]],
    *,
    search: str | None,
    author: str | None,
    filters: list[str],
    pipeline_tag: str | None,
    sort: str | None,
    direction: str | None,
) -> list[dict[str, Any]]:
    """The listing's items that match, sorted (newest first for dates, as the Hub).

    Raises:
        StoreError: 400 for an unknown sort or direction.
    """
    if sort is not None and sort not in _SORTS:
        raise StoreError(f"Invalid sort {sort!r}: one of {', '.join(sorted(_SORTS))}")
    if direction not in (None, "-1", "1"):
        raise StoreError(f"Invalid direction {direction!r}: -1 or 1")
    out = items
    if search:
        out = [i for i in out if search.lower() in i["id"].lower()]
    if author:
        out = [i for i in out if i["author"] == author]
    for wanted in filters:
        out = [i for i in out if wanted in i["tags"] or wanted == i["id"]]
    if pipeline_tag:
        out = [i for i in out if i["pipeline_tag"] == pipeline_tag]
    key = sort or "id"
    descending = (
        direction != "1"
        if sort in ("lastModified", "createdAt", "downloads", "likes", "trendingScore")
        else direction == "-1"
    )
    return sorted(out, key=lambda i: (i.get(key, 0), i["id"]), reverse=descending)

"""Which endpoint each cached commit was downloaded from.

huggingface_hub's cache is keyed by repo id alone: ``me/model`` downloaded from a private hub and ``me/model`` on
huggingface.co share ``models--me--model/``. When the endpoint cannot be reached, ``hf_hub_download`` serves the
commit its cache last resolved the branch to, from whichever endpoint that was, and offline mode does the same by
design. hub_export records the endpoint of every commit it downloads (``origins/`` in hub_export's cache folder, one
small file per repo and commit) and uses a cached commit for an endpoint only when it came from that endpoint:

- online, a commit not recorded for the endpoint is confirmed with one metadata request to it (then recorded);
  an endpoint that cannot be reached is reported, never replaced by another endpoint's copy;
- offline, a commit recorded only for other endpoints is refused, naming the endpoint it came from (a commit
  downloaded by other tools, with no record, loads as before).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .._cache import cache_root

__all__ = ["endpoint_url", "origins_of", "record_origin"]

#: Longest record file read (a few endpoint URLs).
_MAX_RECORD_BYTES = 16 * 1024


def endpoint_url(endpoint: str | None) -> str:
    """The endpoint a call goes to: ``endpoint`` or huggingface_hub's (``HF_ENDPOINT``), without a trailing slash."""
    from huggingface_hub import constants

    return (endpoint or constants.ENDPOINT).rstrip("/")


def _record_path(cache_dir: str | Path | None, repo_id: str, commit: str) -> Path:
    key = hashlib.sha256(repo_id.encode()).hexdigest()[:32]
    return cache_root(cache_dir) / "origins" / key / commit


def origins_of(cache_dir: str | Path | None, repo_id: str, commit: str) -> set[str]:
    """The endpoints ``repo_id@commit`` was downloaded from by hub_export (empty when unrecorded)."""
    path = _record_path(cache_dir, repo_id, commit)
    try:
        with open(path, "rb") as handle:
            text = handle.read(_MAX_RECORD_BYTES).decode("utf-8", "replace")
    except OSError:
        return set()
    return {line.strip() for line in text.splitlines() if line.strip()}


def record_origin(cache_dir: str | Path | None, repo_id: str, commit: str, endpoint: str) -> None:
    """Record that ``repo_id@commit`` was served by ``endpoint`` (best effort: a read-only cache records nothing)."""
    known = origins_of(cache_dir, repo_id, commit)
    if endpoint in known:
        return
    path = _record_path(cache_dir, repo_id, commit)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text("".join(f"{url}\n" for url in sorted(known | {endpoint})), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass

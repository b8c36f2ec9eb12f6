"""Names and ids of the embedded Hub: validation of everything that becomes a filesystem path (paths in a
repo, ref names), git and git-lfs ids, and the Hub's "not found" errors.

Validation is strict and happens before any path is built: a path in a repo is relative, POSIX, without
``.``/``..``/empty segments, backslashes, control characters or a ``.git`` segment; a ref name follows git's
``check-ref-format`` rules and is never 40 hex digits (that would shadow a commit id).
"""

from __future__ import annotations

import hashlib
import re

from hub_export.errors import StoreError

HEX40 = re.compile(r"[0-9a-f]{40}")
SHA256 = re.compile(r"[0-9a-f]{64}")
_BAD_REF = re.compile(r"(^|/)\.|\.\.|//|@\{|[\x00-\x20~^:?*\[\\\x7f]|\.lock(/|$)|/$|^/")


def repo_not_found(repo_id: str) -> StoreError:
    """Error for a repository that does not exist."""
    return StoreError(f"Repository not found: {repo_id}", 404, "RepoNotFound")


def revision_not_found(rev: str) -> StoreError:
    """Error for a revision that does not resolve."""
    return StoreError(f"Invalid rev id: {rev}", 404, "RevisionNotFound")


def entry_not_found(path: str, commit: str | None = None) -> StoreError:
    """Error for a path missing at a revision."""
    headers = {"X-Repo-Commit": commit} if commit else {}
    return StoreError(f"Entry not found: {path}", 404, "EntryNotFound", headers)


def clean_path(path: object, *, folder: bool = False) -> str:
    """Validate a path inside a repo and return it normalised.

    Args:
        path: Candidate relative POSIX path.
        folder: Accept (and strip) one trailing slash.

    Returns:
        The path, unchanged apart from that trailing slash.

    Raises:
        StoreError: 400 for absolute paths, ``.``/``..``/empty segments, backslashes, control characters
            or a ``.git`` segment.
    """
    if not isinstance(path, str) or not path:
        raise StoreError(f"Invalid path: {path!r}")
    if folder and path.endswith("/"):
        path = path[:-1]
    bad = (
        not path
        or len(path) > 4096
        or path.startswith("/")
        or "\\" in path
        or any(ord(c) < 32 or ord(c) == 127 for c in path)
        or any(seg in ("", ".", "..", ".git") for seg in path.split("/"))
    )
    if bad:
        raise StoreError(f"Invalid path in repo: {path!r}")
    return path


def check_ref_name(name: str) -> str:
    """Validate a branch or tag name (git's check-ref-format rules, plus no 40-hex names).

    Raises:
        StoreError: 400 when the name is not a valid ref name.
    """
    if not name or len(name) > 255 or _BAD_REF.search(name) or HEX40.fullmatch(name):
        raise StoreError(f"Invalid reference name: {name!r}")
    return name


def git_oid(kind: str, data: bytes) -> str:
    """The git object id of ``data`` stored as ``kind`` (``blob``, ``tree``, ``commit``)."""
    sha = hashlib.sha1(b"%s %d\0" % (kind.encode(), len(data)))
    sha.update(data)
    return sha.hexdigest()


def lfs_pointer(oid: str, size: int) -> bytes:
    """The git-lfs pointer file for an object."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n".encode()

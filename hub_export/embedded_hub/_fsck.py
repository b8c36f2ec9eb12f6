"""Crash safety and checks of the embedded Hub's storage: leftovers cleaned at start, ``hub-export hub fsck``.

Every write builds its result aside and renames it into place, so a crash (``kill -9``) never leaves a half-written
object, ref, commit or repo in view; what it can leave are the pieces it was building: ``lfs/tmp`` files of an upload,
``lfs/incoming`` multipart parts (their signed URLs die with the server that issued them), ``.tmp-*`` objects and
refs, ``.new-*`` repos being created or copied, ``trash/`` of a delete, temporary metadata files. :func:`clean`
removes them; the server calls it when it starts, before it serves a request.

:func:`check` reads everything a client could be served: every ref's commit, tree and blob (zlib-inflated and
hashed against its name), and the LFS object behind every pointer (its size; its sha256 with ``deep``). With
``repair`` it removes what cannot be served correctly and can be given again: a corrupt LFS object (the next upload
of that file stores it anew) and a corrupt loose object that no ref reaches.
"""

from __future__ import annotations

import hashlib
import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from hub_export.embedded_hub._catalog import iter_repos
from hub_export.embedded_hub._gitstore import GitRepo, HubStore
from hub_export.errors import StoreError

__all__ = ["Report", "check", "clean"]

_TYPES = ("model", "dataset", "space")
_PIECE = 1 << 20


@dataclass
class Report:
    """What :func:`check` found: ``problems`` (one line each), ``repaired`` (what it removed), ``checked`` counts."""

    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=lambda: {"repos": 0, "commits": 0, "objects": 0, "lfs": 0})


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean(store: HubStore) -> list[str]:
    """Remove what interrupted writes left behind (see the module docstring); returns the paths removed, relative to
    the store's root. Call it while no request is being served."""
    root, removed = store.root, []

    def drop(path: Path) -> None:
        _remove(path)
        removed.append(path.relative_to(root).as_posix())

    for leftover in sorted((root / "trash").glob("*")):
        drop(leftover)
    for leftover in sorted(root.glob(".accounts.json.*.tmp")):
        drop(leftover)
    for kind in _TYPES:
        base = root / "repos" / f"{kind}s"
        for namespace in sorted(p for p in base.glob("*") if p.is_dir()):
            for staging in sorted(namespace.glob(".new-*")):
                drop(staging)
            for repo in sorted(namespace.glob("*.git")):
                for pattern in ("lfs/tmp/*", "lfs/incoming/*", "objects/*/.tmp-*", "refs/**/.tmp-*", ".*.tmp", "*.tmp"):
                    for leftover in sorted(repo.glob(pattern)):
                        drop(leftover)
    return removed


def _object_ok(path: Path, oid: str) -> bool:
    """Whether a loose object inflates and hashes to its name."""
    try:
        inflate, digest = zlib.decompressobj(), hashlib.sha1()
        with open(path, "rb") as handle:
            while piece := handle.read(_PIECE):
                digest.update(inflate.decompress(piece))
        digest.update(inflate.flush())
        return digest.hexdigest() == oid and inflate.eof
    except (OSError, zlib.error):
        return False


def _lfs_ok(repo: GitRepo, oid: str, size: int, deep: bool) -> bool:
    path = repo.lfs_path(oid)
    if not path.is_file() or path.stat().st_size != size:
        return False
    if not deep:
        return True
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while piece := handle.read(_PIECE):
            digest.update(piece)
    return digest.hexdigest() == oid


def _check_repo(repo: GitRepo, report: Report, *, deep: bool, repair: bool) -> None:
    where = f"{repo.repo_type}s/{repo.repo_id}"
    seen: set[str] = set()
    refs = {
        f"{p}/{n}": o
        for p in ("refs/heads", "refs/tags", "refs/pr", "refs/convert")
        for n, o in repo.list_refs(p).items()
    }
    for ref, head in sorted(refs.items()):
        try:
            for commit in repo.history(head):
                if commit.oid in seen:
                    continue
                seen.add(commit.oid)
                report.checked["commits"] += 1
                for oid in (commit.oid, commit.tree):
                    if not _object_ok(repo.path / "objects" / oid[:2] / oid[2:], oid):
                        report.problems.append(f"{where}: {ref}: object {oid} is missing or corrupt")
                for path, is_dir, oid in repo.walk(commit.tree):
                    if oid in seen:
                        continue
                    seen.add(oid)
                    report.checked["objects"] += 1
                    if not _object_ok(repo.path / "objects" / oid[:2] / oid[2:], oid):
                        report.problems.append(f"{where}: {ref}: {path} ({oid}) is missing or corrupt")
                        continue
                    if is_dir:
                        continue
                    info = repo.file_info(oid)
                    if info.lfs_oid:
                        report.checked["lfs"] += 1
                        if not _lfs_ok(repo, info.lfs_oid, info.size, deep):
                            report.problems.append(
                                f"{where}: {ref}: {path}: LFS object {info.lfs_oid} is missing or corrupt"
                            )
                            lfs = repo.lfs_path(info.lfs_oid)
                            if repair and lfs.is_file():
                                lfs.unlink()
                                report.repaired.append(
                                    f"{where}: removed corrupt LFS object {info.lfs_oid} (upload the file again)"
                                )
        except StoreError as err:
            report.problems.append(f"{where}: {ref}: {err}")
    if repair:
        for obj in sorted((repo.path / "objects").glob("??/*")):
            oid = obj.parent.name + obj.name
            if oid not in seen and len(oid) == 40 and not _object_ok(obj, oid):
                obj.unlink()
                report.repaired.append(f"{where}: removed corrupt unreferenced object {oid}")


def check(store: HubStore, *, deep: bool = False, repair: bool = False) -> Report:
    """Check every repo (see the module docstring); ``repair`` also cleans leftovers and removes what is corrupt
    and can be uploaded again."""
    report = Report()
    if repair:
        report.repaired.extend(f"removed leftover {p}" for p in clean(store))
    for kind in _TYPES:
        for repo in iter_repos(store, kind):
            report.checked["repos"] += 1
            _check_repo(repo, report, deep=deep, repair=repair)
    return report

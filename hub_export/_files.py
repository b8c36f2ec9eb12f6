"""File helpers: sha256, manifest file entries, verification and atomic directory replacement."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from .errors import IntegrityError
from .manifest import FileEntry

__all__ = ["sha256_file", "file_entry", "verify_file", "atomic_directory", "replace_directory"]

_CHUNK = 8 * 1024 * 1024


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(directory: str | Path, relative: str, role: str = "") -> FileEntry:
    """The manifest entry of ``directory/relative``."""
    path = Path(directory) / relative
    return FileEntry(path=Path(relative).as_posix(), size=path.stat().st_size, sha256=sha256_file(path), role=role)


def verify_file(path: str | Path, entry: FileEntry) -> None:
    """Check size then sha256 of a file against its manifest entry.

    Raises:
        IntegrityError: Missing file, size or sha256 mismatch (naming the file).
    """
    path = Path(path)
    if not path.is_file():
        raise IntegrityError(f"{entry.path}: listed in export.json but missing.")
    size = path.stat().st_size
    if size != entry.size:
        raise IntegrityError(
            f"{entry.path}: size {size} bytes, export.json says {entry.size}; the file is corrupt or tampered."
        )
    digest = sha256_file(path)
    if digest != entry.sha256:
        raise IntegrityError(
            f"{entry.path}: sha256 {digest} does not match export.json ({entry.sha256}); refusing to use it."
        )


def atomic_directory(target: str | Path) -> Path:
    """A fresh temporary directory next to ``target`` (same filesystem, so a rename can publish it)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))


def replace_directory(staged: Path, target: str | Path) -> None:
    """Move ``staged`` to ``target``, replacing an existing ``target`` with two renames.

    The old directory is renamed aside first and deleted only after the new one is in place, so an
    interruption leaves either the old or the new export loadable, never a half-written one.
    """
    target = Path(target)
    if not target.exists():
        os.replace(staged, target)
        return
    aside = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    os.replace(target, aside)
    try:
        os.replace(staged, target)
    except BaseException:
        os.replace(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)

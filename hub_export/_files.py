"""File helpers: sha256 (streamed, remembered by file identity), manifest file entries, verification and atomic
directory replacement.

Hashing a multi-GB export is a large part of saving and loading it, so a file is hashed at most once while it stays
the same file: the digest is remembered under the file's identity ``(device, inode, size, mtime_ns, ctime_ns)``,
in this process and in a small on-disk store (``verified/`` in hub_export's cache folder, see
:mod:`hub_export._cache`), so a second load, in this process or another, does not read the file again.
Writing a file changes its size or its timestamps, so a changed file is hashed again. Writers that hash the bytes
as they write them (:class:`HashingWriter`) record the digest without reading the file back.
``HUB_EXPORT_VERIFIED_CACHE=0`` turns the remembering off (every verification reads every byte).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from ._cache import cache_root
from .errors import HubExportError, IntegrityError
from .manifest import MANIFEST_NAME, FileEntry

__all__ = [
    "HashingWriter",
    "atomic_directory",
    "check_export_folder",
    "copy_file",
    "file_entry",
    "known_sha256",
    "remember_sha256",
    "replace_directory",
    "sha256_file",
    "spelled_as_path",
    "verify_file",
]

_CHUNK = 8 * 1024 * 1024
_LOCK = threading.Lock()
#: (device, inode) -> (size, mtime_ns, ctime_ns, sha256) of files hashed in this process.
_KNOWN: dict[tuple[int, int], tuple[int, int, int, str]] = {}


def _enabled() -> bool:
    return os.environ.get("HUB_EXPORT_VERIFIED_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def _store() -> Path:
    return cache_root() / "verified"


def _identity(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns


def known_sha256(path: str | Path) -> str | None:
    """The sha256 of ``path`` if this file, unchanged since, was hashed before; else None (nothing is read)."""
    if not _enabled():
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    key = (info.st_dev, info.st_ino)
    with _LOCK:
        known = _KNOWN.get(key)
    if known is not None and known[:3] == _identity(info):
        return known[3]
    try:
        record = json.loads((_store() / f"{key[0]:x}-{key[1]:x}").read_text(encoding="utf-8"))
        stored = (int(record["size"]), int(record["mtime_ns"]), int(record["ctime_ns"]), str(record["sha256"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if stored[:3] != _identity(info) or len(stored[3]) != 64:
        return None
    with _LOCK:
        _KNOWN[key] = stored
    return stored[3]


def remember_sha256(path: str | Path, digest: str) -> None:
    """Record that ``path`` as it is now hashes to ``digest`` (call it once the file is closed)."""
    if not _enabled():
        return
    info = os.stat(path)
    key = (info.st_dev, info.st_ino)
    record = (*_identity(info), digest)
    with _LOCK:
        _KNOWN[key] = record
    try:  # best effort: a read-only home only costs a re-hash in the next process
        store = _store()
        store.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = store / f"{key[0]:x}-{key[1]:x}"
        staged = store / f".{name.name}.{uuid.uuid4().hex[:8]}"
        data = {"size": record[0], "mtime_ns": record[1], "ctime_ns": record[2], "sha256": digest}
        staged.write_text(json.dumps(data), encoding="utf-8")
        os.replace(staged, name)
    except OSError:
        pass


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file: remembered when the same file was hashed before, else read in chunks (and remembered)."""
    known = known_sha256(path)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    hexdigest = digest.hexdigest()
    remember_sha256(path, hexdigest)
    return hexdigest


class HashingWriter:
    """A binary file opened for writing that hashes what goes through it; on close the digest is remembered
    (:func:`remember_sha256`), so the manifest entry of the file costs no second read.

    Example::

        with HashingWriter(path) as out:
            out.write(header)
            out.write(memoryview(array).cast("B"))
        out.sha256  # hex digest
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._handle = open(self.path, "wb")  # noqa: SIM115 - closed by close()/__exit__
        self._digest = hashlib.sha256()
        self.size = 0
        self.sha256 = ""

    def write(self, data: Any) -> int:
        """Write bytes (or any buffer) and hash them; returns the number of bytes written."""
        view = memoryview(data).cast("B")
        self._digest.update(view)
        self._handle.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        """Bytes written so far."""
        return self.size

    def close(self) -> None:
        """Close the file and remember its digest."""
        if self._handle.closed:
            return
        self._handle.close()
        self.sha256 = self._digest.hexdigest()
        remember_sha256(self.path, self.sha256)

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None:
            self._handle.close()  # a partial file: never remembered
            return
        self.close()


def copy_file(source: str | Path, target: str | Path) -> str:
    """Copy a file in chunks, hashing it on the way (the copy's digest is remembered); returns the sha256."""
    with open(source, "rb") as handle, HashingWriter(target) as out:
        while chunk := handle.read(_CHUNK):
            out.write(chunk)
    return out.sha256


def file_entry(directory: str | Path, relative: str, role: str = "") -> FileEntry:
    """The manifest entry of ``directory/relative``."""
    path = Path(directory) / relative
    return FileEntry(path=Path(relative).as_posix(), size=path.stat().st_size, sha256=sha256_file(path), role=role)


def verify_file(path: str | Path, entry: FileEntry) -> None:
    """Check size then sha256 of a file against its manifest entry (a file hashed before and unchanged since is not
    read again, see the module docstring).

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


def spelled_as_path(text: str) -> bool:
    """Whether ``text`` can only be a local path, never a Hub repo id (``./x``, ``../x``, ``/x``, ``~/x``, ``x/``,
    more than one ``/``, a Windows drive)."""
    if text.startswith((".", "/", "~", "\\")) or text.endswith(("/", "\\")) or (len(text) > 1 and text[1] == ":"):
        return True
    return text.count("/") > 1


def check_export_folder(target: Path) -> None:
    """Refuse a folder an export cannot be saved into: a file, or a folder with other files than an export (an export
    folder is replaced whole). Callers check before the work that would be saved there (``hub-export export``).

    Raises:
        HubExportError: Saying which folder and what to do.
    """
    target = Path(target)
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / MANIFEST_NAME).is_file())):
        what = "a file" if not target.is_dir() else "a folder holding other files than an export"
        raise HubExportError(
            f"{target} is {what}; save into an empty or new folder (one export per folder, e.g. <model>/onnx), "
            "or into a folder holding an earlier export, which is replaced.",
            cli_message=f"--output {target} is {what}; pass an empty or new folder (or one holding an earlier "
            "export, which is replaced).",
        )

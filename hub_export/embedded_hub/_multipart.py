"""Multipart LFS uploads, the way the Hub offers them for large files (see :mod:`hub_export.embedded_hub._uploads`).

An upload lives in ``<repo>/lfs/incoming/<upload id>/`` until it completes:

* ``data``: the object, each part written in place at ``(n - 1) * chunk_size``, so parts may arrive in any
  order, in parallel, or again after a retry, and completing needs no copy;
* ``part-NNNNN``: written once part ``n`` arrived whole; holds the ETag the server answered for it.

Completing checks that every part arrived with the ETag the client reports, then that the sha256 and size
of ``data`` match the oid, and renames ``data`` into the LFS store. The sha256 is computed while parts
stream in when they arrive in order (``huggingface_hub`` uploads them one after the other), so completing
a multi-GB upload reads nothing back; otherwise ``data`` is hashed once from disk, in pieces.

Uploads left unfinished are swept when their URLs have long expired.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hub_export.embedded_hub._gitstore import GitRepo
from hub_export.embedded_hub._uploads import MULTIPART_URL_LIFETIME
from hub_export.errors import StoreError

UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
_PIECE = 1 << 20
_MAX_TRACKED = 256


@dataclass
class _RunningHash:
    """sha256 of ``data`` up to ``upto`` bytes; ``busy`` while a part extends it."""

    sha: Any
    upto: int = 0
    busy: bool = False


class MultipartUploads:
    """The multipart uploads of one server (state on disk, plus in-memory running hashes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hashes: dict[str, _RunningHash] = {}

    @staticmethod
    def _dir(repo: GitRepo, upload_id: str) -> Path:
        if not UPLOAD_ID.fullmatch(upload_id):
            raise StoreError(f"Invalid upload id: {upload_id!r}")
        return repo.path / "lfs" / "incoming" / upload_id

    def _claim(self, upload_id: str, offset: int) -> Any:
        """A copy of the running hash when a part at ``offset`` extends it, else None (the part is then
        written unhashed; a write into the hashed region invalidates the running hash)."""
        with self._lock:
            running = self._hashes.get(upload_id)
            if running is None and offset == 0:
                if len(self._hashes) >= _MAX_TRACKED:
                    self._hashes.pop(next(iter(self._hashes)))
                running = self._hashes[upload_id] = _RunningHash(hashlib.sha256())
            if running is None:
                return None
            if offset < running.upto:
                self._hashes.pop(upload_id)
                return None
            if running.busy or offset != running.upto:
                return None
            running.busy = True
            return running.sha.copy()

    def _release(self, upload_id: str, sha: Any, written: int | None) -> None:
        with self._lock:
            running = self._hashes.get(upload_id)
            if running is not None and running.busy:
                running.busy = False
                if written is not None:
                    running.sha, running.upto = sha, running.upto + written

    def write_part(
        self, repo: GitRepo, upload_id: str, size: int, chunk: int, number: int, chunks: Iterable[bytes]
    ) -> str:
        """Write part ``number`` (1-based) of an upload of ``size`` bytes in parts of ``chunk``; return its ETag.

        Raises:
            StoreError: 400 for a part number out of range or a body of another length than the part's.
        """
        count = -(-size // chunk)
        if not 1 <= number <= count:
            raise StoreError(f"Part number {number} out of range 1..{count}")
        offset = (number - 1) * chunk
        expected = min(chunk, size - offset)
        folder = self._dir(repo, upload_id)
        folder.mkdir(parents=True, exist_ok=True)
        os.utime(folder)  # the sweep measures age from the last activity
        sha = self._claim(upload_id, offset)
        written = 0
        try:
            fd = os.open(folder / "data", os.O_RDWR | os.O_CREAT, 0o644)
            with os.fdopen(fd, "r+b") as out:
                out.seek(offset)
                for piece in chunks:
                    written += len(piece)
                    if written > expected:
                        raise StoreError(f"Part {number} is larger than {expected} bytes")
                    if sha is not None:
                        sha.update(piece)
                    out.write(piece)
            if written != expected:
                raise StoreError(f"Part {number} has {written} bytes, expected {expected}")
        except BaseException:
            self._release(upload_id, sha, None)
            raise
        self._release(upload_id, sha, written)
        etag = f'"{secrets.token_hex(16)}"'
        marker = folder / f"part-{number:05d}"
        tmp = marker.with_name(f".{marker.name}.{secrets.token_hex(4)}")
        tmp.write_text(etag)
        os.replace(tmp, marker)
        return etag

    def complete(self, repo: GitRepo, upload_id: str, oid: str, size: int, chunk: int, body: dict) -> None:
        """Check the parts the client reports, verify the object and move it into the LFS store.

        Completing again after success is a no-op (the client retries a completion that timed out).

        Raises:
            StoreError: 400 for a malformed body, a missing part or an ETag that does not match, and when
                the assembled content does not match ``oid``/``size`` (the upload is then discarded).
        """
        folder = self._dir(repo, upload_id)
        if repo.lfs_size(oid) == size and not folder.exists():
            return
        parts = body.get("parts")
        if body.get("oid") != oid or not isinstance(parts, list):
            raise StoreError("Malformed completion payload: needs the upload's oid and a list of parts")
        count = -(-size // chunk)
        numbers = [p.get("partNumber") if isinstance(p, dict) else None for p in parts]
        if sorted(n for n in numbers if isinstance(n, int)) != list(range(1, count + 1)):
            raise StoreError(f"Malformed completion payload: expected parts 1..{count}")
        for part in parts:
            try:
                stored = (folder / f"part-{part['partNumber']:05d}").read_text()
            except OSError:
                raise StoreError(f"Part {part['partNumber']} of upload {upload_id} was not uploaded") from None
            if str(part.get("etag", "")).strip('"') != stored.strip('"'):
                raise StoreError(f"ETag of part {part['partNumber']} does not match the uploaded part")
        data = folder / "data"
        with self._lock:
            running = self._hashes.pop(upload_id, None)
        if running is not None and running.upto == size and not running.busy:
            digest, actual = running.sha.hexdigest(), data.stat().st_size
        else:
            digest, actual = _hash_file(data)
        if actual != size or digest != oid:
            shutil.rmtree(folder, ignore_errors=True)
            raise StoreError(f"Uploaded content does not match oid {oid} / size {size}", 400)
        repo.lfs_publish(oid, data)
        shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def sweep(repo: GitRepo, max_age: float = 2 * MULTIPART_URL_LIFETIME) -> None:
        """Delete the unfinished uploads of a repo that saw no activity for ``max_age`` seconds."""
        incoming = repo.path / "lfs" / "incoming"
        if not incoming.is_dir():
            return
        limit = time.time() - max_age
        for folder in incoming.iterdir():
            with contextlib.suppress(OSError):
                if folder.stat().st_mtime < limit:
                    shutil.rmtree(folder, ignore_errors=True)


def _hash_file(path: Path) -> tuple[str, int]:
    """sha256 (hex) and size of a file, read in pieces."""
    sha, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while piece := fh.read(_PIECE):
            sha.update(piece)
            size += len(piece)
    return sha.hexdigest(), size

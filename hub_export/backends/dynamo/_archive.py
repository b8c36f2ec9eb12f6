"""A strict reader of the zip archives ``torch.export.save`` writes (a ``.pt2``, and the ``torch.save`` zips inside it).

Only the central directory is trusted for names and sizes, and it is checked before any entry is read:

* the end-of-central-directory record sits at the very end (no comment, no trailing or prepended data), on one disk,
  with ZIP64 records where torch writes them (more than 65535 entries or offsets past 4 GiB);
* every entry is stored (compression method 0, so its size on disk is its size in memory: a compression ratio of
  exactly 1), not encrypted, with only the flags torch sets (data descriptor, UTF-8 names);
* names are ASCII, under one root folder, without ``..``, ``.``, empty parts, backslashes or a leading ``/``, and
  unique;
* each entry's local header repeats its central-directory name and method, and the entries' bytes lie inside the
  file, before the central directory, without overlapping one another.

Reads then take an entry's bytes at the offset the checked directory gives, with the entry's own size as the budget.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import UnsafeExportError

__all__ = ["ArchiveEntry", "StoredArchive"]

_EOCD = struct.Struct("<4sHHHHIIH")  # signature, disk, cd disk, entries here, entries, cd size, cd offset, comment
_EOCD64_LOCATOR = struct.Struct("<4sIQI")  # signature, disk with eocd64, eocd64 offset, disks
_EOCD64 = struct.Struct("<4sQHHIIQQQQ")  # signature, size, made by, needed, disk, cd disk, here, entries, size, offset
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
_ALLOWED_FLAGS = 0x0008 | 0x0800  # data descriptor follows the data; UTF-8 names
_NAME = re.compile(r"[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]+)*")
_ROOT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_MAX_32 = 0xFFFFFFFF
_MAX_16 = 0xFFFF


@dataclass(frozen=True)
class ArchiveEntry:
    """One checked entry: its name without the root folder, where its bytes start and how many there are."""

    name: str
    offset: int
    size: int


class _Bytes:
    """Random access to an in-memory archive (a ``torch.save`` zip inside a ``.pt2``)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def size(self) -> int:
        return len(self.data)

    def pread(self, size: int, offset: int) -> bytes:
        return self.data[offset : offset + size]

    def pread_into(self, buffer: memoryview, offset: int) -> int:
        chunk = self.data[offset : offset + len(buffer)]
        buffer[: len(chunk)] = chunk
        return len(chunk)


class _File:
    """Random access to an open file (the ``.pt2`` itself)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def pread(self, size: int, offset: int) -> bytes:
        chunks = []
        while size > 0:
            chunk = os.pread(self.fd, min(size, 64 * 1024 * 1024), offset)
            if not chunk:
                break
            chunks.append(chunk)
            size -= len(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def pread_into(self, buffer: memoryview, offset: int) -> int:
        view = memoryview(buffer)
        done = 0
        while done < len(buffer):
            count = os.preadv(self.fd, [view[done : done + 64 * 1024 * 1024]], offset + done)
            if count <= 0:
                break
            done += count
        return done


class StoredArchive:
    """A checked zip archive of stored entries under one root folder.

    Use :meth:`open` for a file (a context manager closing it) or :meth:`from_bytes` for an archive in memory.

    Attributes:
        label: How messages name the archive (``model.pt2``, ``model.pt2:data/sample_inputs/model.pt``).
        root: The archive's root folder (torch names it after the file: ``model`` for ``model.pt2``).
        entries: ``{name below the root: entry}``.
    """

    def __init__(self, source: Any, label: str, *, max_entries: int, expected_size: int | None = None) -> None:
        self._source = source
        self.label = label
        self._fd: int | None = None
        self._map: Any = None  # a map of the file, made by the first map_entry
        size = source.size()
        if expected_size is not None and size != expected_size:
            raise self._refuse(f"{size} bytes, but export.json lists {expected_size}")
        self.size = size
        self.root, self.entries = self._read_directory(max_entries)

    @classmethod
    def open(cls, path: str | Path, label: str, *, max_entries: int, expected_size: int | None = None) -> StoredArchive:
        """Open and check the archive at ``path``.

        Raises:
            UnsafeExportError: Naming ``label`` and the rule the archive breaks.
        """
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise UnsafeExportError(f"{label}: cannot be opened ({exc.strerror or exc}).") from None
        try:
            archive = cls(_File(fd), label, max_entries=max_entries, expected_size=expected_size)
        except BaseException:
            os.close(fd)
            raise
        archive._fd = fd
        return archive

    @classmethod
    def from_bytes(cls, data: bytes, label: str, *, max_entries: int) -> StoredArchive:
        """Check an archive held in memory.

        Raises:
            UnsafeExportError: Naming ``label`` and the rule the archive breaks.
        """
        return cls(_Bytes(data), label, max_entries=max_entries)

    def close(self) -> None:
        """Close the file (an in-memory archive has nothing to close)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def identity(self) -> tuple[int, ...] | None:
        """The open file's device, inode, size and modification and change times (None for bytes in memory): the
        same tuple later means the same bytes."""
        if self._fd is None:
            return None
        info = os.fstat(self._fd)
        return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns

    def __enter__(self) -> StoredArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, name: str, limit: int) -> bytes:
        """The bytes of entry ``name`` (below the root), refused when it is larger than ``limit``.

        Raises:
            UnsafeExportError: No such entry, or it is over ``limit``.
        """
        entry = self.entries.get(name)
        if entry is None:
            raise self._refuse(f"no entry {name!r}")
        if entry.size > limit:
            raise self._refuse(f"entry {name!r} is {entry.size} bytes, over the {limit} byte limit for it")
        data = self._source.pread(entry.size, entry.offset)
        if len(data) != entry.size:
            raise self._refuse(f"entry {name!r} is cut short")
        return data

    def read_into_buffer(self, name: str) -> Any:
        """The bytes of entry ``name`` in a new uint8 tensor, read straight into it: no intermediate copy and no
        zero-fill first (a ``bytearray`` writes every byte once before the read writes it again), so the weights'
        memory is written once.

        Raises:
            UnsafeExportError: No such entry, or it is cut short.
        """
        import torch

        entry = self.entries.get(name)
        if entry is None:
            raise self._refuse(f"no entry {name!r}")
        buffer = torch.empty(entry.size, dtype=torch.uint8)
        view: Any = buffer.numpy()  # the tensor's own memory, writable
        if entry.size and self._source.pread_into(memoryview(view), entry.offset) != entry.size:
            raise self._refuse(f"entry {name!r} is cut short")
        return buffer

    def map_entry(self, name: str, alignment: int = 64) -> Any:
        """The bytes of entry ``name`` as a uint8 tensor over a private (copy-on-write) map of the file: nothing is
        copied, the pages come from the page cache as the program touches them, and several loads of one file
        share them. An entry of an in-memory archive, or not at a multiple of ``alignment`` bytes in the file (torch
        aligns its payloads to 64), is read into new memory instead (:meth:`read_into_buffer`).

        Raises:
            UnsafeExportError: No such entry.
        """
        import mmap

        import torch

        entry = self.entries.get(name)
        if entry is None:
            raise self._refuse(f"no entry {name!r}")
        if self._fd is None or not entry.size or entry.offset % alignment:
            return self.read_into_buffer(name)
        if self._map is None:
            self._map = mmap.mmap(self._fd, self.size, access=mmap.ACCESS_COPY)
        return torch.frombuffer(self._map, dtype=torch.uint8, count=entry.size, offset=entry.offset)

    def _refuse(self, rule: str) -> UnsafeExportError:
        return UnsafeExportError(f"{self.label}: {rule}; refusing to load it.")

    # -- the directory --------------------------------------------------------------------------------------
    def _read_directory(self, max_entries: int) -> tuple[str, dict[str, ArchiveEntry]]:
        size = self.size
        if size < _EOCD.size:
            raise self._refuse("not a zip archive (too short)")
        eocd_at = size - _EOCD.size
        sig, disk, cd_disk, here, count, cd_size, cd_offset, comment = _EOCD.unpack(
            self._source.pread(_EOCD.size, eocd_at)
        )
        if sig != b"PK\x05\x06" or comment:
            raise self._refuse("not a zip archive as torch writes it (no end record at the end of the file)")
        if disk or cd_disk or here != count:
            raise self._refuse("a multi-disk zip archive")
        end_of_cd = eocd_at
        has_locator = eocd_at >= _EOCD64_LOCATOR.size and self._source.pread(4, eocd_at - _EOCD64_LOCATOR.size) == (
            b"PK\x06\x07"
        )
        if has_locator:  # torch writes the ZIP64 records whether or not the sizes need them
            values = self._zip64(eocd_at)
            for small, large in zip((count, cd_size, cd_offset), values[1:4]):
                if small not in (_MAX_16, _MAX_32) and small != large:
                    raise self._refuse("the ZIP64 end record disagrees with the end record")
            here, count, cd_size, cd_offset, end_of_cd = values
        elif _MAX_16 in (here, count) or _MAX_32 in (cd_size, cd_offset):
            raise self._refuse("a ZIP64 archive without its locator")
        if count > max_entries:
            raise self._refuse(f"{count} entries, over the limit of {max_entries}")
        if cd_offset + cd_size != end_of_cd:
            raise self._refuse("the central directory is not where the end record says")
        directory = self._source.pread(cd_size, cd_offset)
        if len(directory) != cd_size:
            raise self._refuse("the central directory is cut short")
        entries: dict[str, ArchiveEntry] = {}
        spans: list[tuple[int, int, str]] = []
        root: str | None = None
        pos = 0
        for _ in range(count):
            name, entry, span = self._central_entry(directory, pos, cd_offset)
            pos = span[2]
            top, _, below = name.partition("/")
            if root is None:
                root = top
            if top != root or not below:
                raise self._refuse(f"entry {name!r} is not under the archive's one root folder {root!r}")
            if below in entries:
                raise self._refuse(f"duplicate entry name {name!r}")
            entries[below] = ArchiveEntry(below, entry[0], entry[1])
            spans.append((span[0], span[1], name))
        if pos != cd_size:
            raise self._refuse("the central directory holds more than its entries")
        if root is None or not _ROOT.fullmatch(root) or root in (".", ".."):
            raise self._refuse(f"a bad root folder {root!r}")
        spans.sort()
        for (_, end, name), (start, _, following) in zip(spans, spans[1:]):
            if start < end:
                raise self._refuse(f"entries {name!r} and {following!r} overlap")
        return root, entries

    def _zip64(self, eocd_at: int) -> tuple[int, int, int, int, int]:
        locator_at = eocd_at - _EOCD64_LOCATOR.size
        if locator_at < 0:
            raise self._refuse("a ZIP64 archive without its locator")
        sig, disk, offset, disks = _EOCD64_LOCATOR.unpack(self._source.pread(_EOCD64_LOCATOR.size, locator_at))
        if sig != b"PK\x06\x07" or disk or disks != 1 or offset + _EOCD64.size > locator_at:
            raise self._refuse("a bad ZIP64 locator")
        record = self._source.pread(_EOCD64.size, offset)
        sig, rec_size, _, _, disk, cd_disk, here, count, cd_size, cd_offset = _EOCD64.unpack(record)
        if sig != b"PK\x06\x06" or disk or cd_disk or here != count or offset + 12 + rec_size != locator_at:
            raise self._refuse("a bad ZIP64 end record")
        return here, count, cd_size, cd_offset, offset

    def _central_entry(
        self, directory: bytes, pos: int, cd_offset: int
    ) -> tuple[str, tuple[int, int], tuple[int, int, int]]:
        if pos + _CENTRAL.size > len(directory):
            raise self._refuse("the central directory is cut short")
        (sig, _, _, flags, method, _, _, _, csize, usize, name_len, extra_len, comment_len, disk, _, _, local) = (
            _CENTRAL.unpack_from(directory, pos)
        )
        if sig != b"PK\x01\x02":
            raise self._refuse("a bad central directory record")
        start = pos + _CENTRAL.size
        end = start + name_len + extra_len + comment_len
        if end > len(directory):
            raise self._refuse("the central directory is cut short")
        raw_name = directory[start : start + name_len]
        extra = directory[start + name_len : start + name_len + extra_len]
        try:
            name = raw_name.decode("ascii")
        except UnicodeDecodeError:
            raise self._refuse(f"entry name {raw_name[:80]!r} is not ASCII") from None
        parts = name.split("/")
        if not _NAME.fullmatch(name) or any(p in (".", "..") for p in parts):
            raise self._refuse(
                f"entry name {name[:200]!r} is not a plain relative path (absolute, '..', a backslash, ...)"
            )
        if flags & ~_ALLOWED_FLAGS:
            raise self._refuse(f"entry {name!r} has flags {flags:#x} (encrypted or otherwise not as torch writes it)")
        if method != 0:
            raise self._refuse(f"entry {name!r} is compressed (method {method}); torch stores every entry")
        if comment_len or disk:
            raise self._refuse(f"entry {name!r} has a comment or lives on another disk")
        if _MAX_32 in (csize, usize, local):
            usize, csize, local = self._zip64_sizes(extra, name, usize, csize, local)
        if csize != usize:
            raise self._refuse(f"entry {name!r} declares {csize} bytes stored for {usize} bytes of data")
        data_start, header_start = self._local_header(local, name, method, cd_offset)
        data_end = data_start + usize
        descriptor = 0
        if flags & 0x0008:
            descriptor = self._descriptor_size(data_end, cd_offset)
        if data_end + descriptor > cd_offset:
            raise self._refuse(f"entry {name!r} runs into the central directory")
        return name, (data_start, usize), (header_start, data_end + descriptor, end)

    def _zip64_sizes(self, extra: bytes, name: str, usize: int, csize: int, local: int) -> tuple[int, int, int]:
        pos = 0
        while pos + 4 <= len(extra):
            tag, length = struct.unpack_from("<HH", extra, pos)
            body = extra[pos + 4 : pos + 4 + length]
            pos += 4 + length
            if tag != 0x0001:
                continue
            values = [struct.unpack_from("<Q", body, 8 * i)[0] for i in range(len(body) // 8)]
            it = iter(values)
            try:
                usize = next(it) if usize == _MAX_32 else usize
                csize = next(it) if csize == _MAX_32 else csize
                local = next(it) if local == _MAX_32 else local
            except StopIteration:
                break
            return usize, csize, local
        raise self._refuse(f"entry {name!r} lacks its ZIP64 sizes")

    def _local_header(self, offset: int, name: str, method: int, cd_offset: int) -> tuple[int, int]:
        if offset + _LOCAL.size > cd_offset:
            raise self._refuse(f"entry {name!r} starts past the data")
        header = self._source.pread(_LOCAL.size, offset)
        sig, _, flags, local_method, _, _, _, _, _, name_len, extra_len = _LOCAL.unpack(header)
        if sig != b"PK\x03\x04" or local_method != method or flags & ~_ALLOWED_FLAGS:
            raise self._refuse(f"entry {name!r} has a bad local header")
        local_name = self._source.pread(name_len, offset + _LOCAL.size)
        if local_name != name.encode("ascii"):
            raise self._refuse(f"entry {name!r} is named {local_name[:80]!r} in its local header")
        return offset + _LOCAL.size + name_len + extra_len, offset

    def _descriptor_size(self, data_end: int, cd_offset: int) -> int:
        head = self._source.pread(4, data_end)
        signed = 4 if head == b"PK\x07\x08" else 0
        # crc + 32-bit sizes (12 bytes) or crc + 64-bit sizes (20 bytes): take the one that ends on a record
        for body in (12, 20):
            end = data_end + signed + body
            if end == cd_offset or self._source.pread(4, end) in (b"PK\x03\x04", b"PK\x01\x02"):
                return signed + body
        raise self._refuse("a bad data descriptor")

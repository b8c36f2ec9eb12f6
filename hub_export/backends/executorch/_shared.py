"""One ``shared.ptd`` for the components of one export whose programs read the same weights.

A generation export's ``prefill`` and ``decode`` programs are lowered from the same model: with the weights kept
outside the programs (``external_data``), each program's ``.ptd`` holds the same named data (XNNPACK names a
packed weight by the sha256 of its bytes, the portable kernels' constants by their module path). Where one
component's ``.ptd`` holds every entry of the others, byte for byte, it becomes :data:`.config.SHARED_WEIGHTS` and
the others are deleted: every program reads its named data from that one file (the runtime looks data up by
key), so the export's files, its download and the page cache hold the weights once. A ``.ptd`` holding anything
another lacks, or the same key with other bytes, keeps every component's own file.
"""

from __future__ import annotations

import struct
from pathlib import Path

from ._flatbuf import Flat
from .config import SHARED_WEIGHTS

__all__ = ["share_weights", "shared_host"]

_CHUNK = 8 << 20


def _named_ranges(path: Path) -> dict[bytes, tuple[int, int]]:
    """Key -> (offset in the file, size) of the named data of a ``.ptd`` written by this process."""
    with open(path, "rb") as handle:
        head = handle.read(48)
        flat_offset, flat_size, base = struct.unpack_from("<QQQ", head, 16)
        handle.seek(0)
        buf = Flat(handle.read(flat_offset + flat_size))
    root = buf.root()
    segments = [(buf.scalar(s, 0, "<Q"), buf.scalar(s, 1, "<Q")) for s in buf.tables(root, 1, 1 << 22)]
    ranges = {}
    for item in buf.tables(root, 2, 1 << 22):
        offset, size = segments[buf.scalar(item, 1, "<I")]
        ranges[buf.string(item, 0) or b""] = (base + offset, size)
    return ranges


def _same_bytes(first: Path, at: int, second: Path, other_at: int, size: int) -> bool:
    with open(first, "rb") as a, open(second, "rb") as b:
        a.seek(at)
        b.seek(other_at)
        while size > 0:
            step = min(size, _CHUNK)
            if a.read(step) != b.read(step):
                return False
            size -= step
    return True


def _holds(host: Path, hosted: dict[bytes, tuple[int, int]], path: Path, ranges: dict[bytes, tuple[int, int]]) -> bool:
    """Whether ``host`` holds every named entry of ``path`` with the same bytes."""
    for key, (offset, size) in ranges.items():
        found = hosted.get(key)
        if found is None or found[1] != size or not _same_bytes(host, found[0], path, offset, size):
            return False
    return True


def shared_host(ptds: dict[str, Path]) -> str | None:
    """The component whose ``.ptd`` holds every other component's named data with the same bytes (the files are
    read, not written: a save decides before it writes, so the weights land on disk once), or None."""
    if len(ptds) < 2:
        return None
    paths = {name: Path(path) for name, path in ptds.items()}
    if len({path.resolve() for path in paths.values()}) == 1:  # already one file (a loaded export's shared.ptd)
        return next(iter(paths))
    ranges = {name: _named_ranges(path) for name, path in paths.items()}
    host = max(ranges, key=lambda name: sum(size for _, size in ranges[name].values()))
    for name, path in paths.items():
        if name != host and not _holds(paths[host], ranges[host], path, ranges[name]):
            return None
    return host


def share_weights(directory: Path, written: dict[str, list[str]]) -> dict[str, list[str]]:
    """Replace the components' written ``.ptd`` files by one :data:`SHARED_WEIGHTS` when one of them holds all the
    others' named data (see the module docstring); returns each component's files, its ``.pte`` first. For programs
    whose files are unknown until written (``ExecutorchProgramManager``); the others are decided before writing
    (:func:`shared_host`)."""
    data = {name: next((f for f in files if f.endswith(".ptd")), None) for name, files in written.items()}
    own = {name: directory / file for name, file in data.items() if file is not None}
    host = shared_host(own)
    if host is None:
        return written
    own[host].replace(directory / SHARED_WEIGHTS)
    for name, path in own.items():
        if name != host:
            path.unlink()
    return {name: [SHARED_WEIGHTS if f == data[name] else f for f in files] for name, files in written.items()}

"""ExecuTorch: the ``.pte`` (and ``.ptd``) headers must be consistent before the runtime parses them.

The runtime's own check (``Verification.InternalConsistency``, used by
:func:`~hub_export.backends.executorch.io.load_program`) validates the flatbuffer. This check
runs first because a damaged file identifier makes executorch 1.5's Python binding abort the whole process
(it formats the bad bytes into an error message as UTF-8) instead of raising. It requires:

* bytes 4..8: the file identifier ``ET`` + two digits;
* an optional extended header at byte 8 (``eh`` + two digits, length >= 24) whose program size, segment base
  offset and segment data size lie within the file, the program before the segments.

:func:`~hub_export.backends.executorch.io.load_program` runs the same header check itself, on the bytes it hands to
the runtime, so a program is checked whatever its file is called, and then checks every index of the execution plans
and the kinds of kernel arguments (:mod:`._plan`): the runtime aborts the process on those too.

A ``.ptd`` data file (the weights of a program exported with ``external_data``) must have the identifier ``FT`` +
two digits at bytes 4..8 and the header ``FH`` + two digits at byte 8 (length >= 40), whose flatbuffer and
segment ranges lie within the file, the flatbuffer before the segments; the runtime then checks each tensor the
program reads against the data file's own index.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from ...errors import UnsafeExportError
from ...formats import SafetyOptions
from ...manifest import ComponentEntry
from .config import LAYOUT

__all__ = ["check", "check_ptd_header", "check_pte_header"]

_IDENT = re.compile(rb"ET\d\d")
_EXT = re.compile(rb"eh\d\d")
_DATA_IDENT = re.compile(rb"FT\d\d")
_DATA_HEADER = re.compile(rb"FH\d\d")


def check(directory: Path, component: str, entry: ComponentEntry, options: SafetyOptions) -> None:
    """Refuse a ``.pte`` whose headers are inconsistent.

    Raises:
        UnsafeExportError: Naming the file and the bad field.
    """
    paths = LAYOUT.paths(component, [f.path for f in entry.files])
    for role, check_header in (("program", check_pte_header), ("weights", check_ptd_header)):
        if role not in paths:
            continue
        name = paths[role]
        with open(directory / name, "rb") as handle:
            head = handle.read(64)
        check_header(head, (directory / name).stat().st_size, name)


def check_pte_header(head: bytes, size: int, label: str) -> int:
    """Validate the first bytes of a ``.pte`` of ``size`` bytes (see module docstring); returns where the program's
    flatbuffer ends (the segments follow it)."""
    if len(head) < 8 or _IDENT.fullmatch(head[4:8]) is None:
        raise UnsafeExportError(f"{label}: not an ExecuTorch program (bad file identifier {head[4:8]!r}).")
    root = struct.unpack_from("<I", head, 0)[0]
    if root >= size:
        raise UnsafeExportError(f"{label}: flatbuffer root offset {root} is past the end of the file ({size} bytes).")
    if len(head) < 32 or _EXT.fullmatch(head[8:12]) is None:
        return size  # no extended header: the whole file is the flatbuffer
    length, program_size, segment_base = struct.unpack_from("<IQQ", head, 12)
    segment_size = struct.unpack_from("<Q", head, 32)[0] if length >= 32 and len(head) >= 40 else 0
    if (
        length < 24
        or program_size > size
        or segment_base > size
        or (segment_base and program_size > segment_base)
        or segment_base + segment_size > size
    ):
        raise UnsafeExportError(
            f"{label}: inconsistent extended header (length {length}, program {program_size}, segments at "
            f"{segment_base} of {segment_size} bytes, file {size} bytes); the file is damaged."
        )
    return program_size or size


def check_ptd_header(head: bytes, size: int, label: str) -> None:
    """Validate the first bytes of a ``.ptd`` data file of ``size`` bytes (see module docstring)."""
    if len(head) < 48 or _DATA_IDENT.fullmatch(head[4:8]) is None or _DATA_HEADER.fullmatch(head[8:12]) is None:
        raise UnsafeExportError(f"{label}: not an ExecuTorch data file (bad identifier {head[4:12]!r}).")
    length, flat_offset, flat_size, segment_base, segment_size = struct.unpack_from("<IQQQQ", head, 12)
    flat_end, segment_end = flat_offset + flat_size, segment_base + segment_size
    root = struct.unpack_from("<I", head, 0)[0]
    if (
        length < 40
        or root >= size
        or flat_end > size
        or segment_end > size
        or (segment_size and segment_base < flat_end)
    ):
        raise UnsafeExportError(
            f"{label}: inconsistent data header (length {length}, flatbuffer {flat_offset}+{flat_size}, segments "
            f"{segment_base}+{segment_size}, file {size} bytes); the file is damaged."
        )

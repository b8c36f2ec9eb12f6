"""ExecuTorch: the ``.pte`` headers must be consistent before the runtime parses it.

The runtime's own check (``Verification.InternalConsistency``, used by
:meth:`~hub_export.exporters.executorch.ExecutorchExporter.load_program`) validates the flatbuffer. This check
runs first because a damaged file identifier makes executorch 1.5's Python binding abort the whole process
(it formats the bad bytes into an error message as UTF-8) instead of raising. It requires:

* bytes 4..8: the file identifier ``ET`` + two digits;
* an optional extended header at byte 8 (``eh`` + two digits, length >= 32) whose program size and segment
  base offset lie within the file, the program before the segments.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

from ..errors import UnsafeExportError
from ..manifest import ComponentEntry

__all__ = ["check", "check_pte_header"]

_IDENT = re.compile(rb"ET\d\d")
_EXT = re.compile(rb"eh\d\d")


def check(directory: Path, entry: ComponentEntry, **_: Any) -> None:
    """Refuse a ``.pte`` whose headers are inconsistent.

    Raises:
        UnsafeExportError: Naming the file and the bad field.
    """
    for file in entry.files:
        if file.path.endswith(".pte"):
            with open(directory / file.path, "rb") as handle:
                head = handle.read(64)
            check_pte_header(head, (directory / file.path).stat().st_size, file.path)


def check_pte_header(head: bytes, size: int, label: str) -> None:
    """Validate the first bytes of a ``.pte`` of ``size`` bytes (see module docstring)."""
    if len(head) < 8 or _IDENT.fullmatch(head[4:8]) is None:
        raise UnsafeExportError(f"{label}: not an ExecuTorch program (bad file identifier {head[4:8]!r}).")
    root = struct.unpack_from("<I", head, 0)[0]
    if root >= size:
        raise UnsafeExportError(f"{label}: flatbuffer root offset {root} is past the end of the file ({size} bytes).")
    if len(head) < 32 or _EXT.fullmatch(head[8:12]) is None:
        return  # no extended header: the whole file is the flatbuffer
    length, program_size, segment_base = struct.unpack_from("<IQQ", head, 12)
    if length < 24 or program_size > size or segment_base > size or (segment_base and program_size > segment_base):
        raise UnsafeExportError(
            f"{label}: inconsistent extended header (length {length}, program {program_size}, segments at "
            f"{segment_base}, file {size} bytes); the file is damaged."
        )

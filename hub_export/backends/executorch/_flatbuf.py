"""A bounds-checked flatbuffer reader for the safety checks: every offset, table, vtable, vector and string is checked
to lie inside the buffer before it is read, and the number of tables and items read is bounded.

It reads what the C++ ``flatbuffers::Verifier`` checks (the checks below run before any runtime parses the bytes),
with Python ints only: nothing is allocated per element beyond the values a caller asks for.
"""

from __future__ import annotations

import struct

__all__ = ["Flat", "FlatError", "Table"]

_F32 = struct.Struct("<f")
_SIZES = {"<B": 1, "<b": 1, "<H": 2, "<h": 2, "<I": 4, "<i": 4, "<Q": 8, "<q": 8, "<f": 4, "<d": 8}


class FlatError(Exception):
    """A flatbuffer that points outside itself, or past a bound (the message says which)."""


Table = tuple[int, int, int, int]
"""``(position, vtable position, vtable size, inline size)`` of a checked table."""


class Flat:
    """Bounds-checked reads of one flatbuffer (``data``: the buffer, its root offset at byte 0).

    Args:
        data: The flatbuffer's bytes (a ``bytes`` or ``memoryview``).
        max_tables: How many tables a walk may open in all (bounds the time of one check).
        max_items: The most items one vector may declare.
    """

    def __init__(self, data: bytes | memoryview, max_tables: int = 1 << 20, max_items: int = 1 << 24) -> None:
        self.data = data
        self.size = len(data)
        self.tables_left = max_tables
        self.max_items = max_items

    def unpack(self, fmt: str, pos: int) -> int:
        """The scalar of struct format ``fmt`` at ``pos``."""
        width = _SIZES[fmt]
        if pos < 0 or pos + width > self.size:
            raise FlatError(f"offset {pos} is outside the buffer ({self.size} bytes)")
        return struct.unpack_from(fmt, self.data, pos)[0]

    def unpack_float(self, pos: int) -> float:
        if pos < 0 or pos + 4 > self.size:
            raise FlatError(f"offset {pos} is outside the buffer ({self.size} bytes)")
        return float(_F32.unpack_from(self.data, pos)[0])

    def root(self) -> Table:
        """The root table."""
        return self.table(self.unpack("<I", 0))

    def table(self, pos: int) -> Table:
        """The table at ``pos``, its vtable checked to lie inside the buffer."""
        self.tables_left -= 1
        if self.tables_left < 0:
            raise FlatError("more tables than any export holds")
        if pos % 4:
            raise FlatError(f"a table at {pos} is misaligned")
        vtable = pos - self.unpack("<i", pos)
        if vtable % 2:
            raise FlatError(f"a vtable at {vtable} is misaligned")
        vsize = self.unpack("<H", vtable)
        inline = self.unpack("<H", vtable + 2) if vsize >= 4 else 0
        if vsize < 4 or vsize % 2 or vtable + vsize > self.size or inline < 4 or pos + inline > self.size:
            raise FlatError(f"the table at {pos} has a bad vtable (size {vsize}, table size {inline})")
        return pos, vtable, vsize, inline

    def field(self, table: Table, slot: int, width: int) -> int | None:
        """Where field ``slot`` (``width`` bytes inline) of ``table`` is stored, or None when absent."""
        pos, vtable, vsize, inline = table
        if 4 + 2 * slot + 2 > vsize:
            return None
        offset = self.unpack("<H", vtable + 4 + 2 * slot)
        if not offset:
            return None
        if offset + width > inline:
            raise FlatError(f"field {slot} of the table at {pos} lies outside the table")
        return pos + offset

    def scalar(self, table: Table, slot: int, fmt: str, default: int = 0) -> int:
        at = self.field(table, slot, _SIZES[fmt])
        return default if at is None else self.unpack(fmt, at)

    def real(self, table: Table, slot: int) -> float:
        at = self.field(table, slot, 4)
        return 0.0 if at is None else self.unpack_float(at)

    def present(self, table: Table, slot: int) -> bool:
        return self.field(table, slot, 1) is not None

    def _target(self, table: Table, slot: int) -> int | None:
        at = self.field(table, slot, 4)
        if at is None:
            return None
        target = at + self.unpack("<I", at)
        if target >= self.size:
            raise FlatError(f"an offset at {at} points past the buffer")
        return target

    def child(self, table: Table, slot: int) -> Table | None:
        """The table field ``slot`` points to (None when absent)."""
        target = self._target(table, slot)
        return None if target is None else self.table(target)

    def vector(self, table: Table, slot: int, width: int) -> tuple[int, int]:
        """``(start of the elements, count)`` of a vector field of ``width``-byte items (``(0, 0)`` when absent)."""
        start = self._target(table, slot)
        if start is None:
            return 0, 0
        if start % 4:
            raise FlatError(f"a vector at {start} is misaligned")
        count = self.unpack("<I", start)
        if count > self.max_items or start + 4 + count * width > self.size:
            raise FlatError(f"a vector at {start} of {count} items passes the end of the buffer")
        return start + 4, count

    def ints(self, table: Table, slot: int, fmt: str = "<I") -> list[int]:
        """A vector of scalars, read into a list (callers bound the count they accept first, see ``count``)."""
        start, count = self.vector(table, slot, _SIZES[fmt])
        width = _SIZES[fmt]
        return [self.unpack(fmt, start + i * width) for i in range(count)]

    def count(self, table: Table, slot: int, width: int) -> int:
        return self.vector(table, slot, width)[1]

    def string(self, table: Table, slot: int, limit: int = 4096) -> bytes | None:
        """A string field (None when absent): within the buffer, NUL-terminated, at most ``limit`` bytes."""
        start = self._target(table, slot)
        if start is None:
            return None
        if start % 4:
            raise FlatError(f"a string at {start} is misaligned")
        length = self.unpack("<I", start)
        if length > limit or start + 4 + length + 1 > self.size or self.data[start + 4 + length] != 0:
            raise FlatError(f"a string at {start} of {length} bytes is too long or passes the end of the buffer")
        return bytes(self.data[start + 4 : start + 4 + length])

    def tables(self, table: Table, slot: int, limit: int) -> list[Table]:
        """A vector of tables (at most ``limit``)."""
        start, count = self.vector(table, slot, 4)
        if count > limit:
            raise FlatError(f"a vector of {count} tables (at most {limit})")
        return [self.table(start + 4 * i + self.unpack("<I", start + 4 * i)) for i in range(count)]

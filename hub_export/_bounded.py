"""Bounded reads for the safety layer: a file is never read past a byte budget, and JSON never parsed unbounded.

Every check of an untrusted export reads through these helpers. A budget comes from what the manifest declares (a
file's listed size, which the loader has already compared with the file on disk) and from a per-kind cap (a
config is small, a program's JSON is bounded); reading more than the budget raises the caller's error instead of
allocating. JSON is refused before it is parsed when it could expand into too many containers, and after it is
parsed when it nests too deeply, so a hostile file cannot take the memory or the recursion limit of the process.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import HubExportError, UnsafeExportError

__all__ = ["MiB", "json_depth", "loads_bounded_json", "read_bounded", "stream_chunks"]

MiB = 1024 * 1024
_CHUNK = 4 * MiB


def _refuse(error: type[HubExportError], message: str) -> HubExportError:
    return error(message)


def read_bounded(path: str | Path, limit: int, label: str, *, error: type[HubExportError] = UnsafeExportError) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, read without ever holding more than ``limit + 1``.

    Args:
        path: The file (a symlink is followed: the manifest has already checked where it points).
        limit: The budget in bytes.
        label: How messages name the file.
        error: The error class to raise.

    Raises:
        HubExportError: (of class ``error``) The file is not a regular file or is larger than ``limit``.
    """
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise _refuse(error, f"{label}: not a regular file; refusing to read it.")
            if info.st_size > limit:
                raise _refuse(error, f"{label}: {info.st_size} bytes, over the {limit} byte limit for this file.")
            data = handle.read(limit + 1)
    except OSError as exc:
        raise _refuse(error, f"{label}: cannot be read ({exc.strerror or exc}).") from None
    if len(data) > limit:
        raise _refuse(error, f"{label}: grew past the {limit} byte limit while being read.")
    return data


def stream_chunks(
    handle: Any, budget: int, label: str, *, chunk: int = _CHUNK, error: type[HubExportError] = UnsafeExportError
):
    """Yield ``handle``'s bytes in chunks; raise once more than ``budget`` bytes would be read.

    Raises:
        HubExportError: (of class ``error``) The stream holds more than ``budget`` bytes.
    """
    total = 0
    while True:
        data = handle.read(min(chunk, budget - total + 1))
        if not data:
            return
        total += len(data)
        if total > budget:
            raise _refuse(error, f"{label}: more than the {budget} bytes export.json lists; refusing to read on.")
        yield data


def json_depth(value: Any, limit: int) -> int:
    """The nesting depth of parsed JSON data, walked without recursion and stopping at ``limit``."""
    stack = [(value, 1)]
    deepest = 0
    while stack:
        item, level = stack.pop()
        if level > deepest:
            deepest = level
            if deepest >= limit:
                return deepest
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_bounded_json(
    data: bytes,
    label: str,
    *,
    max_containers: int,
    max_depth: int = 200,
    error: type[HubExportError] = UnsafeExportError,
) -> Any:
    """Parse JSON bytes whose expansion is bounded before parsing.

    ``data.count(b"{") + data.count(b"[")`` bounds the number of objects and arrays the text can build (braces
    inside strings count too, so the bound is conservative), which bounds the memory the parse takes. ``NaN`` and
    ``Infinity`` literals are refused (they are not JSON).

    Raises:
        HubExportError: (of class ``error``) Too many containers, nesting deeper than ``max_depth``, not UTF-8
            JSON.
    """
    containers = data.count(b"{") + data.count(b"[")
    if containers > max_containers:
        raise _refuse(
            error, f"{label}: up to {containers} JSON objects/arrays, over the limit of {max_containers}; refusing it."
        )
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise _refuse(error, f"{label}: JSON nested too deeply; refusing it.") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, int digit limits, NaN
        raise _refuse(error, f"{label}: not valid JSON ({exc}).") from None
    if json_depth(value, max_depth + 1) > max_depth:
        raise _refuse(error, f"{label}: JSON nested deeper than {max_depth} levels; refusing it.")
    return value

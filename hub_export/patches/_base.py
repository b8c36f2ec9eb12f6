"""The mechanism shared by every patch: replace an attribute for the duration of a ``with`` block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import PatchTargetMissing

__all__ = ["patch_attribute"]

_MISSING = object()


@contextlib.contextmanager
def patch_attribute(owner: Any, name: str, value: Any, *, reason: str) -> Iterator[None]:
    """Set ``owner.name = value`` inside the block and restore the original in ``finally``.

    Args:
        owner: Module, class or config object holding the attribute.
        name: Attribute name; it must exist.
        value: Replacement value.
        reason: The upstream bug worked around (shown when the target is missing).

    Raises:
        PatchTargetMissing: ``owner`` has no attribute ``name`` any more.
    """
    original = getattr(owner, name, _MISSING)
    if original is _MISSING:
        raise PatchTargetMissing(
            f"Patch target {getattr(owner, '__name__', owner)!r}.{name} is gone; the workaround for {reason} needs review."
        )
    # a class keeps its own entry (a staticmethod or classmethod object, not what getattr returns), or none
    own = vars(owner).get(name, _MISSING) if isinstance(owner, type) else original
    setattr(owner, name, value)
    try:
        yield
    finally:
        if own is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, own)

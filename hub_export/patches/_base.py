"""The mechanisms shared by the patches: replace an attribute for the duration of a ``with`` block
(:func:`patch_attribute`); keep alive, as long as an object, the memory a workaround made it read
(:func:`hold_memory`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import PatchTargetMissing

__all__ = ["held_memory", "hold_memory", "patch_attribute"]

#: The attribute of an object holding what :func:`hold_memory` keeps alive with it.
_HELD_MEMORY = "_hub_export_held_memory"

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


def hold_memory(owner: Any, objects: list[Any]) -> None:
    """Keep ``objects`` (buffers, tensors, mapped files) alive as long as ``owner``: for an object that reads their
    memory without holding it (an ``openvino.Model`` whose constants were built over it)."""
    setattr(owner, _HELD_MEMORY, [*held_memory(owner), *objects])


def held_memory(owner: Any) -> list[Any]:
    """What :func:`hold_memory` keeps alive with ``owner``."""
    return list(getattr(owner, _HELD_MEMORY, []))

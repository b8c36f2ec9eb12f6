"""Reversible, scoped workarounds for upstream bugs: one module per backend.

Every patch is applied inside a context manager and restored in ``finally``; each names the upstream issue
it works around; a patch whose target no longer exists raises :class:`PatchTargetMissing` (never skipped
silently).
"""

from ._base import PatchTargetMissing, patch_attribute

__all__ = ["PatchTargetMissing", "patch_attribute"]

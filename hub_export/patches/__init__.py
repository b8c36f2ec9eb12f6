"""Reversible, scoped workarounds for upstream bugs.

The patches every format needs while tracing are in :mod:`hub_export.patches.tracing`; graph rewrites for the
formats that re-run ``run_decompositions`` while lowering in :mod:`hub_export.patches.graph`; NNCF's in
:mod:`hub_export.patches.nncf`; the fold that keeps a fixed input's values known while tracing in
:mod:`hub_export.patches.values`; each backend keeps its own in ``hub_export/backends/<format>/patches.py``.
Every patch is applied inside a context manager and restored in ``finally``; each names the upstream issue it
works around; a patch whose target no longer exists raises :class:`~hub_export.errors.PatchTargetMissing`
(never skipped silently).
"""

from ._base import patch_attribute

__all__ = ["patch_attribute"]

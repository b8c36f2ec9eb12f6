"""Public helpers that sit between a model and an export (mirrors ``transformers.exporters.utils``)."""

from __future__ import annotations

from .generation.decompose import decompose_for_generation

__all__ = ["decompose_for_generation"]

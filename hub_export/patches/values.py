"""Tracing patches for models whose code reads tensor values: fixed integer inputs, data-dependent checks.

* :func:`fixed_values_fold` — an integer input fixed by the export (an image grid, image sizes) is rebuilt inside
  the traced forward from its values; FakeTensorMode folds only tensors of at most ``CONSTANT_NUMEL_LIMIT`` (1)
  elements (torch/_subclasses/fake_tensor.py), so ``grid_thw.tolist()`` would still give unbacked symbols.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ._base import patch_attribute

__all__ = ["fixed_values_fold"]


@contextlib.contextmanager
def fixed_values_fold(numel: int) -> Iterator[None]:
    """Let FakeTensorMode fold constant tensors of up to ``numel`` elements inside the block.

    ``torch.export`` traces under a FakeTensorMode that keeps the real values of a tensor built from Python data
    (``torch.tensor([...])``) and of every op on such tensors only when the result has at most
    ``torch._subclasses.fake_tensor.CONSTANT_NUMEL_LIMIT`` elements (1): a ``(2, 3)`` grid built from the export's
    fixed values loses them, and ``.tolist()`` on it creates unbacked symbols whose guards fail
    (``GuardOnDataDependentSymNode``). Raising the limit to the fixed inputs' size keeps their values known while
    tracing, so the model's shape arithmetic over them folds to the integers the export was built for. Tensors
    computed from graph inputs are never folded (folding needs every input of an op to be a constant).
    """
    import torch._subclasses.fake_tensor as fake_tensor

    limit = max(int(numel), fake_tensor.CONSTANT_NUMEL_LIMIT)
    with patch_attribute(
        fake_tensor,
        "CONSTANT_NUMEL_LIMIT",
        limit,
        reason="FakeTensorMode folds only one-element constants (torch/_subclasses/fake_tensor.py)",
    ):
        yield

"""The dim order of strides with data-dependent sizes, answered in both directions of divisibility.

ExecuTorch reads each tensor's dim order from its strides (``exir/tensor.py`` ``dim_order_from_stride``, executorch
1.5.1, from pytorch/executorch#19516), sorting them with a comparison that answers ``a < b`` for strides holding a
size read from the data (unbacked) by divisibility: ``32 < 32 * u0`` is True because ``32`` divides ``32 * u0`` and
they may differ. The converse, ``32 * u0 < 32``, has no such rule and falls to a guard on the data
(``GuardOnDataDependentSymNode: Could not guard on data-dependent expression 32*u84 < 32``): Idefics2's and
Idefics3's selected image rows, FastSpeech2-Conformer's frames and Longformer's global tokens failed to lower.
:func:`dim_orders_by_divisibility` adds that rule (``b`` divides ``a``: ``a`` is not smaller, strides being
positive); every other comparison is upstream's.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from ...patches import patch_attribute

__all__ = ["dim_order_from_stride", "dim_orders_by_divisibility"]

_REASON = "dim_order_from_stride guards on a data-dependent stride larger than a divisor of it (executorch#19516)"

#: The modules that call ``dim_order_from_stride`` through a name of their own.
_USERS = (
    "executorch.exir.tensor",
    "executorch.exir.tensor_layout",
    "executorch.exir.passes.replace_view_copy_with_view_pass",
)


def dim_order_from_stride(stride: Any) -> tuple[int, ...]:
    """The dims from the largest stride to the smallest (stable for equal strides), as upstream's; a stride that a
    smaller one divides is known not to be smaller than it, sizes read from the data included."""
    import torch
    from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true

    for s in stride:
        torch._check(s != 0, lambda: "0 in strides is not supported for ExecuTorch.")

    class Key:
        __slots__ = ("stride",)

        def __init__(self, stride: Any) -> None:
            self.stride = stride

        def __lt__(self, other: Key) -> bool:
            a, b = self.stride, other.stride
            if guard_or_false(a < b):
                return True
            if guard_or_false(b % a == 0) and guard_or_true(a != b):
                return True  # a divides b: a <= b, and they may differ (upstream's rule)
            if guard_or_false(a % b == 0):
                return False  # b divides a: a >= b
            return bool(a < b)

    order = sorted(enumerate(stride), key=lambda item: Key(item[1]), reverse=True)
    return tuple(index for index, _ in order)


@contextlib.contextmanager
def dim_orders_by_divisibility() -> Iterator[None]:
    """:func:`dim_order_from_stride` in place of upstream's in every module that calls it, inside the block."""
    import importlib

    with contextlib.ExitStack() as stack:
        for name in _USERS:
            module = sys.modules.get(name) or importlib.import_module(name)
            if hasattr(module, "dim_order_from_stride"):
                stack.enter_context(
                    patch_attribute(module, "dim_order_from_stride", dim_order_from_stride, reason=_REASON)
                )
        yield

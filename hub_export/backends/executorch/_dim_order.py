"""The dim orders ExecuTorch reads from strides: data-dependent strides compared in both directions of
divisibility, and the orders no runtime kernel takes planned contiguous.

ExecuTorch reads each tensor's dim order from its strides (``exir/tensor.py`` ``dim_order_from_stride``, executorch
1.5.1, from pytorch/executorch#19516), sorting them with a comparison that answers ``a < b`` for strides holding a
size read from the data (unbacked) by divisibility: ``32 < 32 * u0`` is True because ``32`` divides ``32 * u0`` and
they may differ. The converse, ``32 * u0 < 32``, has no such rule and falls to a guard on the data
(``GuardOnDataDependentSymNode: Could not guard on data-dependent expression 32*u84 < 32``): Idefics2's and
Idefics3's selected image rows, FastSpeech2-Conformer's frames and Longformer's global tokens failed to lower.
:func:`dim_orders_by_divisibility` adds that rule (``b`` divides ``a``: ``a`` is not smaller, strides being
positive); every other comparison is upstream's.

A tensor's strides come from torch's eager kernels, whose layouts the runtime's kernels do not share: ``nonzero``
returns its indices column by column (strides ``(1, n)``: order ``(1, 0)``), and a ``[104, 1]`` column has the
transposed order of its meaningless size-1 stride. The runtime's portable kernels take only the contiguous and the
channels-last orders, the same on every tensor of a call (``tensors_have_same_dim_order``), and write their outputs
in them: such a tensor was refused beside its squeeze or slice ("2 input tensors have different dim orders", error
0x12: Qwen3-ASR's encoder, Longformer's global tokens). :func:`dim_orders_the_kernels_take` gives every tensor
whose order is neither of the two the contiguous order, which is how the runtime's kernel writes it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

from ...patches import patch_attribute

__all__ = [
    "dim_order_from_stride",
    "dim_orders_by_divisibility",
    "dim_orders_the_kernels_take",
]

_REASON = "dim_order_from_stride guards on a data-dependent stride larger than a divisor of it (executorch#19516)"
_KERNEL_ORDERS = "TensorSpec.from_tensor keeps eager's layouts (nonzero's columns), which no runtime kernel takes"

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


def _taken_by_the_kernels(order: tuple[int, ...]) -> bool:
    """Whether the runtime's portable kernels take ``order``: contiguous, or channels-last of a 4-D tensor."""
    return order == tuple(range(len(order))) or order == (0, 2, 3, 1)


@contextlib.contextmanager
def dim_orders_the_kernels_take() -> Iterator[None]:
    """``TensorSpec.from_tensor`` with the contiguous order for a tensor whose strides give an order that no
    runtime kernel takes, inside the block."""
    from executorch.exir.tensor import TensorSpec

    original = TensorSpec.from_tensor

    def from_tensor(cls: type, tensor: Any, const: bool = False) -> Any:
        spec = original(tensor, const=const)
        if not _taken_by_the_kernels(tuple(spec.dim_order)):
            spec.dim_order = tuple(range(len(spec.shape)))
        return spec

    with patch_attribute(TensorSpec, "from_tensor", classmethod(from_tensor), reason=_KERNEL_ORDERS):
        yield


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

"""Tracing patches for models whose code reads tensor values: fixed integer inputs, data-dependent checks.

* :func:`fixed_values_fold` — an integer input fixed by the export (an image grid, image sizes) is rebuilt inside
  the traced forward from its values; FakeTensorMode folds only tensors of at most ``CONSTANT_NUMEL_LIMIT`` (1)
  elements (torch/_subclasses/fake_tensor.py), so ``grid_thw.tolist()`` would still give unbacked symbols.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ._base import patch_attribute

__all__ = ["FOLD_NUMEL", "fixed_values_fold"]

#: The most elements a tensor computed from fixed values may hold and still be folded while tracing (a grid's
#: window index, rotary positions of one image: thousands; the computation runs for real, on the CPU, once).
FOLD_NUMEL = 1 << 16


@contextlib.contextmanager
def fixed_values_fold(numel: int = FOLD_NUMEL) -> Iterator[None]:
    """Inside the block, FakeTensorMode keeps the values of tensors of up to ``numel`` elements computed from
    constants only: the export's fixed inputs, Python literals and factories (``arange``, ``zeros``...) of
    concrete sizes.

    ``torch.export`` traces under a FakeTensorMode that keeps the real values of a tensor built from Python data
    (``torch.tensor([...])``) and of every op on such tensors only when the result has at most
    ``torch._subclasses.fake_tensor.CONSTANT_NUMEL_LIMIT`` elements (1), and never for factories: a ``(2, 3)`` grid
    built from the export's fixed values loses them, and ``.tolist()`` on it, or on a window index computed from
    ``torch.arange(h * w)``, creates unbacked symbols whose guards fail (``GuardOnDataDependentSymNode``). Raising
    the limit and folding factories of concrete sizes keeps those values known while tracing, so the model's
    shape arithmetic over them folds to the integers the export was built for. The graph keeps every op (the
    values only inform the tracer); tensors computed from graph inputs are never folded (folding needs every
    input of an op to be a constant), nor uninitialized ones (``new_empty`` of a constant: torch would fold its
    garbage). Outside a fixed-values trace the limit stays torch's.
    """
    import torch
    import torch._subclasses.fake_tensor as fake_tensor

    mode = fake_tensor.FakeTensorMode
    dispatch, cached_dispatch = mode._dispatch_impl, mode._cached_dispatch_impl
    factories = {
        torch.ops.aten.arange.default,
        torch.ops.aten.arange.start,
        torch.ops.aten.arange.start_step,
        torch.ops.aten.zeros.default,
        torch.ops.aten.ones.default,
        torch.ops.aten.full.default,
    }

    def folded_factory(self: Any, func: Any, args: Any, kwargs: Any) -> Any:
        """The factory's output as a constant fake tensor, or None when it is not folded."""
        if func not in factories or not _concrete(args, kwargs):
            return None
        from torch.utils._mode_utils import no_dispatch

        with no_dispatch():
            value = func(*args, **{k: v for k, v in kwargs.items() if k != "device"}, device="cpu")
        if value.numel() > numel:
            return None
        target = kwargs.get("device")
        value = value if target is None else value.to(target)
        return self.fake_tensor_converter.from_real_tensor(self, value, make_constant=True)

    def folding_dispatch(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        folded = folded_factory(self, func, args, kwargs)
        if folded is not None:
            return folded
        out: Any = dispatch(self, func, types, args, kwargs)
        if "empty" in str(func) and getattr(out, "constant", None) is not None:
            out.constant = None  # uninitialized memory is no value: `new_empty` on a constant would fold garbage
        return out

    def folding_cached_dispatch(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        # FakeTensorMode's dispatch cache is class-wide and keyed on the op and its arguments: a factory traced
        # earlier in the process (`arange(6)` of any export) would be answered from the cache without a value,
        # never reaching `_dispatch_impl`. Ops reading a constant bypass the cache already.
        folded = folded_factory(self, func, args, kwargs)
        return folded if folded is not None else cached_dispatch(self, func, types, args, kwargs)

    build = torch.tensor

    def tensor(data: Any, *args: Any, **kwargs: Any) -> Any:
        # torch.tensor reads the storage of the 0-d tensors a list holds, which a fake tensor has none of ("The
        # tensor has a non-zero number of elements, but its data is not allocated yet"): read their values instead
        if isinstance(data, (list, tuple)) and any(isinstance(x, torch.Tensor) and x.dim() == 0 for x in data):
            data = [x.item() if isinstance(x, torch.Tensor) and x.dim() == 0 else x for x in data]
        return build(data, *args, **kwargs)

    reason = "FakeTensorMode folds only one-element constants and no factories (torch/_subclasses/fake_tensor.py)"
    with (
        patch_attribute(
            fake_tensor, "CONSTANT_NUMEL_LIMIT", max(numel, fake_tensor.CONSTANT_NUMEL_LIMIT), reason=reason
        ),
        patch_attribute(mode, "_dispatch_impl", folding_dispatch, reason=reason),
        patch_attribute(mode, "_cached_dispatch_impl", folding_cached_dispatch, reason=reason),
        patch_attribute(torch, "tensor", tensor, reason="torch.tensor over a list of 0-d fake tensors"),
    ):
        yield


def _concrete(args: Any, kwargs: Any) -> bool:
    """Whether a factory's arguments are all plain Python values (no SymInt, no tensor) on the CPU or meta."""
    import torch

    values = [*args, *kwargs.values()]
    if any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool, torch.Tensor)) for v in values):
        return False
    if any(isinstance(v, (list, tuple)) and any(not isinstance(x, int) for x in v) for v in values):
        return False
    device = kwargs.get("device")
    return device is None or torch.device(device).type == "cpu"

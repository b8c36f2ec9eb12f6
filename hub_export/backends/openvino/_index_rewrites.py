"""Operators OpenVINO's PyTorch frontend lacks or converts wrongly, rewritten as gathers and masked reductions over
index tensors built in the graph from ``arange`` while ``convert_model`` reads the program (openvino 2026.4); each
rewrite is reversible and gives the same numbers (through :func:`~._op_rewrites.expanded_nodes`).

* :func:`unfold_as_gather` — ``aten.unfold`` (sliding windows: Inkling 2's short convolution), whose rule builds a
  ``Transpose`` of the wrong rank once the sizes are dynamic.
* :func:`cummax_as_masked_max` — ``aten.cummax`` (no rule: the runs of placeholder tokens that
  :mod:`hub_export.patches.multimodal` finds for HunYuan-VL's positions), when only its values are read.
* :func:`gqa_heads_repeated` — ``aten.scaled_dot_product_attention`` with ``enable_gqa=True`` (fewer key/value heads
  than query heads: Diffusion Gemma), whose rule ignores the flag and whose shape inference then refuses the key.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator
from typing import Any

from ...patches.graph import Inserter
from ._op_rewrites import _size, expanded_nodes

__all__ = ["cummax_as_masked_max", "gqa_heads_repeated", "index_rewrites", "unfold_as_gather"]


def _expand_unfold(node: Any, add: Inserter) -> tuple[Any, tuple[Any, ...]] | None:
    """``x.unfold(dim, size, step)`` as ``x`` indexed along ``dim`` by ``[w * step + s]`` (a ``(windows, size)``
    index), then permuted to unfold's layout (``dim`` replaced by the windows, ``size`` last)."""
    import torch

    aten = torch.ops.aten
    x, dim, size, step = node.args
    val = x.meta["val"]
    ndim = val.dim()
    if ndim == 0 or not isinstance(size, int) or not isinstance(step, int):
        return None
    dim %= ndim
    n = _size(add, x, dim)
    if isinstance(n, int):
        windows: Any = (n - size) // step + 1
    else:
        windows = add(operator.add, add(operator.floordiv, add(operator.sub, n, size), step), 1)
    index = {"dtype": torch.int64, "device": val.device}
    starts = add(aten.unsqueeze.default, add(aten.mul.Scalar, add(aten.arange.default, windows, **index), step), 1)
    offsets = add(aten.unsqueeze.default, add(aten.arange.default, size, **index), 0)
    moved = x if dim == 0 else add(aten.permute.default, x, [dim, *range(dim), *range(dim + 1, ndim)])
    picked = add(aten.index.Tensor, moved, [add(aten.add.Tensor, starts, offsets)])  # (windows, size, other axes)
    order = [*range(2, dim + 2), 0, *range(dim + 2, ndim + 1), 1]
    return aten.permute.default, (picked, order)


def unfold_as_gather(program: Any) -> contextlib.AbstractContextManager[int]:
    """``aten.unfold(x, dim, size, step)`` as an index of ``x`` with the window positions ``w * step + s`` (built from
    ``arange`` of the, possibly dynamic, window count), inside the block.

    OpenVINO's rule for ``aten.unfold`` (openvino 2026.4) reshapes to a rank of its own and then transposes with a
    permutation of the input's rank once the sizes are dynamic: "Input order must have shape [n], where n is the
    rank of arg" (Inkling 2's causal convolution, ``context.unfold(-1, kernel, 1)``). The gather picks the same
    elements.

    Yields:
        How many nodes were rewritten.
    """
    import torch

    return expanded_nodes(program, {torch.ops.aten.unfold.default}, _expand_unfold)


def _expand_cummax(node: Any, add: Inserter) -> tuple[Any, tuple[Any, ...]] | None:
    """``cummax(x, dim).values`` as ``max`` over a new axis of ``x`` with the later positions masked to the lowest
    value: ``[..., i, j, ...] = x[..., j, ...]`` where ``j <= i``."""
    import torch

    aten = torch.ops.aten
    if any(user.target is not operator.getitem or (user.args[1] != 0 and user.users) for user in node.users):
        return None  # the indices are read: max's first index is not cummax's last one among ties
    x, dim = node.args[:2]
    val = x.meta["val"]
    ndim = val.dim()
    if ndim == 0 or val.dtype == torch.bool or val.is_complex():
        return None
    dim %= ndim
    lowest = float("-inf") if val.dtype.is_floating_point else torch.iinfo(val.dtype).min
    n = _size(add, x, dim)
    positions = add(aten.arange.default, n, dtype=torch.int64, device=val.device)
    seen = add(aten.le.Tensor, add(aten.unsqueeze.default, positions, 0), add(aten.unsqueeze.default, positions, 1))
    for _ in range(ndim - 1 - dim):  # (i, j) broadcast over the axes after dim
        seen = add(aten.unsqueeze.default, seen, -1)
    masked = add(aten.where.ScalarOther, seen, add(aten.unsqueeze.default, x, dim), lowest)
    return aten.max.dim, (masked, dim + 1)


def cummax_as_masked_max(program: Any) -> contextlib.AbstractContextManager[int]:
    """``aten.cummax(x, dim)`` whose indices nothing reads as ``max`` over the positions up to each one (a
    ``(n, n)`` mask built from ``arange``), inside the block.

    OpenVINO's frontend has no rule for ``aten.cummax`` (openvino 2026.4: "No conversion rule found for operations:
    aten.cummax.default"); :mod:`hub_export.patches.multimodal` reads the running maximum of token positions to
    find the runs of image placeholders (HunYuan-VL). The values are exactly cummax's; a node whose indices are read
    is left to the frontend (``max`` returns the first index of a tie, cummax the last).

    Yields:
        How many nodes were rewritten.
    """
    import torch

    return expanded_nodes(program, {torch.ops.aten.cummax.default}, _expand_cummax)


def _expand_gqa(node: Any, add: Inserter) -> tuple[Any, tuple[Any, ...], dict[str, Any]] | None:
    """The key and value heads picked ``heads // kv_heads`` times each (``index_select`` of ``arange(kv_heads)``
    repeated), and the flag dropped."""
    import torch

    aten = torch.ops.aten
    if not node.kwargs.get("enable_gqa"):
        return None
    query, key, value = node.args[:3]
    kwargs = {name: arg for name, arg in node.kwargs.items() if name != "enable_gqa"}
    heads, kv_heads = query.meta["val"].shape[-3], key.meta["val"].shape[-3]
    if isinstance(heads, int) and isinstance(kv_heads, int) and heads == kv_heads:
        return node.target, node.args, kwargs
    axis = key.meta["val"].dim() - 3
    heads, kv_heads = _size(add, query, query.meta["val"].dim() - 3), _size(add, key, axis)
    index = {"dtype": torch.int64, "device": key.meta["val"].device}
    group = heads // kv_heads if isinstance(heads, int) else add(operator.floordiv, heads, kv_heads)
    group = add(aten.scalar_tensor.default, group, **index)
    # 0, 0, 1, 1, ...: repeat_interleave's order, the heads ATen's GQA gives each key head
    picked = add(aten.div.Tensor_mode, add(aten.arange.default, heads, **index), group, rounding_mode="floor")
    key, value = (add(aten.index_select.default, t, axis, picked) for t in (key, value))
    return node.target, (query, key, value, *node.args[3:]), kwargs


def gqa_heads_repeated(program: Any) -> contextlib.AbstractContextManager[int]:
    """``aten.scaled_dot_product_attention(..., enable_gqa=True)`` as the same attention over the key and value heads
    repeated to the query's (``repeat_interleave``'s order, which ATen's GQA reads), inside the block.

    OpenVINO's rule (openvino 2026.4) drops ``enable_gqa``; its ``ScaledDotProductAttention`` then refuses a key with
    fewer heads: "Key input shape not compatible with other inputs" (Diffusion Gemma: transformers passes the flag
    when there is no mask, ``use_gqa_in_sdpa``).

    Yields:
        How many nodes were rewritten.
    """
    import torch

    return expanded_nodes(program, {torch.ops.aten.scaled_dot_product_attention.default}, _expand_gqa)


@contextlib.contextmanager
def index_rewrites(program: Any) -> Iterator[tuple[int, int, int]]:
    """Every rewrite of this module, inside the block.

    Yields:
        How many ``unfold``, ``cummax`` and attention nodes were rewritten.
    """
    with unfold_as_gather(program) as unfolds, cummax_as_masked_max(program) as maxima:
        with gqa_heads_repeated(program) as attentions:
            yield unfolds, maxima, attentions

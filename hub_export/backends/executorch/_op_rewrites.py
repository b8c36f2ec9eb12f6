"""Operators outside the core ATen opset that ``to_edge`` cannot decompose, rewritten as core ops with the same
numbers while the program is lowered (executorch 1.5.1); each rewrite is reversible.

``to_edge`` verifies that every operator left after ``run_decompositions`` is in the core ATen opset (or is kept
whole for a partitioner) and refuses the program otherwise (``SpecViolationError: Operator ... is not in Core ATen
opset``). An operator without a registered decomposition reaches that check as traced:

* :func:`bucketize_as_comparisons` — ``aten.bucketize.Tensor`` (Idefics2/3's, SmolVLM's, Aria's and Phi-4
  multimodal's patch position buckets) as a count of the boundaries at or below (``right=True``) or below each value.

* :func:`empty_of_symbolic_sizes_as_zeros` — ``aten.new_empty`` / ``aten.empty.memory_format`` / ``aten.empty_like``
  of a symbolic size (DeepSeek-V3's MLA ``expand_kv`` fills a ``new_empty`` key per layer) as zeros of it:
  ``to_edge`` turns an ``empty`` into ``dim_order_ops::_empty_dim_order``, whose schema takes ``int[] size``, and
  calling it on symbolic sizes guards each one to the sample's value: the whole program was pinned to the sample's
  batch and length (executorch 1.5.1, ``exir/passes/memory_format_ops_pass.py``). ``full`` takes ``SymInt[]``.

* :func:`long_indices` — the ``int32`` index of ``scatter`` / ``scatter_add`` / ``gather`` / ``index_select`` cast to
  ``int64``: the edge verifier's dtype table admits only ``int64`` indices there ("operators taking Tensor inputs
  with mismatched dtypes": GLM-5-Next's top-k attention mask, ``scatter_add`` of an ``int32`` index).

* :func:`sorts_as_topk` — ``sort`` / ``argsort`` (ViT-MAE's and VideoMAE's random masking shuffles its patches
  with ``argsort(noise)``): a core ATen op, but the runtime has no kernel for it ("Missing operator:
  aten::sort.values", the program fails to load); ``topk`` of the whole axis, sorted, has one.

* :func:`negative_pads_as_slices` — ``constant_pad_nd`` with a negative pad (RWKV's time shift, ``ZeroPad2d((0, 0,
  1, -1))``, crops the last step): torch crops there, the runtime's kernel refuses ("Padding values must be
  non-negative", error 0x12 when run); the crop becomes a ``slice`` before the pad.

* :func:`erfinv_as_polynomials` — ``erfinv`` (Gemma-3n's activation sparsity: the normal distribution's quantile
  of its target sparsity) has no decomposition: Giles' single-precision approximation ("Approximating the erfinv
  function", GPU Computing Gems, 2011), two polynomials in ``w = -log((1 - x) (1 + x))`` (no cancellation near
  +-1) picked by ``w < 5``: within 5e-7 of torch's float32 values on [-1, 1].

Each rewrite turns the node itself into the last op of its replacement (its users are untouched) through
:func:`~hub_export.patches.graph.edited_nodes`, which restores it and erases the helper nodes after the block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...patches.graph import Inserter, edited_nodes

__all__ = [
    "bucketize_as_comparisons",
    "empty_of_symbolic_sizes_as_zeros",
    "erfinv_as_polynomials",
    "long_indices",
    "negative_pads_as_slices",
    "op_rewrites",
    "sorts_as_topk",
]


def _bucketize(node: Any, add: Inserter) -> dict[str, Any] | None:
    """``bucketize(x, boundaries, right)`` -> ``sum(x[..., None] >= boundaries, -1)`` (``>`` without ``right``),
    in the output's integer dtype: with sorted 1-D boundaries, the index ``torch.bucketize`` documents."""
    import torch

    aten = torch.ops.aten
    if node.target is not aten.bucketize.Tensor or add.mode is None:
        return None
    x, boundaries = node.args[:2]
    value = node.meta.get("val")
    if value is None or boundaries.meta.get("val") is None or boundaries.meta["val"].dim() != 1:
        return None
    right = bool(node.kwargs.get("right", False))
    compare = aten.ge.Tensor if right else aten.gt.Tensor
    below = add(compare, add(aten.unsqueeze.default, x, -1), boundaries)
    counted = add(aten._to_copy.default, below, dtype=value.dtype)
    return {"target": aten.sum.dim_IntList, "args": (counted, [-1]), "kwargs": {}}


def bucketize_as_comparisons(program: Any) -> contextlib.AbstractContextManager[int]:
    """``aten.bucketize.Tensor`` of 1-D boundaries as comparisons summed over the boundaries, inside the block.

    ``bucketize`` has no decomposition and is not in the core ATen opset: ``to_edge`` refused Idefics3's vision
    embeddings ("Operator torch._ops.aten.bucketize.Tensor is not in Core ATen opset"). The bucket of a value is
    the number of boundaries ``<=`` it (``right=True``) or ``<`` it, the same integers for any sizes; the
    comparison holds ``values x boundaries`` booleans (a patch grid's positions against its 32 or 70 buckets).

    Yields:
        How many nodes were rewritten.
    """
    return edited_nodes(program, _bucketize, record_values=True)


def _empty(node: Any, add: Inserter) -> dict[str, Any] | None:
    """An ``empty`` of a symbolic size -> the same call of its ``zeros`` twin (contiguous layouts only)."""
    import torch

    aten = torch.ops.aten
    twins = {
        aten.new_empty.default: aten.new_zeros.default,
        aten.empty.memory_format: aten.zeros.default,
        aten.empty_like.default: aten.zeros_like.default,
    }
    value = node.meta.get("val")
    if node.target not in twins or not isinstance(value, torch.Tensor):
        return None
    if all(isinstance(size, int) for size in value.shape):
        return None  # a static size takes _empty_dim_order's int[] as it is
    kwargs = dict(node.kwargs)
    if kwargs.get("memory_format") not in (None, torch.contiguous_format, torch.preserve_format):
        return None
    if node.target is aten.empty.memory_format:
        kwargs.pop("memory_format", None)  # zeros has none: contiguous
    return {"target": twins[node.target], "kwargs": kwargs}


def empty_of_symbolic_sizes_as_zeros(program: Any) -> contextlib.AbstractContextManager[int]:
    """Every ``empty`` of a symbolic size as ``zeros`` of it, inside the block (see the module's docstring): the
    values an ``empty`` leaves unwritten are undefined, zeros are one choice of them.

    Yields:
        How many nodes were rewritten.
    """
    return edited_nodes(program, _empty)


def _long_index(node: Any, add: Inserter) -> dict[str, Any] | None:
    """The ``int32`` index argument of an indexing op -> its ``int64`` copy (``_to_copy``)."""
    import torch

    aten = torch.ops.aten
    positions = {
        aten.scatter_add.default: 2,
        aten.scatter.src: 2,
        aten.scatter.value: 2,
        aten.scatter_reduce.two: 2,
        aten.gather.default: 2,
        aten.index_select.default: 2,
    }
    at = positions.get(node.target)
    if at is None or add.mode is None or len(node.args) <= at:
        return None
    index = node.args[at]
    value = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dtype is not torch.int32:
        return None
    args = list(node.args)
    args[at] = add(aten._to_copy.default, index, dtype=torch.int64)
    return {"args": tuple(args)}


def long_indices(program: Any) -> contextlib.AbstractContextManager[int]:
    """Every ``int32`` index of an indexing op as its ``int64`` copy, inside the block (see the module's docstring).

    Yields:
        How many nodes were rewritten.
    """
    return edited_nodes(program, _long_index, record_values=True)


def _sort(node: Any, add: Inserter) -> dict[str, Any] | None:
    """``sort(x, dim, descending)`` -> ``topk(x, x.size(dim), dim, largest=descending, sorted=True)``; ``argsort``
    -> its indices. A stable sort is left as it is (``topk`` does not order equal values by position)."""
    import operator

    import torch

    aten = torch.ops.aten
    sorts = (aten.sort.default, aten.sort.stable, aten.argsort.default, aten.argsort.stable)
    if node.target not in sorts or add.mode is None or node.kwargs.get("stable"):
        return None
    x = node.args[0]
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return None
    stable_overload = node.target in (aten.sort.stable, aten.argsort.stable)
    positional = [] if stable_overload else list(node.args[1:])
    dim = node.kwargs.get("dim", positional[0] if positional else -1) % value.dim()
    descending = bool(node.kwargs.get("descending", positional[1] if len(positional) > 1 else False))
    size = value.shape[dim]
    k = size if isinstance(size, int) else add(aten.sym_size.int, x, dim)
    if node.target in (aten.sort.default, aten.sort.stable):
        return {"target": aten.topk.default, "args": (x, k, dim, descending, True), "kwargs": {}}
    ranked = add(aten.topk.default, x, k, dim, descending, True)
    return {"target": operator.getitem, "args": (ranked, 1), "kwargs": {}}


def sorts_as_topk(program: Any) -> contextlib.AbstractContextManager[int]:
    """Every unstable ``sort`` / ``argsort`` as a ``topk`` of the whole axis, inside the block (see the module's
    docstring): the same values and, between unequal values, the same order.

    Yields:
        How many nodes were rewritten.
    """
    return edited_nodes(program, _sort, record_values=True)


def _negative_pad(node: Any, add: Inserter) -> dict[str, Any] | None:
    """``constant_pad_nd(x, pad)`` (or a constant ``pad``) with negative entries -> the same op on ``slice(x, ...)``
    and ``max(pad, 0)``: each negative entry crops its side of its axis (the pairs run from the last axis back)."""
    import torch

    aten = torch.ops.aten
    if node.target not in (aten.constant_pad_nd.default, aten.pad.default) or add.mode is None:
        return None
    mode = node.kwargs.get("mode", node.args[2] if len(node.args) > 2 else "constant")
    if mode != "constant":
        return None
    x, pad = node.args[0], list(node.args[1])
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or not all(isinstance(p, int) for p in pad) or min(pad, default=0) >= 0:
        return None
    cropped = x
    for pair in range(len(pad) // 2):
        before, after = pad[2 * pair], pad[2 * pair + 1]
        if before < 0 or after < 0:
            end = after if after < 0 else None
            cropped = add(aten.slice.Tensor, cropped, value.dim() - 1 - pair, max(-before, 0), end)
    return {"args": (cropped, [max(p, 0) for p in pad], *node.args[2:])}


def negative_pads_as_slices(program: Any) -> contextlib.AbstractContextManager[int]:
    """Every ``constant_pad_nd`` with a negative pad as a ``slice`` then a non-negative pad, inside the block (see
    the module's docstring).

    Yields:
        How many nodes were rewritten.
    """
    return edited_nodes(program, _negative_pad, record_values=True)


#: Giles' coefficients, highest power first: the central branch (``w - 2.5``, ``w < 5``) and the tails (``sqrt(w) - 3``)
_ERFINV_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
    0.246640727, 1.50140941,
)  # fmt: skip
_ERFINV_TAILS = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
    1.00167406, 2.83297682,
)  # fmt: skip


def _erfinv(node: Any, add: Inserter) -> dict[str, Any] | None:
    """``erfinv(x)`` -> ``x * p(w)``, ``p`` Giles' central or tail polynomial; ``x * inf`` at ``x = +-1``."""
    import math

    import torch

    aten = torch.ops.aten
    if node.target is not aten.erfinv.default or add.mode is None:
        return None
    x = node.args[0]
    value = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return None

    def horner(w: Any, coefficients: tuple[float, ...]) -> Any:
        p = add(aten.mul.Tensor, add(aten.ones_like.default, w), coefficients[0])
        for c in coefficients[1:]:
            p = add(aten.add.Tensor, add(aten.mul.Tensor, p, w), c)
        return p

    one_minus = add(aten.rsub.Scalar, x, 1.0)
    one_plus = add(aten.add.Tensor, x, 1.0)
    w = add(aten.neg.default, add(aten.log.default, add(aten.mul.Tensor, one_minus, one_plus)))
    central = horner(add(aten.sub.Tensor, w, 2.5), _ERFINV_CENTRAL)
    tails = horner(add(aten.sub.Tensor, add(aten.sqrt.default, w), 3.0), _ERFINV_TAILS)
    approximated = add(aten.mul.Tensor, add(aten.where.self, add(aten.lt.Scalar, w, 5.0), central, tails), x)
    edges = add(aten.eq.Scalar, add(aten.abs.default, x), 1.0)  # the polynomials' infinities lose the sign there
    return {"target": aten.where.self, "args": (edges, add(aten.mul.Tensor, x, math.inf), approximated), "kwargs": {}}


def erfinv_as_polynomials(program: Any) -> contextlib.AbstractContextManager[int]:
    """Every floating-point ``erfinv`` as Giles' approximation, inside the block (see the module's docstring):
    within 5e-7 of torch's float32 values on (-1, 1), +-inf at +-1 and NaN outside.

    Yields:
        How many nodes were rewritten.
    """
    return edited_nodes(program, _erfinv, record_values=True)


@contextlib.contextmanager
def op_rewrites(program: Any) -> Iterator[None]:
    """Every rewrite of this module, inside the block."""
    with (
        bucketize_as_comparisons(program),
        empty_of_symbolic_sizes_as_zeros(program),
        long_indices(program),
        sorts_as_topk(program),
        negative_pads_as_slices(program),
        erfinv_as_polynomials(program),
    ):
        yield

"""Upper bounds of symbolic sizes for ExecuTorch's memory plan, exact where sympy's interval arithmetic gives up.

ExecuTorch plans every buffer for the largest value of its size (``eval_upper_bound``, executorch 1.5.1), which
:func:`.patches.planned_sizes_must_be_bounded` answers with :func:`upper_bound`. ``bound_sympy`` bounds each
operand of a size on its own, so a floor division by a size that is itself a floor division of the same symbol
(``s // (s // 8)``: Mamba-2's chunk count, Granite Speech's CTC pooling, the Cosmos-3 vision merger, SEW-D's
attention over pooled frames) reads as a division by a range holding 0: unbounded. Every symbol of an input size
has a finite range, so the size is then evaluated at every point of those ranges at once (numpy arrays broadcast
one axis per symbol, a subexpression of one symbol computed over that symbol's range only), which gives its exact
maximum. A point where the size divides by zero is one the program cannot run at (it would raise there): it is
left out, not read as unbounded.

A view shares its base's planned buffer (``ReplaceViewCopyWithViewPass``), which is planned for the base's bounds;
each dim is bounded on its own, so a view whose dims are correlated (``(s, 32)`` viewed as ``(s // 8, s // (s // 8),
32)``: 64 x 15 x 32 elements against 512 x 32; SEW-D's pooled attention: 126 GiB against 0.1) can be bounded above
its base. The runtime then refuses to load the program when the base ends its arena ("offset_bytes + size_bytes >=
allocator size", error 0x21) and lets the view's bounds overlap the next buffer otherwise. A view holds as many
elements as its base at run time (``et_view`` resizes it to the actual sizes, within the capacity its planned sizes
give), so :func:`bounds_pass` plans such a view as its base's elements in its first dim.
"""

from __future__ import annotations

import functools
import math
from typing import Any

__all__ = ["bounds_pass", "upper_bound"]

#: Most points :func:`upper_bound` evaluates a size at when interval arithmetic cannot bound it.
_EXHAUSTIVE_POINTS = 1 << 22


def upper_bound(size: Any) -> int | None:
    """The largest value a SymInt can take under its ShapeEnv's ranges (an int is its own), or None if unbounded
    (a symbol without a finite range: a data-dependent size; or more than :data:`_EXHAUSTIVE_POINTS` points)."""
    from torch.utils._sympy.numbers import IntInfinity
    from torch.utils._sympy.value_ranges import bound_sympy

    node = getattr(size, "node", None)
    if node is None:
        return int(size)
    ranges = node.shape_env.var_to_range
    try:
        upper = bound_sympy(node.expr, ranges).upper
    except ZeroDivisionError:  # a divisor whose range holds 0
        return _exhaustive_upper_bound(node.expr, ranges)
    if isinstance(upper, IntInfinity) or not (upper.is_finite and upper.is_integer):  # int_oo claims to be finite
        return _exhaustive_upper_bound(node.expr, ranges)
    return int(upper)


def _exhaustive_upper_bound(expr: Any, ranges: dict[Any, Any]) -> int | None:
    """The maximum of ``expr`` over the grid of its symbols' integer ranges, or None (an unbounded or too large
    range, an operator :func:`_evaluate` does not know, or no point where the size is defined)."""
    from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity

    symbols = tuple(sorted(expr.free_symbols, key=str))
    axes = []
    for symbol in symbols:
        bounds = ranges.get(symbol)
        if bounds is None:
            return None
        ends = (bounds.lower, bounds.upper)
        if any(isinstance(b, (IntInfinity, NegativeIntInfinity)) or not b.is_Integer for b in ends):
            return None
        axes.append((int(ends[0]), int(ends[1])))
    return _grid_maximum(expr, symbols, tuple(axes))


class _Unsupported(Exception):
    """An operator of the size that :func:`_evaluate` does not compute."""


@functools.lru_cache(maxsize=1024)
def _grid_maximum(expr: Any, symbols: tuple[Any, ...], axes: tuple[tuple[int, int], ...]) -> int | None:
    """:func:`_exhaustive_upper_bound` on given ranges, cached: the memory planner asks for the same size once per
    tensor that has it."""
    import numpy as np

    if math.prod(high - low + 1 for low, high in axes) > _EXHAUSTIVE_POINTS:
        return None
    values = {}
    for index, (symbol, (low, high)) in enumerate(zip(symbols, axes)):
        shape = [1] * len(axes)
        shape[index] = high - low + 1
        values[symbol] = np.arange(low, high + 1, dtype=np.int64).reshape(shape)
    defined = np.ones([1] * len(axes), dtype=bool)
    try:
        with np.errstate(divide="ignore", invalid="ignore", over="raise"):
            result, defined = _evaluate(expr, values, defined)
    except (_Unsupported, FloatingPointError):
        return None
    result, defined = np.broadcast_arrays(result, defined)
    if not defined.any():
        return None
    return int(result[defined].max())


def _evaluate(expr: Any, values: dict[Any, Any], defined: Any) -> tuple[Any, Any]:
    """``expr`` over the broadcast grid ``values`` (int64 arrays, one axis per symbol), and where it is defined
    (``defined`` narrowed by every division or modulo by zero)."""
    import numpy as np
    import sympy
    from torch.utils._sympy import functions as fn

    if expr in values:
        return values[expr], defined
    if expr.is_Integer:
        return np.int64(int(expr)), defined
    args = []
    for arg in expr.args:
        value, defined = _evaluate(arg, values, defined)
        args.append(value)
    if isinstance(expr, sympy.Add):
        return functools.reduce(np.add, args), defined
    if isinstance(expr, sympy.Mul):
        return functools.reduce(np.multiply, args), defined
    if isinstance(expr, (sympy.Pow, fn.PowByNatural)) and expr.args[1].is_Integer and int(expr.args[1]) >= 0:
        return np.power(args[0], int(expr.args[1])), defined
    if isinstance(expr, (fn.Max, sympy.Max)):
        return functools.reduce(np.maximum, args), defined
    if isinstance(expr, (fn.Min, sympy.Min)):
        return functools.reduce(np.minimum, args), defined
    if isinstance(expr, fn.Identity):
        return args[0], defined
    if isinstance(expr, fn.ModularIndexing):  # (a // b) % c on sizes
        divisor, modulus = args[1], args[2]
        defined = defined & (divisor != 0) & (modulus != 0)
        return np.fmod(np.floor_divide(args[0], _nonzero(divisor)), _nonzero(modulus)), defined
    binary = {
        fn.FloorDiv: np.floor_divide,  # CleanDiv is a FloorDiv
        fn.PythonMod: np.mod,
        fn.Mod: np.fmod,  # C's modulus, on the non-negative sizes it is used for
        sympy.Mod: np.mod,
    }
    for kind, op in binary.items():
        if isinstance(expr, kind):
            defined = defined & (args[1] != 0)
            return op(args[0], _nonzero(args[1])), defined
    raise _Unsupported(type(expr).__name__)


def _nonzero(divisor: Any) -> Any:
    """``divisor`` with its zeros replaced by 1 (those points are left out of the maximum by the caller)."""
    import numpy as np

    return np.where(divisor == 0, 1, divisor)


def _refuse_unbounded(graph_module: Any) -> None:
    """Raise an :class:`~hub_export.errors.ExportError` naming the first node whose output has a size without an
    upper bound (a size read from the data: ``.item()``, ``nonzero``), with the model's source line that made it."""
    import torch

    from ...errors import ExportError

    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            values = node.meta.get("val")
            for value in values if isinstance(values, (list, tuple)) else (values,):
                if not isinstance(value, torch.Tensor):
                    continue
                for size in value.shape:
                    if upper_bound(size) is None:
                        trace = (node.meta.get("stack_trace") or "").strip().splitlines()
                        where = f", made at {trace[-2].strip()}: {trace[-1].strip()}" if len(trace) >= 2 else ""
                        raise ExportError(
                            f"ExecuTorch cannot plan memory for the output of {getattr(node.target, '__name__', node.target)} (size {size}{where}): "
                            "it has no upper bound, a size read from the data (.item(), nonzero) or an input dim "
                            "without a max. Give every dynamic input dim a max (dynamic_shapes={'input_ids': {1: "
                            "Dim('sequence', min=1, max=N)}}) or export with static shapes."
                        )


def bounds_pass() -> Any:
    """ExecuTorch's ``ConstraintBasedSymShapeEvalPass`` (every size at its upper bound, :func:`upper_bound` through
    :func:`.patches.planned_sizes_must_be_bounded`), then each view bounded above its base planned as the base's
    elements (``(numel, 1, ..., 1)``, the same rank): the ``sym_shape_eval_pass`` of ``to_executorch``."""
    from executorch.exir.passes.replace_view_copy_with_view_pass import _ViewSpec
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass
    from torch.fx import GraphModule

    class ViewsWithinTheirBase(ConstraintBasedSymShapeEvalPass):
        def call(self, graph_module: GraphModule) -> Any:
            _refuse_unbounded(graph_module)
            result = super().call(graph_module)
            for module in graph_module.modules():
                if not isinstance(module, GraphModule):
                    continue
                for node in module.graph.nodes:
                    spec = node.meta.get("spec")
                    if isinstance(spec, _ViewSpec) and spec.nbytes() > spec._base.nbytes():
                        numel = math.prod(spec._base.shape)
                        shape = [numel] + [1] * (len(spec.shape) - 1)
                        spec.shape, spec.stride = shape, [1] * len(shape)
                module.recompile()
            return result

    return ViewsWithinTheirBase()

"""torch's export constraint solver, kept from crashing on the divisibility guards of nested integer divisions.

After tracing, ``torch.export`` hands every size guard to ``DimConstraints`` (torch/fx/experimental/
symbolic_shapes.py), which rewrites ``//`` and ``%`` into congruences and solves each one-symbol equality with
sympy's ``reduce_inequalities``. A nested division (a stride applied twice: ``(s // 8) // 4``, MobileViTV2's and
EfficientLoFTR's feature pyramids) leaves an equality such as ``Eq(-s/8 + 4*((s/8)//4), 0)`` that sympy cannot
solve: ``NotImplementedError: ... cannot be solved using solve_univariate_inequality`` ends the export
(pytorch/pytorch#131897; the solver drops the functions it knows it cannot handle, not these).

The solver's results only shape the suggested-fix message and the specializations of dims marked dynamic; our dims
are ``Dim.AUTO``, and the guard itself stays in the shape environment, where ``export/_guards.py`` reads it as a
``multiple_of`` bound. :func:`unsolvable_guards_dropped` drops such an equality from the solver's equalities (as
the solver drops the functions it does not support), so the export completes with the guard kept.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ._base import patch_attribute

__all__ = ["unsolvable_guards_dropped"]

_REASON = "DimConstraints.solve crashes on nested // guards (pytorch/pytorch#131897)"


def _solvable(expr: Any) -> bool:
    """Whether sympy's univariate solver can take ``expr``: no integer division or modulo left after the
    solver's own rewrite into congruences."""
    from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

    return not expr.has(FloorDiv, Mod, PythonMod)


@contextlib.contextmanager
def unsolvable_guards_dropped() -> Iterator[None]:
    """Inside the block, ``DimConstraints.add`` keeps out of the solver the one-symbol constraints its rewrite
    leaves with an integer division (see the module docstring)."""
    from torch.fx.experimental.symbolic_shapes import DimConstraints

    original = DimConstraints.add

    def add(self: Any, expr: Any) -> bool:
        import sympy

        trivial = original(self, expr)
        for symbol, exprs in self._univariate_inequalities.items():
            unsolvable = {e for e in exprs if not _solvable(e)}
            if unsolvable:
                exprs -= unsolvable
                if not any(isinstance(e, sympy.Eq) for e in exprs):
                    self._symbols_with_equalities.discard(symbol)
        return trivial

    with patch_attribute(DimConstraints, "add", add, reason=_REASON):
        yield

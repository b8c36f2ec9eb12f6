"""hub_export.patches.shapes: torch's export constraint solver no longer ends an export on the guard of a nested
integer division (MobileViTV2's conv strides, pytorch/pytorch#131897); the guard itself is left to the dims."""

from __future__ import annotations

import pytest
import sympy
from torch._dynamo.source import LocalSource
from torch.fx.experimental.symbolic_shapes import DimConstraints
from torch.utils._sympy.functions import FloorDiv

from hub_export.patches.shapes import unsolvable_guards_dropped


def _solve_stride_guard() -> None:
    """The guard MobileViTV2's stride-8 stem and its two halvings leave on the image height (traced at 64)."""
    size = sympy.Symbol("s0", integer=True, positive=True)
    strided = FloorDiv(size - 1, 8)
    guard = sympy.Eq(4 * FloorDiv(strided + 1, 2), 4 * FloorDiv(strided - 1, 2) + 4)
    constraints = DimConstraints({size: [LocalSource("pixel_values")]}, {size: sympy.Integer(64)}, set(), {})
    constraints.add(guard)
    constraints.solve()


def test_a_nested_division_guard_no_longer_ends_the_export() -> None:
    original = DimConstraints.add
    with pytest.raises(NotImplementedError, match="cannot be solved"):  # the upstream bug, still there
        _solve_stride_guard()
    with unsolvable_guards_dropped():
        _solve_stride_guard()
    assert DimConstraints.add is original  # restored

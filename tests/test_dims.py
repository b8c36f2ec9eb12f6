"""Size expressions of export.json: what they read and what they evaluate to."""

from __future__ import annotations

import pytest

from hub_export.dims import parse_size


def test_a_power_reads_its_base_names_and_evaluates() -> None:
    expr = parse_size("sequence**2 + past_sequence", {"sequence", "past_sequence"})
    assert expr.names == frozenset({"sequence", "past_sequence"})
    assert expr.evaluate({"sequence": 3, "past_sequence": 4}) == 13


def test_a_power_of_an_unknown_name_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_size("batch**2", {"sequence"})


def test_an_upper_bound_torch_derives_from_an_unbounded_range_means_none() -> None:
    """torch reports some unbounded dims with a max of sys.maxsize - 1: no axis is that long, and a runtime given it
    as a bound overflows computing sizes (OpenVINO's CPU plugin refused Qwen3-VL's prompt step so), so it is read
    as no bound, like int_oo."""
    import sys

    from torch.utils._sympy.numbers import int_oo

    from hub_export.dims import is_unbounded

    assert is_unbounded(sys.maxsize - 1) and is_unbounded(int_oo) and is_unbounded(None)
    assert not is_unbounded(4096) and not is_unbounded(2**31)

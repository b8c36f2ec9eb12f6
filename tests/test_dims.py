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

"""Go duration parsing and formatting (layer 0)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from yurt.runtime.lib.durations import (
    HOUR,
    MILLISECOND,
    MINUTE,
    SECOND,
    format_duration,
    parse_duration,
)


@pytest.mark.parametrize(("text", "ns"), [
    ("0", 0),
    ("100ms", 100 * MILLISECOND),
    ("15s", 15 * SECOND),
    ("1m30s", 90 * SECOND),
    ("1.5h", 90 * MINUTE),
    ("2h45m", 2 * HOUR + 45 * MINUTE),
    ("-2ms", -2 * MILLISECOND),
    ("300us", 300_000),
    ("300µs", 300_000),
    ("1ns", 1),
    (".5s", 500 * MILLISECOND),
])
def test_parse(text: str, ns: int) -> None:
    assert parse_duration(text) == ns


@pytest.mark.parametrize("text", ["", "5", "5 seconds", "1x", "s", "1h-5m", "abc", "1e3s"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)


def test_bare_number_hint_names_the_units() -> None:
    with pytest.raises(ValueError, match="a unit is required"):
        parse_duration("30")


@pytest.mark.parametrize(("ns", "text"), [
    (0, "0s"),
    (10 * MILLISECOND, "10ms"),
    (5 * SECOND, "5s"),
    (MINUTE, "1m0s"),
    (30 * MINUTE, "30m0s"),
    (24 * HOUR, "24h0m0s"),
    (15_587_610_296, "15.587610296s"),
    (1_500, "1.5µs"),
    (999, "999ns"),
    (90 * SECOND + 500 * MILLISECOND, "1m30.5s"),
    (-5 * SECOND, "-5s"),
])
def test_format_matches_go(ns: int, text: str) -> None:
    assert format_duration(ns) == text


@given(st.integers(min_value=-(2**62), max_value=2**62))
def test_format_then_parse_round_trips(ns: int) -> None:
    assert parse_duration(format_duration(ns)) == ns

"""Durations from untrusted input: Go's grammar exactly (ASCII digits, a number after the
sign), refused cheaply when absurdly long, with short messages (layer 0)."""

from __future__ import annotations

import time

import pytest

from yurt.runtime.lib.durations import parse_duration


@pytest.mark.parametrize("text", ["-", "+", "\u0663h", "\u0661\u0662s", "1\u0660s"])
def test_what_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["9" * 200_000 + "h", "1s" * 50_000, "x" * 100_000])
def test_long_input_is_refused_at_once_with_a_short_message(text: str) -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match="expected a duration") as info:
        parse_duration(text)
    assert time.monotonic() - started < 0.1
    assert len(str(info.value)) < 200

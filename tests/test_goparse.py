"""Go's strconv parsers (runtime/lib/goparse.py), as Nomad reads booleans and `cas` values."""

from __future__ import annotations

import pytest

from yurt.runtime.cli.exec import UsageError, parse_flags
from yurt.runtime.lib.goparse import parse_go_bool, parse_go_uint


@pytest.mark.parametrize(("text", "value"), [
    ("1", True), ("t", True), ("T", True), ("TRUE", True), ("true", True), ("True", True),
    ("0", False), ("f", False), ("F", False), ("FALSE", False), ("false", False),
    ("False", False)])
def test_parse_go_bool_accepts_gos_table(text: str, value: bool) -> None:
    assert parse_go_bool(text) is value


@pytest.mark.parametrize("text", ["", "yes", "tRUE", " true", "2"])
def test_parse_go_bool_refuses_the_rest(text: str) -> None:
    with pytest.raises(ValueError, match=r"^strconv.ParseBool: parsing \".*\": invalid syntax$"):
        parse_go_bool(text)


def test_parse_go_uint() -> None:
    assert parse_go_uint("0") == 0
    assert parse_go_uint(str((1 << 64) - 1)) == (1 << 64) - 1
    with pytest.raises(ValueError, match=r'parsing "18446744073709551616": value out of range'):
        parse_go_uint(str(1 << 64))
    for text in ("", "-1", "+1", " 1", "1.0", "x", "\u00b2", "\u0661"):
        with pytest.raises(ValueError, match="invalid syntax"):
            parse_go_uint(text)


def test_exec_flags_read_booleans_with_the_same_table() -> None:
    flags, rest = parse_flags(["-i=F", "-t=TRUE", "-job=0", "a", "cmd"])
    assert (flags.stdin, flags.tty, flags.job, rest) == (False, True, False, ["a", "cmd"])
    with pytest.raises(UsageError, match='invalid boolean value "yes" for -t'):
        parse_flags(["-t=yes", "a", "cmd"])

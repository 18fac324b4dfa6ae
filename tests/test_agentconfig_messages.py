"""`structcheck`: plain data against a msgspec struct, every problem in words (layer 0).

The agent config and the drivers' `config` blocks rely on it; these pin its vocabulary and
paths directly, so a change of wording is seen here first.
"""

from __future__ import annotations

from typing import Any

import msgspec

from yurt.runtime.agent.config import FileConfig
from yurt.runtime.lib.structcheck import Problem, Vocabulary, check, describe, unknown_key


class _Inner(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    sizes: list[int] = msgspec.field(default_factory=list)


class _Outer(msgspec.Struct, forbid_unknown_fields=True):
    inner: list[_Inner] = msgspec.field(default_factory=list)
    either: int | str = 0
    maybe: float | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)


def test_types_are_described_as_a_user_reads_them() -> None:
    assert describe(list[str]) == "a list of strings"
    assert describe(dict[str, dict[str, Any]]) == "a table of tables"
    assert describe(list[list[int]]) == "a list of lists of whole numbers"
    assert describe(int | str) == "a whole number or a string"
    assert describe(dict[str, str], Vocabulary("field", "a block")) == "a block of strings"


def test_every_problem_is_found_with_its_path() -> None:
    data = {"inner": [{"name": 1, "sizes": [1, "2"]}, {"sizes": []}, 5],
            "either": [1], "maybe": None, "labels": {"a": True}, "inne": []}
    assert check(data, _Outer) == [
        Problem(("inner", 0, "name"), "must be a string, got a number 1"),
        Problem(("inner", 0, "sizes", 1), 'must be a whole number, got a string "2"'),
        Problem(("inner", 1), 'missing the required key "name"'),
        Problem(("inner", 2), "must be a table, got a number 5"),
        Problem(("either",), "must be a whole number or a string, got a list"),
        Problem(("labels", "a"), "must be a string, got true"),
        Problem(("inne",), 'unknown key "inne"; did you mean "inner"?', names_key=True),
    ]
    assert check({"inner": [{"name": "x", "sizes": [1]}], "either": "s", "maybe": 2}, _Outer) \
        == []


def test_a_problem_renders_as_file_path_message() -> None:
    (unknown,) = check({"gc": {"intervall": "1m"}}, FileConfig)
    assert unknown.render("agent.toml") == \
        'agent.toml: gc: unknown key "intervall"; did you mean "interval"?'
    (wrong,) = check({"port": "x"}, FileConfig)
    assert wrong.render("agent.toml") == \
        'agent.toml: port: must be a whole number, got a string "x"'


def test_a_key_written_without_its_prefix_is_suggested() -> None:
    assert unknown_key("ports", ["reserved_ports"]) == \
        'unknown key "ports"; did you mean "reserved_ports"?'
    assert unknown_key("zzz", ["port"]) == 'unknown key "zzz"'

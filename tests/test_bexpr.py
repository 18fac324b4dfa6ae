"""Nomad's filter expressions (runtime/lib/bexpr.py, bexpr_eval.py): what parses, what fails
with go-bexpr's own message and position, and what matches a Nomad object. Pure (layer 1).

The parse errors are go-bexpr's grammar tests (grammar/grammar_test.go) word for word: a
script that matches Nomad's 400 texts matches yurt's.
"""

from __future__ import annotations

from typing import Any

import pytest

from yurt.runtime.lib.bexpr import BexprError, Binary, Collection, Match, Not, Selector, parse
from yurt.runtime.lib.bexpr_eval import BexprEvalError, compile_filter

#: go-bexpr's grammar_test.go error cases.
PARSE_ERRORS = [
    ('"/hy-phen/under_score/pi|pe/do.t/ti~lde/" == 3',
     '1:43 (42): no match found, expected: "in", "not" or [ \\t\\r\\n]'),
    ('foo == "12x', '1:12 (11): rule "string": Unterminated string literal'),
    ("foo == `12x", '1:12 (11): rule "string": Unterminated string literal'),
    ("foo == 3x", '1:9 (8): rule "number": Invalid number literal'),
    ("foo[3] == abc", '1:5 (4): rule "index": Invalid index'),
    ('x in foo["abc"', '1:15 (14): rule "index": Unclosed index expression'),
    ('foo["abc" == 3', '1:11 (10): rule "index": Unclosed index expression'),
    ("x in 32", '1:6 (5): rule "match": Invalid selector'),
    ("x in foo and ", '1:14 (13): no match found, expected: "(", "-", "0", "\\"", "`", '
                      '"not", [ \\t\\r\\n], [1-9] or [a-zA-Z]'),
    ("x in foo or ", '1:13 (12): no match found, expected: "(", "-", "0", "\\"", "`", "all", '
                     '"any", "not", [ \\t\\r\\n], [1-9] or [a-zA-Z]'),
    ("x in foo or not ", '1:17 (16): no match found, expected: "!=", "(", "-", "0", "==", '
                         '"\\"", "`", "contains", "in", "is", "matches", "not", [ \\t\\r\\n], '
                         '[1-9] or [a-zA-Z]'),
    ("(foo == 4", '1:10 (9): rule "grouping": Unmatched parentheses'),
]


@pytest.mark.parametrize(("text", "message"), PARSE_ERRORS)
def test_a_malformed_filter_fails_with_go_bexprs_message(text: str, message: str) -> None:
    with pytest.raises(BexprError) as caught:
        parse(text)
    assert str(caught.value) == message


def test_the_position_counts_lines_and_bytes() -> None:
    with pytest.raises(BexprError) as caught:
        parse('Name == "é"\nand ')
    # line 2, column 5; the offset counts é as two bytes
    assert str(caught.value).startswith("2:5 (17): no match found")
    with pytest.raises(BexprError, match="EOF"):
        parse("a == b c")


def test_selectors_values_and_operators_build_go_bexprs_tree() -> None:
    assert parse("Status == running") == Match(Selector(("Status",)), "==", "running")
    assert parse('Meta["a b"].x != `raw "q"`') == Match(
        Selector(("Meta", "a b", "x")), "!=", 'raw "q"')
    assert parse('"/Meta/a~1b~0c" contains "\\tx"') == Match(
        Selector(("Meta", "a/b~c"), pointer=True), "in", "\tx")
    assert parse("TaskGroups.0.Count == -1.5") == Match(
        Selector(("TaskGroups", "0", "Count")), "==", "-1.5")
    assert parse("web not in Tags") == Match(Selector(("Tags",)), "not in", "web")
    assert parse("Tags is not empty") == Match(Selector(("Tags",)), "is not empty", None)
    assert parse("ID not matches `^a`").op == "not matches"  # type: ignore[union-attr]
    # A bare word on the right is a value; keywords are keywords only where expected.
    assert parse("notes == and") == Match(Selector(("notes",)), "==", "and")
    # `not not X` folds away, as grammar.peg's action does.
    assert parse("not not a == b") == Match(Selector(("a",)), "==", "b")
    tree = parse("(a == 1 or b == 2) and not c is empty")
    assert isinstance(tree, Binary)
    assert tree.op == "and"
    assert isinstance(tree.left, Binary)
    assert tree.left.op == "or"
    assert isinstance(tree.right, Not)
    # and binds tighter than or
    tree = parse("a == 1 or b == 2 and c == 3")
    assert isinstance(tree, Binary)
    assert tree.op == "or"
    assert isinstance(tree.right, Binary)
    assert tree.right.op == "and"
    tree = parse("all Tags as t { t != x }")
    assert isinstance(tree, Collection)
    assert (tree.op, tree.default) == ("all", "t")


def test_deep_nesting_parses_in_linear_time() -> None:
    text = "(" * 60 + "a == b" + ")" * 60
    assert parse(text) == Match(Selector(("a",)), "==", "b")
    with pytest.raises(BexprError):
        parse("(" * 5000 + "a == b")


JOB: dict[str, Any] = {
    "ID": "web", "Status": "running", "Priority": 50, "Stop": False, "Ratio": 1.5,
    "Meta": {"team": "infra", "tier": "1"}, "Datacenters": ["dc1", "dc2"],
    "TaskGroups": [{"Name": "api", "Count": 3, "Tasks": [{"Name": "t"}]},
                   {"Name": "db", "Count": 1, "Tasks": []}],
    "Ports": [80, 443], "Parent": None, "Empty": "",
}


@pytest.mark.parametrize(("text", "expected"), [
    ("Status == running", True),
    ('Status == "running"', True),
    ("Status != running", False),
    ("Priority == 50", True),
    ("Priority == `0x32`", True),  # CoerceInt64: base prefixes, as strconv.ParseInt(…, 0, 64)
    ("Priority == `062`", True),
    ("Priority != 51", True),
    ("Stop == false", True),
    ("Stop == F", True),  # strconv.ParseBool
    ("Ratio == 1.5", True),
    ("Meta.team == infra", True),
    ("Meta.tier == 1", True),  # compared as the field's type: a string
    ("Meta.absent == x", False),  # NotPresentDisposition
    ("Meta.absent != x", True),
    ("Meta.absent is empty", True),
    ("Meta.absent matches `.`", False),
    ("x in Meta.absent", False),
    ("team in Meta", True),
    ("owner not in Meta", True),
    ("dc1 in Datacenters", True),
    ("Datacenters contains dc3", False),
    ("443 in Ports", True),
    ("https in Ports", False),  # an item of another type is passed over
    ("unn in Status", True),
    ("Status contains unn", True),
    ("Status matches `^run`", True),
    ("Status not matches `^run`", False),
    ("TaskGroups.1.Name == db", True),
    ("TaskGroups.0.Tasks is not empty", True),
    ("TaskGroups.1.Tasks is empty", True),
    ("Empty is empty", True),
    ("Parent is nil", True),
    ("Parent is empty", True),
    ("Meta is not nil", True),
    ('"/Meta/team" == infra', True),
    ("any TaskGroups as g { g.Count > 2 }", None),  # no `>` in go-bexpr: does not parse
    ("any TaskGroups as g { g.Name == db }", True),
    ("all TaskGroups as g { g.Count == 3 }", False),
    ("all Datacenters as d { d matches `^dc` }", True),
    ("any Meta as k { k == tier }", True),
    ("any Meta as _, v { v == infra }", True),
    ("any TaskGroups as i, _ { i == 1 }", True),
    ("all Meta.absent as v { v == 1 }", True),
    ("not (Status == running and Priority == 1)", True),
    ("Status == dead or Meta.team == infra", True),
])
def test_a_filter_matches_as_go_bexpr_does(text: str, expected: bool | None) -> None:
    if expected is None:
        with pytest.raises(BexprError):
            compile_filter(text)
        return
    assert compile_filter(text)(JOB) is expected


@pytest.mark.parametrize(("text", "message"), [
    ("Foo == x", 'error finding value in datum: /Foo at part 0: couldn\'t find key: struct '
                 'field with name "Foo"'),
    ("Stop == yes", 'error getting match value in expression: strconv.ParseBool: parsing '
                    '"yes": invalid syntax'),
    ("Priority == abc", 'error getting match value in expression: strconv.ParseInt: parsing '
                        '"abc": invalid syntax'),
    ("Datacenters == dc1", "unable to find suitable primitive comparison function for "
                           "matching"),
    ("Priority matches `5`", "value of type int is not convertible to []byte"),
    ("Priority is empty", 'cannot perform is-empty operations on type int for selector: '
                          '"Priority"'),
    ("x in Priority", 'cannot perform in/contains operations on type int for selector: '
                      '"Priority"'),
    ("Status matches `(`", 'failed to compile regular expression "(": error parsing regexp: '
                           "missing closing ): `(`"),
    ("Status.x == a", "error finding value in datum: /Status/x: at part 1, invalid value "
                      "kind: string"),
    ("x in TaskGroups", 'unable to find suitable primitive comparison function for "in" '
                        "comparison"),
    ("Priority is nil", 'cannot perform is-nil operations on type int for selector: '
                        '"Priority"'),
    ("any Priority as p { p == 1 }", "Priority is not a list or a map"),
    ("any TaskGroups as k, k { k == 1 }", '"k" cannot be used as a placeholder for both the '
                                          "index and the value"),
    ("any Meta as k { k.x == 1 }", "/k references a string so /k/x is invalid"),
])
def test_a_filter_that_does_not_fit_the_object_fails_with_go_bexprs_text(
        text: str, message: str) -> None:
    with pytest.raises(BexprEvalError) as caught:
        compile_filter(text)(JOB)
    assert str(caught.value) == message


def test_and_or_short_circuit_before_an_error() -> None:
    # go-bexpr evaluates left to right and stops: the right side's error never happens.
    assert compile_filter("Status == dead and Foo == x")(JOB) is False
    assert compile_filter("Status == running or Foo == x")(JOB) is True
    with pytest.raises(BexprEvalError):
        compile_filter("Status == running and Foo == x")(JOB)


def test_double_quoted_strings_unquote_as_go_does() -> None:
    assert parse('a == "x\\u00e9\\x41\\101\\n"') == Match(Selector(("a",)), "==", "xéAA\n")
    with pytest.raises(BexprError) as caught:
        parse('Name == "a\\qb"')
    assert str(caught.value) == '1:9 (8): rule "string": invalid syntax'

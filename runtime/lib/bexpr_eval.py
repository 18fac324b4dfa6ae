"""Nomad's filter expressions, evaluated: `compile_filter(text)` → a `Filter` that answers
whether one object (Nomad's JSON form: dicts, lists, strings, numbers, booleans, null) matches,
as go-bexpr's `Evaluator.Evaluate` answers for Nomad's Go structs (evaluate.go).

Semantics, as go-bexpr's:
- A selector walks the object: `Meta.team`, `Meta["a b"]`, `TaskGroups.0.Name`, or a quoted
  JSON pointer `"/Meta/a b"`; a list takes a decimal index.
- The raw value is converted to the selected field's type before comparing (`CoerceBool`,
  `CoerceInt64` with Go's base prefixes, `CoerceFloat64`): `Count == 3` and `Count == "3"` are
  the same test, `Stop == yes` is an error ("strconv.ParseBool: parsing …: invalid syntax").
- `in`/`contains` test a map's keys, a list's items (each converted to the item's type; items
  it cannot convert to are skipped, as for go-bexpr's interface slices), or a substring.
- `is empty` holds for "", [], {} and null; `matches` is Go's regexp (RE2,
  runtime/lib/goregexp.py) searched in a string.
- A key missing from a nested object (a map, as Meta) gives the operator's "not present"
  answer (grammar/ast.go `NotPresentDisposition`: `==` false, `!=` true, `is empty` true …);
  a top-level field the object does not have is an error, as an unknown struct field is in Go
  (`couldn't find key: struct field with name "Foo"`). yurt's JSON cannot tell a nested struct
  from a map, so a missing nested key is always "not present".
- Any other mismatch (comparing a list with `==`, a regexp on a number) is `BexprEvalError`
  with go-bexpr's text: Nomad's lists answer it as a 400.

Invariants: pure (no I/O, no clock); a `Filter` is immutable apart from its cache of compiled
regexps, and safe to share between requests of one event loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from yurt.runtime.lib.bexpr import Binary, Collection, Expr, Match, MatchOp, Not, Selector, parse
from yurt.runtime.lib.goparse import parse_go_bool

if TYPE_CHECKING:
    from yurt.runtime.lib.goregexp import GoRegexp


class BexprEvalError(ValueError):
    """A filter that cannot be evaluated against an object; `str()` is go-bexpr's text."""


#: grammar/ast.go `NotPresentDisposition`.
NOT_PRESENT: Final[dict[MatchOp, bool]] = {
    "==": False, "!=": True, "in": False, "not in": True, "is empty": True,
    "is not empty": False, "matches": False, "not matches": True, "is nil": True,
    "is not nil": False}
_NEGATED: Final[dict[MatchOp, MatchOp]] = {
    "!=": "==", "not in": "in", "is not empty": "is empty", "not matches": "matches",
    "is not nil": "is nil"}
_GO_FLOAT: Final = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf|infinity|nan)",
                              re.IGNORECASE)


def _kind(value: object) -> str:
    """The Go reflect.Kind the JSON value stands for, as go-bexpr's messages name it."""
    if value is None:
        return "invalid"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    return {float: "float64", str: "string", list: "slice", dict: "map"}.get(type(value), "struct")


def _coerce(raw: str, like: object) -> object:
    """go-bexpr's `getMatchExprValue`: `raw` as the type of `like`. ValueError: Go's text."""
    if isinstance(like, bool):
        return parse_go_bool(raw)
    if isinstance(like, int):
        return _go_int(raw)
    if isinstance(like, float):
        if not _GO_FLOAT.fullmatch(raw):
            raise ValueError(f'strconv.ParseFloat: parsing "{raw}": invalid syntax')
        return float(raw)
    return raw


def _go_int(raw: str) -> int:
    """Go's `strconv.ParseInt(raw, 0, 64)`: sign, 0x/0o/0b or 0 (octal) prefix, underscores
    only after a prefix. ValueError with Go's text."""
    sign = -1 if raw.startswith("-") else 1
    body = raw[1:] if raw[:1] in ("+", "-") else raw
    base = 10
    if body[:2].lower() in ("0x", "0o", "0b"):
        base, body = {"x": 16, "o": 8, "b": 2}[body[1].lower()], body[2:]
    elif len(body) > 1 and body[0] == "0":
        base, body = 8, body[1:]
    if not body or not (body.isascii() and body.replace("_", "").isalnum()) \
            or (base == 10 and "_" in body):
        raise ValueError(f'strconv.ParseInt: parsing "{raw}": invalid syntax')
    try:
        number = sign * int(body, base)
    except ValueError:
        raise ValueError(f'strconv.ParseInt: parsing "{raw}": invalid syntax') from None
    if not -(1 << 63) <= number < (1 << 63):
        raise ValueError(f'strconv.ParseInt: parsing "{raw}": value out of range')
    return number


@dataclass(frozen=True, slots=True)
class _Local:
    """A collection's bound name: a path into the object, or a key/index value."""
    name: str
    path: tuple[str, ...] | None
    value: object


_MISSING: Final = object()


def _pointer(path: tuple[str, ...]) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in path)


def _get(datum: object, path: tuple[str, ...], scope: tuple[_Local, ...]) -> object:
    """evaluate.go `getValue`: the value at `path`, or `_MISSING` for a key a map lacks."""
    for local in reversed(scope):
        if path and path[0] == local.name:
            if local.path is None:
                if len(path) > 1:
                    raise BexprEvalError(f"/{local.name} references a {_kind(local.value)} "
                                         f"so {_pointer(path)} is invalid")
                return local.value
            path = local.path + path[1:]
    current = datum
    for i, part in enumerate(path):
        where = f"error finding value in datum: {_pointer(path)}"
        if current is None or isinstance(current, dict):
            if current is not None and part in current:
                current = current[part]
                continue
            if i == len(path) - 1 and i > 0:
                return _MISSING
            if i == 0:
                raise BexprEvalError(f'{where} at part 0: couldn\'t find key: struct field '
                                     f'with name "{part}"')
            raise BexprEvalError(f'{where} at part {i}: couldn\'t find key "{part}"')
        if isinstance(current, list):
            if not (part.isascii() and part.isdigit()):
                raise BexprEvalError(f'{where} at part {i}: failed to parse index "{part}"')
            if int(part) >= len(current):
                raise BexprEvalError(f"{where} at part {i}: index out of range: {part} "
                                     f"(length {len(current)})")
            current = current[int(part)]
            continue
        raise BexprEvalError(f"{where}: at part {i}, invalid value kind: {_kind(current)}")
    return current


class Filter:
    """One compiled expression; call it with an object to test it."""

    __slots__ = ("_regexps", "expr", "text")

    def __init__(self, text: str) -> None:
        """Raises `bexpr.BexprError` when `text` does not parse."""
        self.text = text
        self.expr: Expr = parse(text)
        self._regexps: dict[str, GoRegexp] = {}

    def __call__(self, datum: object) -> bool:
        """Whether `datum` matches. Raises BexprEvalError as go-bexpr's `Evaluate` errs."""
        return bool(self._eval(self.expr, datum, ()))

    def _eval(self, node: Expr, datum: object, scope: tuple[_Local, ...]) -> bool:
        if isinstance(node, Not):
            return not self._eval(node.operand, datum, scope)
        if isinstance(node, Binary):
            left = self._eval(node.left, datum, scope)
            if left == (node.op == "or"):
                return left
            return self._eval(node.right, datum, scope)
        if isinstance(node, Collection):
            return self._collection(node, datum, scope)
        value = _get(datum, node.selector.path, scope)
        if value is _MISSING:
            return NOT_PRESENT[node.op]
        positive = _NEGATED.get(node.op)
        if positive is not None:
            return not self._match(node, positive, value)
        return self._match(node, node.op, value)

    def _match(self, node: Match, op: MatchOp, value: Any) -> bool:
        raw = node.value or ""
        if op == "==":
            if value is None or isinstance(value, list | dict):
                raise BexprEvalError("unable to find suitable primitive comparison function "
                                     "for matching")
            return bool(_coerced(raw, value) == value)
        if op == "in":
            return self._in(node.selector, raw, value)
        if op == "is empty":
            if value is None:
                return True
            if isinstance(value, str | list | dict):
                return len(value) == 0
            raise BexprEvalError(f"cannot perform is-empty operations on type {_kind(value)} "
                                 f'for selector: "{node.selector}"')
        if op == "is nil":
            if value is None or isinstance(value, list | dict):
                return value is None
            raise BexprEvalError(f"cannot perform is-nil operations on type {_kind(value)} "
                                 f'for selector: "{node.selector}"')
        if not isinstance(value, str):  # matches
            raise BexprEvalError(f"value of type {_kind(value)} is not convertible to []byte")
        return self._regexp(raw).search(value)

    @staticmethod
    def _in(selector: Selector, raw: str, value: Any) -> bool:
        if isinstance(value, dict):
            return raw in value
        if isinstance(value, str):
            return raw in value
        if isinstance(value, list):
            for item in value:
                if item is None or isinstance(item, list | dict):
                    raise BexprEvalError('unable to find suitable primitive comparison '
                                         'function for "in" comparison')
                try:
                    if _coerce(raw, item) == item:
                        return True
                except ValueError:
                    continue  # as for an interface slice: the item is of another type
            return False
        raise BexprEvalError(f"cannot perform in/contains operations on type {_kind(value)} "
                             f'for selector: "{selector}"')

    def _regexp(self, pattern: str) -> GoRegexp:
        from yurt.runtime.lib.goregexp import GoRegexpError, compile_regexp

        compiled = self._regexps.get(pattern)
        if compiled is None:
            try:
                compiled = compile_regexp(pattern)
            except GoRegexpError as e:
                raise BexprEvalError(f'failed to compile regular expression "{pattern}": '
                                     f"{e}") from None
            self._regexps[pattern] = compiled
        return compiled

    def _collection(self, node: Collection, datum: object,
                    scope: tuple[_Local, ...]) -> bool:
        """evaluate.go `evaluateCollectionExpression`."""
        value = _get(datum, node.selector.path, scope)
        if value is _MISSING:
            return node.op == "all"
        if node.index and node.index == node.value:
            raise BexprEvalError(f'"{node.index}" cannot be used as a placeholder for both '
                                 "the index and the value")
        if not isinstance(value, list | dict):
            raise BexprEvalError(f"{node.selector} is not a list or a map")
        keys: list[Any] = list(value) if isinstance(value, dict) else list(range(len(value)))
        for key in keys:
            item_path = (*node.selector.path, str(key))
            bound: list[_Local] = []
            if isinstance(value, dict):
                bound += [_Local(n, None, key) for n in (node.default, node.index) if n]
                if node.value:
                    bound.append(_Local(node.value, item_path, None))
            else:
                if node.index:
                    bound.append(_Local(node.index, None, key))
                bound += [_Local(n, item_path, None) for n in (node.default, node.value) if n]
            result = self._eval(node.inner, datum, (*scope, *bound))
            if result == (node.op == "any"):
                return result
        return node.op == "all"


def _coerced(raw: str, like: object) -> object:
    try:
        return _coerce(raw, like)
    except ValueError as e:
        raise BexprEvalError(f"error getting match value in expression: {e}") from None


def compile_filter(text: str) -> Filter:
    """go-bexpr's `CreateEvaluator`. Raises `bexpr.BexprError` (go-bexpr's parse message)."""
    return Filter(text)

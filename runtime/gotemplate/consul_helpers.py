"""More of consul-template's helper functions (template/funcs.go): the `contains*` family,
`loop`, `parseUint`, `sha256Hex`, URL-safe base64, `indent`, `byTag`, `scratch`, and the math
functions `modulo`, `minimum`, `maximum`.

Invariants: like `consul.py`'s, these are pure functions of their arguments (the scratchpad is
one object per render, made by `helper_funcs`); a result whose size is a product of its inputs
(`loop`, `indent`) is checked against `limits.MAX_OUTPUT` or charged before it is built, and
math takes its operands reversed, as consul-template's does (`{{ 7 | modulo 3 }}` is 1).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable
from typing import Any

from yurt.runtime.gotemplate.builtins import check_size
from yurt.runtime.gotemplate.consul import contains, want_str
from yurt.runtime.gotemplate.exec import FuncError
from yurt.runtime.gotemplate.gofmt import go_type, sprint_value
from yurt.runtime.gotemplate.limits import ELEMENT_STEPS, charge


def _contains_some(every: bool, negate: bool) -> Callable[[Any, Any], bool]:
    """consul-template's `containsSomeFunc`: whether every (or any) needle is in the
    haystack, negated for `containsNotAll` (and `containsNone`)."""
    def fn(needles: Any, haystack: Any) -> bool:
        if not isinstance(needles, (list, tuple)):
            raise FuncError(f"wrong type for value; expected slice; got {go_type(needles)}")
        found = (contains(needle, haystack) for needle in needles)
        result = all(found) if every else any(found)
        return result is not negate
    return fn


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            return int(want_str(value), 10)
        except ValueError:
            raise FuncError(f'strconv.ParseInt: parsing "{sprint_value(value)}": invalid syntax'
                            ) from None
    return int(value)


def loop(*args: Any) -> list[int]:
    """`loop N` is 0…N-1; `loop A B` is A…B-1."""
    if len(args) not in (1, 2):
        raise FuncError(f"loop: wrong number of arguments, expected 1 or 2, but got {len(args)}")
    start, stop = (0, _int(args[0])) if len(args) == 1 else (_int(args[0]), _int(args[1]))
    charge(max(stop - start, 0) * ELEMENT_STEPS)
    return list(range(start, stop))


def parse_uint(s: Any) -> int:
    text = want_str(s)
    if text.isdigit() and text.isascii() and int(text) < 2**64:
        return int(text)
    raise FuncError(f'strconv.ParseUint: parsing "{text}": invalid syntax')


def _b64url_decode(s: Any) -> str:
    try:
        return base64.urlsafe_b64decode(want_str(s).encode()).decode("utf-8", "replace")
    except (binascii.Error, ValueError) as e:
        raise FuncError(f"base64URLDecode: {e}") from None


def indent(spaces: Any, s: Any) -> str:
    """Each line of `s` prefixed with `spaces` spaces (consul-template's `indent`)."""
    width = _int(spaces)
    if width < 0:
        raise FuncError("indent value must be a positive integer")
    text = want_str(s)
    lines = text.split("\n")
    check_size(len(text) + width * len(lines))
    return "\n".join(" " * width + line for line in lines)


def by_tag(services: Any) -> dict[str, list[Any]]:
    """Services grouped by each of their tags."""
    if not isinstance(services, (list, tuple)):
        raise FuncError(f"byTag: wrong argument type {go_type(services)}")
    grouped: dict[str, list[Any]] = {}
    for s in services:
        for tag in getattr(s, "Tags", None) or []:
            grouped.setdefault(tag, []).append(s)
    return grouped


def _math(op: Callable[[Any, Any], Any], name: str) -> Callable[[Any, Any], Any]:
    def fn(b: Any, a: Any) -> Any:
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            raise FuncError(f"{name}: unknown type for {sprint_value(a)!r} ({go_type(a)})")
        return op(a, b)
    return fn


def _modulo(a: Any, b: Any) -> Any:
    if not isinstance(a, int) or not isinstance(b, int):
        raise FuncError("modulo: only integers are supported")
    if b == 0:
        raise FuncError("modulo: division by 0")
    rest = abs(a) % abs(b)  # Go's % takes the sign of the dividend
    return -rest if a < 0 else rest


class Scratch:
    """consul-template's scratchpad: values kept for the rest of one render."""

    GO_TYPE = "*template.Scratch"

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def Key(self, key: Any) -> bool:
        return want_str(key) in self._values

    def Get(self, key: Any) -> Any:
        return self._values.get(want_str(key))

    def Set(self, key: Any, value: Any) -> str:
        self._values[want_str(key)] = value
        return ""

    def SetX(self, key: Any, value: Any) -> str:
        self._values.setdefault(want_str(key), value)
        return ""

    def MapSet(self, key: Any, name: Any, value: Any) -> str:
        target = self._values.setdefault(want_str(key), {})
        if not isinstance(target, dict):
            raise FuncError(f"scratch: {want_str(key)} is not a map")
        target[want_str(name)] = value
        return ""

    def MapSetX(self, key: Any, name: Any, value: Any) -> str:
        target = self._values.setdefault(want_str(key), {})
        if not isinstance(target, dict):
            raise FuncError(f"scratch: {want_str(key)} is not a map")
        target.setdefault(want_str(name), value)
        return ""

    def MapValues(self, key: Any) -> list[Any]:
        target = self._values.get(want_str(key))
        return [target[k] for k in sorted(target)] if isinstance(target, dict) else []


def helper_funcs() -> dict[str, Callable[..., Any]]:
    """The functions of this module for one render (a fresh scratchpad)."""
    scratch = Scratch()
    return {
        "containsAll": _contains_some(True, False),
        "containsAny": _contains_some(False, False),
        "containsNone": _contains_some(False, True),
        "containsNotAll": _contains_some(True, True),
        "loop": loop,
        "parseUint": parse_uint,
        "sha256Hex": lambda s: hashlib.sha256(want_str(s).encode()).hexdigest(),
        "base64URLEncode": lambda s: base64.urlsafe_b64encode(want_str(s).encode()).decode(),
        "base64URLDecode": _b64url_decode,
        "indent": indent,
        "byTag": by_tag,
        "scratch": lambda: scratch,
        "modulo": _math(_modulo, "modulo"),
        "minimum": _math(min, "minimum"),
        "maximum": _math(max, "maximum"),
    }

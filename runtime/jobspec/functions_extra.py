"""The rest of Nomad's pure HCL2 functions (jobspec2/functions.go `Functions`): collections,
numbers, strings and hashes that need no file system and no clock.

What lives here: `EXTRA`, merged into functions.py's table. Each takes plain Python values
(evaluate.py) and raises `EvalError` for a bad argument.

Invariant: every function is pure and bounded by its arguments' size (the caller charges the
result to the evaluation budget, evaluate.py `Scope.built`).
"""

from __future__ import annotations

import hashlib
import math
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any, Final

from yurt.runtime.jobspec.evaluate import EvalError, number, to_string


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise EvalError("a list is required")
    return v


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise EvalError("a number is required, got bool")
    try:
        n = float(v) if isinstance(v, str) else v
    except ValueError:
        raise EvalError(f"a number is required, got {v!r}") from None
    if not isinstance(n, int | float) or n != int(n):
        raise EvalError("a whole number is required")
    return int(n)


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise EvalError("a number is required")
    try:
        return float(v)
    except ValueError:
        raise EvalError(f"a number is required, got {v!r}") from None


def _sort(v: Any) -> list[str]:
    return sorted(to_string(x) for x in _list(v))


def _zipmap(keys: Any, values: Any) -> dict[str, Any]:
    k, vals = _list(keys), _list(values)
    if len(k) != len(vals):
        raise EvalError("the key and value lists differ in length")
    return {to_string(a): b for a, b in zip(k, vals, strict=True)}


def _chunklist(v: Any, size: Any) -> list[list[Any]]:
    items, n = _list(v), _int(size)
    if n < 0:
        raise EvalError("the size must not be negative")
    if n == 0:
        return [items]
    return [items[i:i + n] for i in range(0, len(items), n)]


def _substr(s: Any, offset: Any, length: Any) -> str:
    text, start, count = to_string(s), _int(offset), _int(length)
    if start < 0:
        start = max(0, len(text) + start)
    return text[start:] if count < 0 else text[start:start + count]


def _indent(spaces: Any, s: Any) -> str:
    pad = " " * min(_int(spaces), 1024)
    lines = to_string(s).split("\n")
    return "\n".join([lines[0], *[pad + line for line in lines[1:]]])


def _parseint(s: Any, base: Any) -> int:
    try:
        return int(to_string(s), _int(base))
    except ValueError as e:
        raise EvalError(str(e)) from None


def _set_op(op: str) -> Callable[..., list[Any]]:
    def run(*sets: Any) -> list[Any]:
        if not sets:
            raise EvalError("at least one set is required")
        out = [x for i, x in enumerate(_list(sets[0])) if x not in _list(sets[0])[:i]]
        for other in sets[1:]:
            items = _list(other)
            if op == "union":
                out += [x for x in items if x not in out]
            elif op == "intersection":
                out = [x for x in out if x in items]
            else:
                out = [x for x in out if x not in items]
        return out

    return run


def _pow(a: Any, b: Any) -> int | float:
    base, exp = _num(a), _num(b)
    if abs(exp) > 1024:
        raise EvalError("the exponent is too large")
    return number(base ** exp)


def _hash(name: str) -> Callable[[Any], str]:
    return lambda s: hashlib.new(name, to_string(s).encode()).hexdigest()


EXTRA: Final[dict[str, Callable[..., Any]]] = {
    "chomp": lambda s: to_string(s).rstrip("\r\n"),
    "chunklist": _chunklist,
    "compact": lambda v: [x for x in _list(v) if x not in (None, "")],
    "indent": _indent,
    "log": lambda x, b: number(math.log(_num(x), _num(b))),
    "md5": _hash("md5"),
    "parseint": _parseint,
    "pow": _pow,
    "reverse": lambda v: list(reversed(_list(v))),
    "setintersection": _set_op("intersection"),
    "setsubtract": _set_op("subtract"),
    "setunion": _set_op("union"),
    "sha1": _hash("sha1"),
    "sha256": _hash("sha256"),
    "sha512": _hash("sha512"),
    "signum": lambda x: (_num(x) > 0) - (_num(x) < 0),
    "sort": _sort,
    "strrev": lambda s: to_string(s)[::-1],
    "substr": _substr,
    "sum": lambda v: number(sum(_num(x) for x in _list(v))),
    "transpose": lambda m: {v: sorted(k for k, vs in m.items() if v in vs)
                            for vs in m.values() for v in vs},
    "urlencode": lambda s: urllib.parse.quote(to_string(s), safe=""),
    "uuidv5": lambda ns, name: str(uuid.uuid5(
        {"dns": uuid.NAMESPACE_DNS, "url": uuid.NAMESPACE_URL, "oid": uuid.NAMESPACE_OID,
         "x500": uuid.NAMESPACE_X500}.get(to_string(ns)) or uuid.UUID(to_string(ns)),
        to_string(name))),
    "zipmap": _zipmap,
}

"""Go's `strconv` parsers, as Nomad reads booleans and unsigned integers from query strings
and flags, with Go's error messages (which Nomad's answers carry), and `strconv.Unquote` as
go-bexpr reads a filter's double-quoted strings (runtime/lib/bexpr.py).

Kept free of heavy imports: the CLI (runtime/cli/exec.py) uses it as well as the API.
"""

from __future__ import annotations

import json
from typing import Final

#: Go's `strconv.ParseBool` table.
GO_BOOLS: Final = {**dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
                   **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False)}


def parse_go_bool(value: str) -> bool:
    """Go's `strconv.ParseBool`. Raises ValueError for anything else ("" included)."""
    try:
        return GO_BOOLS[value]
    except KeyError:
        raise ValueError(f"strconv.ParseBool: parsing {json.dumps(value)}: invalid syntax"
                         ) from None


def parse_go_uint(value: str) -> int:
    """Go's `strconv.ParseUint(value, 10, 64)`. Raises ValueError with Go's message."""
    if not (value.isascii() and value.isdigit()):  # no sign, space or non-ASCII digit
        raise ValueError(f"strconv.ParseUint: parsing {json.dumps(value)}: invalid syntax")
    number = int(value)
    if number >= 1 << 64:
        raise ValueError(f"strconv.ParseUint: parsing {json.dumps(value)}: value out of range")
    return number


_GO_ESCAPES: Final = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   "v": "\v", "\\": "\\", "'": "'"}


def go_unquote(body: str) -> str:
    """Go's `strconv.Unquote` of a double-quoted literal's body (between the quotes, no `"`
    inside, as a go-bexpr string literal is). Raises ValueError for a bad escape."""
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\n":
            raise ValueError("newline in string")
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(body):
            raise ValueError("trailing backslash")
        esc = body[i + 1]
        if esc in _GO_ESCAPES:
            out.append(_GO_ESCAPES[esc])
            i += 2
        elif esc in "xuU" or esc in "01234567":
            width = {"x": 2, "u": 4, "U": 8}.get(esc, 3)
            digits = body[i + 2:i + 2 + width] if esc in "xuU" else body[i + 1:i + 4]
            base = 8 if esc in "01234567" else 16
            if len(digits) != width:
                raise ValueError("short escape")
            out.append(chr(int(digits, base)))
            i += (2 if esc in "xuU" else 1) + width
        else:
            raise ValueError("unknown escape")
    return "".join(out)

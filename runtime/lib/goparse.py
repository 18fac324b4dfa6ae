"""Go's `strconv` parsers, as Nomad reads booleans and unsigned integers from query strings
and flags, with Go's error messages (which Nomad's answers carry).

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

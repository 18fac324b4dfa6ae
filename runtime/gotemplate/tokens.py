"""The items Go's template lexer emits (`text/template/parse/lex.go`'s item types), and
Go's quoting of strings and runes as its error texts print them (`strconv.Quote`, `%#U`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from yurt.runtime.gotemplate.limits import charge


class T(enum.Enum):
    ERROR = "error"
    BOOL = "bool"
    CHAR = "char"
    CHAR_CONSTANT = "charconst"
    COMMENT = "comment"
    ASSIGN = "="
    DECLARE = ":="
    EOF = "EOF"
    FIELD = "field"
    IDENTIFIER = "identifier"
    LEFT_DELIM = "left delim"
    LEFT_PAREN = "("
    NUMBER = "number"
    PIPE = "|"
    RAW_STRING = "raw string"
    RIGHT_DELIM = "right delim"
    RIGHT_PAREN = ")"
    SPACE = "space"
    STRING = "string"
    TEXT = "text"
    VARIABLE = "variable"
    # keywords
    BLOCK = "block"
    BREAK = "break"
    CONTINUE = "continue"
    DOT = "."
    DEFINE = "define"
    ELSE = "else"
    END = "end"
    IF = "if"
    NIL = "nil"
    RANGE = "range"
    TEMPLATE = "template"
    WITH = "with"


KEYWORDS: Final = {
    ".": T.DOT,
    "block": T.BLOCK,
    "break": T.BREAK,
    "continue": T.CONTINUE,
    "define": T.DEFINE,
    "else": T.ELSE,
    "end": T.END,
    "if": T.IF,
    "range": T.RANGE,
    "nil": T.NIL,
    "template": T.TEMPLATE,
    "with": T.WITH,
}
_KEYWORD_TYPES: Final = frozenset(KEYWORDS.values())


#: The characters strconv.Quote writes as a backslash escape of their own.
_GO_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\t": "\\t",
    "\r": "\\r",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\v": "\\v",
}


#: Characters of a text quoted at a time: the per-character pieces of one chunk are joined
#: before the next, so a long text never holds an object per character (~50-80 bytes each).
_QUOTE_CHUNK: Final = 1 << 14


def go_quote(s: str) -> str:
    """strconv.Quote: a double-quoted Go string literal with Go's escapes."""
    if s.isprintable() and '"' not in s and "\\" not in s:
        return f'"{s}"'  # nothing to escape: no loop in Python
    charge(len(s) // 2)  # ~0.1 µs a character in the loop below, half a step
    chunks = ['"']
    for start in range(0, len(s), _QUOTE_CHUNK):
        out: list[str] = []
        for ch in s[start : start + _QUOTE_CHUNK]:
            code = ord(ch)
            escape = _GO_ESCAPES.get(ch)
            if escape is not None:
                out.append(escape)
            elif code < 0x20 or code == 0x7F:
                out.append(f"\\x{code:02x}")
            elif not ch.isprintable() and code > 0x7F:
                out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
            else:
                out.append(ch)
        chunks.append("".join(out))
    chunks.append('"')
    return "".join(chunks)


def go_rune_name(ch: str) -> str:
    """fmt's %#U: U+0023 '#'."""
    code = ord(ch)
    name = f"U+{code:04X}"
    return f"{name} '{ch}'" if ch.isprintable() else name


@dataclass(frozen=True, slots=True)
class Item:
    typ: T
    val: str
    pos: int
    line: int

    def __str__(self) -> str:
        if self.typ is T.EOF:
            return "EOF"
        if self.typ is T.ERROR:
            return self.val
        if self.typ in _KEYWORD_TYPES:
            return f"<{self.val}>"
        if len(self.val) > 10:
            return go_quote(self.val[:10])[:-1] + '"...'
        return go_quote(self.val)

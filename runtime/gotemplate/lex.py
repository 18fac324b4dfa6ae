"""The lexer of Go's text/template, as a state machine over the source text.

It follows Go's `text/template/parse/lex.go` state by state (text, left delimiter, comment,
inside action, space, identifier, field/variable, number, quoted strings, right delimiter), so
that trim markers (`{{- ` and ` -}}`), comments, custom delimiters and the error texts behave
as Go's do. Go runs its lexer as a goroutine feeding the parser; here `lex()` runs the states
to the end and returns the whole item list, which the parser walks with look-ahead. The
first error item ends the list, as in Go.

Positions are character offsets into the source; `line` is counted as Go counts it (1-based,
newlines inside raw strings and comments included), so errors can name line:col.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from yurt.runtime.gotemplate.tokens import KEYWORDS, Item, T, go_quote, go_rune_name

_SPACE: Final = " \t\r\n"
_TRIM_MARKER_LEN: Final = 2  # "- " or " -"
_EOF: Final = ""
_DECIMAL: Final = "0123456789_"  # digits, with Go's digit separator
_HEX: Final = "0123456789abcdefABCDEF_"


_State = Callable[["_Lexer"], Any] | None


class _Lexer:
    def __init__(self, text: str, left: str, right: str) -> None:
        self.input = text
        self.left = left or "{{"
        self.right = right or "}}"
        self.pos = 0
        self.start = 0
        self.line = 1
        self.start_line = 1
        self.paren_depth = 0
        self.items: list[Item] = []
        self.done = False

    # -- cursor --------------------------------------------------------------------------
    def next(self) -> str:
        if self.pos >= len(self.input):
            return _EOF
        ch = self.input[self.pos]
        self.pos += 1
        if ch == "\n":
            self.line += 1
        return ch

    def peek(self) -> str:
        return self.input[self.pos] if self.pos < len(self.input) else _EOF

    def backup(self) -> None:
        if self.pos > 0:
            self.pos -= 1
            if self.input[self.pos] == "\n":
                self.line -= 1

    def emit(self, typ: T) -> None:
        self.items.append(Item(typ, self.input[self.start : self.pos], self.start, self.start_line))
        self.start = self.pos
        self.start_line = self.line

    def ignore(self) -> None:
        self.start = self.pos
        self.start_line = self.line

    def skip_to(self, pos: int) -> None:
        """Jump forward without next(); keeps the line count right."""
        self.line += self.input.count("\n", self.pos, pos)
        self.pos = pos

    def accept(self, valid: str) -> bool:
        ch = self.next()
        if ch and ch in valid:
            return True
        if ch:
            self.backup()
        return False

    def accept_run(self, valid: str) -> None:
        while True:
            ch = self.next()
            if not ch or ch not in valid:
                break
        if ch:
            self.backup()

    def errorf(self, msg: str) -> None:
        self.items.append(Item(T.ERROR, msg, self.start, self.start_line))
        self.done = True

    # -- helpers ---------------------------------------------------------------------------
    def has_left_trim(self, at: int) -> bool:
        s = self.input
        return at + 1 < len(s) and s[at] == "-" and s[at + 1] in _SPACE

    def has_right_trim(self, at: int) -> bool:
        s = self.input
        return at + 1 < len(s) and s[at] in _SPACE and s[at + 1] == "-"

    def at_right_delim(self) -> tuple[bool, bool]:
        if self.has_right_trim(self.pos) and self.input.startswith(
            self.right, self.pos + _TRIM_MARKER_LEN
        ):
            return True, True
        return self.input.startswith(self.right, self.pos), False

    def at_terminator(self) -> bool:
        ch = self.peek()
        if ch == _EOF or ch in _SPACE or ch in ".,|:)(":
            return True
        return self.input.startswith(self.right, self.pos)

    def left_trim_length(self, at: int) -> int:
        end = at
        while end < len(self.input) and self.input[end] in _SPACE:
            end += 1
        return end - at

    # -- states ------------------------------------------------------------------------------
    def lex_text(self) -> _State:
        x = self.input.find(self.left, self.pos)
        if x >= 0:
            trim = self.has_left_trim(x + len(self.left))
            end = x
            if trim:
                while end > self.start and self.input[end - 1] in _SPACE:
                    end -= 1
            self.skip_to(end)
            if self.pos > self.start:
                self.emit(T.TEXT)
            self.skip_to(x)
            self.ignore()
            return _Lexer.lex_left_delim
        self.skip_to(len(self.input))
        if self.pos > self.start:
            self.emit(T.TEXT)
        self.emit(T.EOF)
        self.done = True
        return None

    def lex_left_delim(self) -> _State:
        self.skip_to(self.pos + len(self.left))
        trim = self.has_left_trim(self.pos)
        after = _TRIM_MARKER_LEN if trim else 0
        if self.input.startswith("/*", self.pos + after):
            self.skip_to(self.pos + after)
            self.ignore()
            return _Lexer.lex_comment
        self.emit(T.LEFT_DELIM)
        self.skip_to(self.pos + after)
        self.ignore()
        self.paren_depth = 0
        return _Lexer.lex_inside_action

    def lex_comment(self) -> _State:
        self.skip_to(self.pos + 2)
        x = self.input.find("*/", self.pos)
        if x < 0:
            self.errorf("unclosed comment")
            return None
        self.skip_to(x + 2)
        delim, trim = self.at_right_delim()
        if not delim:
            self.errorf("comment ends before closing delimiter")
            return None
        self.skip_to(self.pos + (_TRIM_MARKER_LEN if trim else 0) + len(self.right))
        if trim:
            self.skip_to(self.pos + self.left_trim_length(self.pos))
        self.ignore()
        return _Lexer.lex_text

    def lex_right_delim(self) -> _State:
        _, trim = self.at_right_delim()
        if trim:
            self.skip_to(self.pos + _TRIM_MARKER_LEN)
            self.ignore()
        self.skip_to(self.pos + len(self.right))
        self.emit(T.RIGHT_DELIM)
        if trim:
            self.skip_to(self.pos + self.left_trim_length(self.pos))
            self.ignore()
        return _Lexer.lex_text

    def lex_inside_action(self) -> _State:
        delim, _ = self.at_right_delim()
        if delim:
            if self.paren_depth == 0:
                return _Lexer.lex_right_delim
            self.errorf("unclosed left paren")
            return None
        ch = self.next()
        if ch == _EOF:
            self.errorf("unclosed action")
            return None
        if ch in _SPACE:
            self.backup()
            return _Lexer.lex_space
        if ch == "=":
            self.emit(T.ASSIGN)
        elif ch == ":":
            if self.next() != "=":
                self.errorf("expected :=")
                return None
            self.emit(T.DECLARE)
        elif ch == "|":
            self.emit(T.PIPE)
        elif ch == '"':
            return _Lexer.lex_quote
        elif ch == "`":
            return _Lexer.lex_raw_quote
        elif ch == "$":
            return _Lexer.lex_variable
        elif ch == "'":
            return _Lexer.lex_char
        elif ch == ".":
            if self.pos < len(self.input) and self.input[self.pos].isdigit():
                self.backup()
                return _Lexer.lex_number
            return _Lexer.lex_field
        elif ch in "+-" or ch.isdigit():
            self.backup()
            return _Lexer.lex_number
        elif _is_alnum(ch):
            self.backup()
            return _Lexer.lex_identifier
        elif ch == "(":
            self.emit(T.LEFT_PAREN)
            self.paren_depth += 1
        elif ch == ")":
            self.paren_depth -= 1
            if self.paren_depth < 0:
                self.errorf("unexpected right paren")
                return None
            self.emit(T.RIGHT_PAREN)
        elif ord(ch) < 0x80 and ch.isprintable():
            self.emit(T.CHAR)
        else:
            self.errorf(f"unrecognized character in action: {go_rune_name(ch)}")
            return None
        return _Lexer.lex_inside_action

    def lex_space(self) -> _State:
        spaces = 0
        while self.peek() and self.peek() in _SPACE:
            self.next()
            spaces += 1
        # A space may be the start of a trim-marked closing delimiter " -}}".
        if self.has_right_trim(self.pos - 1) and self.input.startswith(
            self.right, self.pos - 1 + _TRIM_MARKER_LEN
        ):
            self.backup()
            if spaces == 1:
                return _Lexer.lex_right_delim
        self.emit(T.SPACE)
        return _Lexer.lex_inside_action

    def lex_identifier(self) -> _State:
        while True:
            ch = self.next()
            if ch and _is_alnum(ch):
                continue
            if ch:
                self.backup()
            word = self.input[self.start : self.pos]
            if not self.at_terminator():
                self.errorf(f"bad character {go_rune_name(self.peek())}")
                return None
            if word in KEYWORDS and word != ".":
                self.emit(KEYWORDS[word])
            elif word in ("true", "false"):
                self.emit(T.BOOL)
            else:
                self.emit(T.IDENTIFIER)
            return _Lexer.lex_inside_action

    def lex_field(self) -> _State:
        return self._field_or_variable(T.FIELD)

    def lex_variable(self) -> _State:
        return self._field_or_variable(T.VARIABLE)

    def _field_or_variable(self, typ: T) -> _State:
        if self.at_terminator():
            self.emit(T.VARIABLE if typ is T.VARIABLE else T.DOT)
            return _Lexer.lex_inside_action
        while True:
            ch = self.next()
            if not ch or not _is_alnum(ch):
                if ch:
                    self.backup()
                break
        if not self.at_terminator():
            self.errorf(f"bad character {go_rune_name(self.peek())}")
            return None
        self.emit(typ)
        return _Lexer.lex_inside_action

    def lex_char(self) -> _State:
        return self._quoted("'", T.CHAR_CONSTANT, "unterminated character constant")

    def lex_number(self) -> _State:
        if not self._scan_number():
            self.errorf(f"bad number syntax: {go_quote(self.input[self.start : self.pos])}")
            return None
        self.emit(T.NUMBER)
        return _Lexer.lex_inside_action

    def _scan_number(self) -> bool:
        self.accept("+-")
        digits = _DECIMAL
        if self.accept("0"):
            if self.accept("xX"):
                digits = _HEX
            elif self.accept("oO"):
                digits = "01234567_"
            elif self.accept("bB"):
                digits = "01_"
        self.accept_run(digits)
        if self.accept("."):
            self.accept_run(digits)
        if digits == _DECIMAL and self.accept("eE"):
            self.accept("+-")
            self.accept_run(_DECIMAL)
        if digits == _HEX and self.accept("pP"):
            self.accept("+-")
            self.accept_run(_DECIMAL)
        self.accept("i")
        if self.peek() and _is_alnum(self.peek()):
            self.next()
            return False
        return True

    def lex_quote(self) -> _State:
        return self._quoted('"', T.STRING, "unterminated quoted string")

    def _quoted(self, close: str, typ: T, unterminated: str) -> _State:
        """The rest of a '…' or "…" literal, whose backslash escapes the next character."""
        while True:
            ch = self.next()
            if ch == "\\":
                if self.next() not in (_EOF, "\n"):
                    continue
                ch = _EOF
            if ch in (_EOF, "\n"):
                self.errorf(unterminated)
                return None
            if ch == close:
                break
        self.emit(typ)
        return _Lexer.lex_inside_action

    def lex_raw_quote(self) -> _State:
        x = self.input.find("`", self.pos)
        if x < 0:
            self.errorf("unterminated raw quoted string")
            return None
        self.skip_to(x + 1)
        self.emit(T.RAW_STRING)
        return _Lexer.lex_inside_action


def _is_alnum(ch: str) -> bool:
    return ch == "_" or ch.isalpha() or ch.isdigit()


def lex(text: str, left: str = "{{", right: str = "}}") -> list[Item]:
    """All items of `text`, ending with EOF or with the first ERROR item."""
    lexer = _Lexer(text, left, right)
    state: _State = _Lexer.lex_text
    while state is not None and not lexer.done:
        state = state(lexer)
    return lexer.items

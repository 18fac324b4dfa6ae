"""HCL's tokens as hclsyntax's scanner cuts them (hclsyntax/scan_tokens.rl), for the formatter.

What lives here: the token types (named after hclsyntax/token.go's), `Token` (its text and the
spaces before it, hclwrite's `SpacesBefore`), and `lex`, which cuts a text into tokens with the
scanner's modes: the main mode (expressions, blocks, comments), quoted-string templates and
heredoc templates, and `${ }` / `%{ }` sequences inside either, back in the main mode until
their brace closes. The tokens' texts put end to end are the text without the spaces between
tokens, so a formatter can change spaces and nothing else.

The scanner's rules kept here: a `#` or `//` comment takes its newline; `$${` and `%%{` are
literal text; a heredoc's closing marker is a line that holds only the marker (spaces around
it allowed, as `<<-` needs), and its token is followed by a newline token of its own; an
identifier may hold dashes (`a-1` is one name). What the scanner marks invalid, and what never
closes, is refused here at once (`HclSyntaxError` with line and column), since a file that does
not scan is not formatted.

Pure: text in, tokens out; stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

# Token types, named after hclsyntax's (hclsyntax/token.go).
OBRACE, CBRACE, OBRACK, CBRACK, OPAREN, CPAREN = "{", "}", "[", "]", "(", ")"
OQUOTE, CQUOTE, OHEREDOC, CHEREDOC = "OQuote", "CQuote", "OHeredoc", "CHeredoc"
QUOTEDLIT, STRINGLIT = "QuotedLit", "StringLit"
INTERP, CONTROL, SEQEND = "TemplateInterp", "TemplateControl", "TemplateSeqEnd"
IDENT, NUMBER, COMMENT, NEWLINE, NIL = "Ident", "NumberLit", "Comment", "Newline", "Nil"
EQUAL, COMMA, DOT, ELLIPSIS, COLON, QUESTION = "=", ",", ".", "...", ":", "?"
MINUS, BANG, DOUBLECOLON = "-", "!", "::"

_MULTI: Final = ("...", "==", "!=", ">=", "<=", "&&", "||", "::", "=>")
_SINGLE: Final = frozenset("[]().,*/%+-=<>!?:;&|~^`'")
_NUMBER: Final = re.compile(r"\d(?:(?:[\d.]|[eE][+-]?\d)*(?:\d|[eE][+-]?\d))?")
_IDENT: Final = re.compile(r"[^\W\d][\w-]*")
_HEREDOC: Final = re.compile(r"<<(-?)([^\W\d][\w-]*)(\r?\n)")
_SPACES: Final = re.compile(r"[ \t]+")


class HclSyntaxError(ValueError):
    """The text is not HCL the scanner can read: `line` and `column` are 1-based."""

    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(f"{line}:{column}: {message}")
        self.line, self.column, self.message = line, column, message


@dataclass(slots=True)
class Token:
    type: str
    text: str
    spaces: int = 0  # spaces before the token, hclwrite's SpacesBefore


@dataclass(slots=True)
class _Heredoc:
    marker: str
    at_line_start: bool = True  # the scanner's StartOfLine: only such a line may close it


def _where(src: str, pos: int) -> tuple[int, int]:
    line = src.count("\n", 0, pos) + 1
    return line, pos - (src.rfind("\n", 0, pos) + 1) + 1


def _match_end(pattern: re.Pattern[str], src: str, pos: int) -> int:
    m = pattern.match(src, pos)
    return pos + 1 if m is None else m.end()


def _template_start(src: str, pos: int) -> str | None:
    """INTERP or CONTROL when an unescaped `${` or `%{` starts at pos (`$${` is a literal)."""
    pair = src[pos:pos + 2]
    if pair in ("${", "%{") and not (pos > 0 and src[pos - 1] == pair[0]):
        return INTERP if pair == "${" else CONTROL
    return None


def _literal_end(src: str, pos: int, stops: str) -> int:
    """The end of a template literal from pos: before the next unescaped `${`/`%{`, or a
    character of `stops` (each stop character ends the literal before it)."""
    i = pos
    while i < len(src):
        c = src[i]
        if c in stops:
            return i
        if c == "\\" and '"' in stops:  # quoted strings only: an escape is two characters
            i += 2
            continue
        if c in "$%" and _template_start(src, i):
            return i
        i += 1
    return i


def lex(src: str) -> list[Token]:
    """hclsyntax's tokens of `src` (without its EOF), each with the spaces before it.

    Raises:
        HclSyntaxError: a character or construct the scanner refuses (see the module).
    """
    tokens: list[Token] = []
    modes: list[str] = ["main"]
    braces = 0
    returns: list[int] = []  # brace depths at which a `}` ends a template sequence
    heredocs: list[_Heredoc] = []
    openers: list[tuple[str, int]] = []
    pos = last = 0

    def emit(kind: str, end: int) -> None:
        nonlocal pos, last
        tokens.append(Token(kind, src[pos:end], pos - last))
        pos = last = end

    def fail(message: str, at: int | None = None, /) -> HclSyntaxError:
        return HclSyntaxError(*_where(src, pos if at is None else at), message)

    def enter_template(kind: str) -> None:
        nonlocal braces
        end = pos + 2 + (src[pos + 2:pos + 3] == "~")
        openers.append(("${" if kind == INTERP else "%{", pos))
        emit(kind, end)
        braces += 1
        returns.append(braces)
        if heredocs:
            heredocs[-1].at_line_start = False
        modes.append("main")

    while pos < len(src):
        mode = modes[-1]
        c = src[pos]
        if mode == "string":
            kind = _template_start(src, pos)
            if kind:
                enter_template(kind)
            elif c == '"':
                emit(CQUOTE, pos + 1)
                modes.pop()
                openers.pop()
            elif c in "\r\n":
                raise fail("a quoted string cannot span lines (use a heredoc)")
            else:
                emit(QUOTEDLIT, max(_literal_end(src, pos, '"\r\n'), pos + 1))
            continue
        if mode == "heredoc":
            kind = _template_start(src, pos)
            if kind:
                enter_template(kind)
                continue
            doc = heredocs[-1]
            end = _literal_end(src, pos, "\n")
            if end < len(src) and src[end] == "\n":
                line_end = end - (end > pos and src[end - 1] == "\r")
                if doc.at_line_start and src[pos:end].strip() == doc.marker:
                    emit(CHEREDOC, line_end)
                    emit(NEWLINE, end + 1)
                    heredocs.pop()
                    modes.pop()
                    openers.pop()
                    continue
                emit(STRINGLIT, end + 1)
                doc.at_line_start = True
            else:
                emit(STRINGLIT, max(end, pos + 1))
                doc.at_line_start = False
            continue
        # main mode
        if c in " \t":
            pos = _match_end(_SPACES, src, pos)
        elif c == "\n" or src.startswith("\r\n", pos):
            emit(NEWLINE, pos + (1 if c == "\n" else 2))
        elif c == "#" or src.startswith("//", pos):
            nl = src.find("\n", pos)
            emit(COMMENT, len(src) if nl < 0 else nl + 1)
        elif src.startswith("/*", pos):
            close = src.find("*/", pos + 2)
            if close < 0:
                raise fail("unterminated comment: /* has no */")
            emit(COMMENT, close + 2)
        elif c.isdigit():
            emit(NUMBER, _match_end(_NUMBER, src, pos))
        elif (m := _IDENT.match(src, pos)) is not None:
            emit(IDENT, m.end())
        elif (m := _HEREDOC.match(src, pos)) is not None:
            openers.append(("<<" + m.group(2), pos))
            emit(OHEREDOC, m.end())
            heredocs.append(_Heredoc(m.group(2)))
            modes.append("heredoc")
        elif c == "{":
            openers.append(("{", pos))
            emit(OBRACE, pos + 1)
            braces += 1
        elif c == "}" or src.startswith("~}", pos):
            end = pos + (1 if c == "}" else 2)
            if returns and returns[-1] == braces:
                _close(openers, ("${", "%{"), fail)
                emit(SEQEND, end)
                returns.pop()
                modes.pop()
            elif c == "}":
                _close(openers, ("{",), fail)
                emit(CBRACE, end)
            else:
                raise fail("~} closes no template sequence")
            braces -= 1
        elif c == '"':
            openers.append(('"', pos))
            emit(OQUOTE, pos + 1)
            modes.append("string")
        elif (op := next((o for o in _MULTI if src.startswith(o, pos)), None)) is not None:
            emit(op, pos + len(op))
        elif c in _SINGLE:
            if c in "([":
                openers.append((c, pos))
            elif c in ")]":
                _close(openers, ("(",) if c == ")" else ("[",), fail)
            emit(c, pos + 1)
        else:
            raise fail(f"invalid character {c!r}")
    if openers:
        what, at = openers[-1]
        kinds = {'"': "string", "${": "interpolation", "%{": "template directive"}
        name = kinds.get(what, "heredoc" if what.startswith("<<") else f"{what!r}")
        raise fail(f"unclosed {name}: the file ends before it is closed", at)
    return tokens


def _close(openers: list[tuple[str, int]], expected: tuple[str, ...],
           fail: Callable[[str], HclSyntaxError]) -> None:
    """Pop the innermost opener, which must be one of `expected`."""
    if not openers or openers[-1][0] not in expected:
        opened = f" (it closes {openers[-1][0]!r} opened earlier)" if openers else ""
        raise fail(f"unexpected closing bracket{opened}")
    openers.pop()


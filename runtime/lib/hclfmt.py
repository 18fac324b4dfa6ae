"""HCL's canonical layout, as `nomad fmt` writes it: hclwrite's `Format`, token by token.

Nomad's command/fmt.go `processFile` parses a file with hclsyntax and writes it back through
hclwrite (`ParseConfig`, then `File.Bytes`, which runs hclwrite/format.go `format` over the
file's tokens). That pass changes only the spaces *between* tokens, never a token itself, so
it is rebuilt here over a token stream of the same shape as hclsyntax's scanner
(hclsyntax/scan_tokens.rl) with the same three passes:

1. **Lines.** Tokens are cut into lines at newline tokens and at `#`/`//` comments (which end
   with their newline). A heredoc's body and a quoted string are literal tokens with no
   newline token inside, so they sit within one line and are never re-indented. Each line has
   up to three cells: `lead`; `assign`, from the first `=` on when what follows it closes all
   the brackets it opens (a one-line attribute); `comment`, a line comment after code.
2. **Indent** (`formatIndent`): two spaces per level of a stack of net bracket openings per
   line (`{ [ ( ${ %{` open, `} ] ) }` close; nothing after a heredoc's opener counts).
3. **Spaces** (`spaceAfterToken`): one space between tokens or none, by the pair's types (no
   space inside brackets or before a comma, none inside templates, braces spaced, a minus
   after an operator is a negation...). Then **cells** (`formatCells`): the `=` of
   consecutive lines with an assign cell line up one space after the longest lead, and the
   comments of consecutive lines with a comment cell one space after the longest code.

What is kept byte for byte: every token's text, so comments (their trailing spaces too),
strings, heredoc bodies and the file's last line (a file without a final newline keeps
none, as hclwrite leaves it). Spaces and tabs between tokens become the canonical spaces;
spaces before a newline go.

Errors: the scanner's refusals (a character HCL has no token for, an unterminated string,
heredoc or comment, a newline in a quoted string, brackets that do not balance) raise
`HclFormatError` with the 1-based line and column; grammar errors beyond that are the
parser's to find (runtime/cli/fmt.py parses before formatting, as Nomad's does).

Pure: text in, text out; no I/O, stdlib only.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

# Token types, named after hclsyntax's (hclsyntax/token.go).
OBRACE, CBRACE, OBRACK, CBRACK, OPAREN, CPAREN = "{", "}", "[", "]", "(", ")"
OQUOTE, CQUOTE, OHEREDOC, CHEREDOC = "OQuote", "CQuote", "OHeredoc", "CHeredoc"
QUOTEDLIT, STRINGLIT = "QuotedLit", "StringLit"
INTERP, CONTROL, SEQEND = "TemplateInterp", "TemplateControl", "TemplateSeqEnd"
IDENT, NUMBER, COMMENT, NEWLINE, NIL = "Ident", "NumberLit", "Comment", "Newline", "Nil"
EQUAL, COMMA, DOT, ELLIPSIS, COLON, QUESTION = "=", ",", ".", "...", ":", "?"
MINUS, BANG, DOUBLECOLON = "-", "!", "::"

_OPENERS: Final = frozenset({OBRACE, OBRACK, OPAREN, INTERP, CONTROL})
_CLOSERS: Final = frozenset({CBRACE, CBRACK, CPAREN, SEQEND})
#: After these a minus is a negation (hclwrite/format.go `spaceAfterToken`).
_NEGATION_AFTER: Final = frozenset({
    NIL, OPAREN, OBRACE, OBRACK, EQUAL, COLON, COMMA, QUESTION, "+", "*", "/", "%", MINUS,
    "==", "!=", ">", ">=", "<", "<=", "&&", "||", BANG})
_MULTI: Final = ("...", "==", "!=", ">=", "<=", "&&", "||", "::", "=>")
_SINGLE: Final = frozenset("[]().,*/%+-=<>!?:;&|~^`'")
_NUMBER: Final = re.compile(r"\d(?:(?:[\d.]|[eE][+-]?\d)*(?:\d|[eE][+-]?\d))?")
_IDENT: Final = re.compile(r"[^\W\d][\w-]*")
_HEREDOC: Final = re.compile(r"<<(-?)([^\W\d][\w-]*)(\r?\n)")
_SPACES: Final = re.compile(r"[ \t]+")


class HclFormatError(ValueError):
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
class _Line:
    lead: list[Token]
    assign: list[Token] = field(default_factory=list)
    comment: list[Token] = field(default_factory=list)


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
        HclFormatError: a character or construct the scanner refuses (see the module).
    """
    tokens: list[Token] = []
    modes: list[str] = ["main"]
    braces = 0
    returns: list[int] = []  # brace depths at which a `}` ends a template sequence
    heredocs: list[list[object]] = []  # [marker, at start of line]
    openers: list[tuple[str, int]] = []
    pos = last = 0

    def emit(kind: str, end: int) -> None:
        nonlocal pos, last
        tokens.append(Token(kind, src[pos:end], pos - last))
        pos = last = end

    def fail(message: str, at: int | None = None, /) -> HclFormatError:
        return HclFormatError(*_where(src, pos if at is None else at), message)

    def enter_template(kind: str) -> None:
        nonlocal braces
        end = pos + 2 + (src[pos + 2:pos + 3] == "~")
        openers.append(("${" if kind == INTERP else "%{", pos))
        emit(kind, end)
        braces += 1
        returns.append(braces)
        if heredocs:
            heredocs[-1][1] = False
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
                if doc[1] and src[pos:end].strip() == doc[0]:
                    emit(CHEREDOC, line_end)
                    emit(NEWLINE, end + 1)
                    heredocs.pop()
                    modes.pop()
                    openers.pop()
                    continue
                emit(STRINGLIT, end + 1)
                doc[1] = True
            else:
                emit(STRINGLIT, max(end, pos + 1))
                doc[1] = False
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
            heredocs.append([m.group(2), True])
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
           fail: Callable[[str], HclFormatError]) -> None:
    """Pop the innermost opener, which must be one of `expected`."""
    if not openers or openers[-1][0] not in expected:
        opened = f" (it closes {openers[-1][0]!r} opened earlier)" if openers else ""
        raise fail(f"unexpected closing bracket{opened}")
    openers.pop()


def _bracket_change(token: Token) -> int:
    return 1 if token.type in _OPENERS else -1 if token.type in _CLOSERS else 0


def _graphemes(text: str) -> int:
    """How many user-perceived characters (hclwrite counts grapheme clusters with textseg):
    marks, variation selectors and skin tones join the character before them, a zero-width
    joiner joins two, and regional indicators (flags) go in pairs. Near enough for the
    characters job files hold; ASCII is one each."""
    if text.isascii():
        return len(text)
    count = 0
    joined = False
    flag_half = False
    for ch in text:
        code = ord(ch)
        if joined:
            joined = False
        elif ch == "\u200d":
            joined = True
        elif (unicodedata.category(ch) in ("Mn", "Me") or 0xFE00 <= code <= 0xFE0F
              or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F):
            pass
        elif 0x1F1E6 <= code <= 0x1F1FF:
            count += not flag_half
            flag_half = not flag_half
            continue
        else:
            count += 1
        flag_half = False
    return count


def _columns(tokens: list[Token]) -> int:
    """hclwrite's `Tokens.Columns`: the spaces, plus each token's grapheme clusters."""
    return sum(t.spaces + _graphemes(t.text) for t in tokens)


def _lines(tokens: list[Token]) -> list[_Line]:
    lines: list[_Line] = []
    current: list[Token] = []
    for token in tokens:
        current.append(token)
        if token.type == NEWLINE or (token.type == COMMENT and token.text.endswith("\n")):
            lines.append(_Line(current))
            current = []
    if current:
        lines.append(_Line(current))
    for line in lines:
        if len(line.lead) > 1 and line.lead[-1].type == COMMENT:
            line.comment = line.lead[-1:]
            line.lead = line.lead[:-1]
        for i, token in enumerate(line.lead):
            if i > 0 and token.type == EQUAL:
                if sum(_bracket_change(t) for t in line.lead[i:]) == 0:
                    line.assign = line.lead[i:]
                    line.lead = line.lead[:i]
                break
    return lines


def _indent(lines: list[_Line]) -> None:
    stack: list[int] = []
    for line in lines:
        if line.lead[0].type == NEWLINE:
            line.lead[0].spaces = 0
            continue
        net = 0
        for token in line.lead:
            net += _bracket_change(token)
            if token.type == OHEREDOC:
                break
        net += sum(_bracket_change(t) for t in line.assign)
        if net < 0:
            closed = -net
            while closed > 0 and stack:
                if closed >= stack[-1]:
                    closed -= stack.pop()
                else:
                    stack[-1] -= closed
                    closed = 0
        line.lead[0].spaces = 2 * len(stack)
        if net > 0:
            stack.append(net)


def _space_after(subject: Token, before: Token, after: Token) -> bool:
    """hclwrite/format.go `spaceAfterToken`, case by case in its order."""
    s, a = subject.type, after.type
    if a in (NEWLINE, NIL):
        return False
    if s == IDENT and a == OPAREN:
        return False
    if (s, a) in ((IDENT, DOUBLECOLON), (DOUBLECOLON, IDENT)):
        return False
    if DOT in (s, a):
        return False
    if a in (COMMA, ELLIPSIS):
        return False
    if s == COMMA:
        return True
    if s in (QUOTEDLIT, STRINGLIT, OQUOTE, OHEREDOC) or a in (QUOTEDLIT, STRINGLIT, CQUOTE,
                                                               CHEREDOC):
        return False
    if s == IDENT and subject.text == "in" and before.type == IDENT:
        return True
    if a == OBRACK and (s in (IDENT, NUMBER) or _bracket_change(subject) < 0):
        return False
    if s == BANG:
        return False
    if s == MINUS:
        return before.type not in _NEGATION_AFTER
    if s == OBRACE or a == CBRACE:
        return not (s == OBRACE and a == CBRACE)
    if s in (INTERP, CONTROL) and a == OBRACE:
        return True
    if s == CBRACE and a == SEQEND:
        return True
    if s == SEQEND and a in (INTERP, CONTROL):
        return False
    return not (_bracket_change(subject) > 0 or _bracket_change(after) < 0)


def _spaces(lines: list[_Line]) -> None:
    nil = Token(NIL, "")
    for line in lines:
        for cell in (line.lead, line.assign):
            if cell is line.assign and cell:
                cell[0].spaces = 1
            for i in range(len(cell) - 1):
                before = cell[i - 1] if i > 0 else nil
                cell[i + 1].spaces = int(_space_after(cell[i], before, cell[i + 1]))


def _align(lines: list[_Line]) -> None:
    def chains(has: str) -> list[list[_Line]]:
        runs: list[list[_Line]] = []
        run: list[_Line] = []
        for line in lines:
            if getattr(line, has):
                run.append(line)
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
        return runs

    for run in chains("assign"):
        width = max(_columns(line.lead) for line in run)
        for line in run:
            line.assign[0].spaces = width - _columns(line.lead) + 1
    for run in chains("comment"):
        width = max(_columns(line.lead) + _columns(line.assign) for line in run)
        for line in run:
            line.comment[0].spaces = width - _columns(line.lead) - _columns(line.assign) + 1


def format_tokens(tokens: list[Token]) -> str:
    """Set every token's spaces as hclwrite's `format` does; the formatted text."""
    lines = _lines(tokens)
    _indent(lines)
    _spaces(lines)
    _align(lines)
    return "".join(" " * t.spaces + t.text for t in tokens)


def format_hcl(src: str) -> str:
    """`src` in HCL's canonical layout (see the module); formatting its result changes
    nothing. A leading byte-order mark is dropped, as hclsyntax's scanner drops it.

    Raises:
        HclFormatError: `src` is not HCL the scanner can read.
    """
    return format_tokens(lex(src.removeprefix("\ufeff")))

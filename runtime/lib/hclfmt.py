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
string and heredoc literals (the text around a `${ }` in them; inside the braces, spaces are
an expression's) and a missing final newline (hclwrite adds none). Spaces and tabs between
tokens become the canonical spaces; spaces before a newline go. A leading byte-order mark
goes, as hclsyntax's scanner drops it.

Errors: what the scanner refuses (runtime/lib/hcltokens.py `lex`) raises `HclSyntaxError`
with the 1-based line and column; grammar errors beyond that are the parser's to find
(runtime/cli/fmt.py parses before formatting, as Nomad's does).

Pure: text in, text out; no I/O, stdlib only.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Final

from yurt.runtime.lib.hcltokens import (
    BANG,
    CBRACE,
    CBRACK,
    CHEREDOC,
    COLON,
    COMMA,
    COMMENT,
    CONTROL,
    CPAREN,
    CQUOTE,
    DOT,
    DOUBLECOLON,
    ELLIPSIS,
    EQUAL,
    IDENT,
    INTERP,
    MINUS,
    NEWLINE,
    NIL,
    NUMBER,
    OBRACE,
    OBRACK,
    OHEREDOC,
    OPAREN,
    OQUOTE,
    QUESTION,
    QUOTEDLIT,
    SEQEND,
    STRINGLIT,
    HclSyntaxError,
    Token,
    lex,
)

__all__ = ["HclSyntaxError", "format_hcl", "format_tokens"]

_OPENERS: Final = frozenset({OBRACE, OBRACK, OPAREN, INTERP, CONTROL})
_CLOSERS: Final = frozenset({CBRACE, CBRACK, CPAREN, SEQEND})
#: After these a minus is a negation (hclwrite/format.go `spaceAfterToken`).
_NEGATION_AFTER: Final = frozenset({
    NIL, OPAREN, OBRACE, OBRACK, EQUAL, COLON, COMMA, QUESTION, "+", "*", "/", "%", MINUS,
    "==", "!=", ">", ">=", "<", "<=", "&&", "||", BANG})


@dataclass(slots=True)
class _Line:
    lead: list[Token]
    assign: list[Token] = field(default_factory=list)
    comment: list[Token] = field(default_factory=list)



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
        HclSyntaxError: `src` is not HCL the scanner can read.
    """
    return format_tokens(lex(src.removeprefix("\ufeff")))

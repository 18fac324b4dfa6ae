r"""Text from elsewhere made safe for a terminal: control characters escaped as Go shows them.

A name that a remote API client or a job file chose (a job ID, a task, group or node name, an
event message, a variable's item) may hold ESC, BEL or any other control character. Written
raw to an operator's terminal, those are commands to the terminal, not text: `ESC ] 0 ; …
BEL` retitles the window, `ESC [ 2 J` clears the screen, other sequences move the cursor,
rewrite what a line said or (OSC 52) set the clipboard. Whatever is shown to a person is
therefore passed through `printable` first.

The escapes are Go's, as `strconv.Quote` and `%q` write them, without the surrounding
quotes: `\a \b \f \n \r \t \v` for their characters, `\xNN` for the other C0 controls and
DEL, `\uNNNN` (`\UNNNNNNNN` above the BMP) for every other character that is not printable.
"Printable" is Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and the
ASCII space. Python's `str.isprintable` is the same set (everything but the Unicode categories
Other and Separator, the ASCII space kept), so C1 controls (U+0080-U+009F, CSI as U+009B
among them), bidirectional overrides (U+202E), other format characters and lone surrogates
are escaped too.

Rejected: escaping backslashes and quotes as `strconv.Quote` does (its output is a Go literal;
here it is text inside a sentence or a table, where every Windows path and regular expression
would double its backslashes for no gain: a name that spells `\x1b` itself is shown as typed,
and is harmless); stripping instead of escaping (the operator could not tell `ab` from
`a<ESC>b`, and would look for the wrong job).

Pure functions with nothing to import: the CLI's output helpers (runtime/cli/output.py) call them on
every cell and message, so the common case, text that is printable already, costs one
`str.isprintable` call.
"""

from __future__ import annotations

from typing import Final

#: Go's short escapes, as `strconv.Quote` writes them.
_SHORT: Final = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                 "\v": "\\v"}
_DEL: Final = 0x7F
_BMP_END: Final = 0x10000


def escape_char(char: str) -> str:
    """One character as Go's `%q` writes it (printable characters as they are)."""
    if char.isprintable():
        return char
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x20 or code == _DEL:
        return f"\\x{code:02x}"
    if code < _BMP_END:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, *, lines: bool = False) -> str:
    """`text` with every character that is not printable escaped (see the module).

    Args:
        text: anything, from anywhere.
        lines: keep newlines as they are (a message of several lines); without it a newline
            is `\\n` too, as a table cell or a single-line field must stay on its line.
    """
    if text.isprintable():
        return text
    if lines and "\n" in text:
        return "\n".join(printable(line) for line in text.split("\n"))
    return "".join(escape_char(c) for c in text)

"""Go's `regexp` for the template functions that take a pattern (`regexMatch`,
`regexReplaceAll`), on RE2 (the `google-re2` package).

Why RE2 and not `re`: the pattern comes from whoever wrote the job, and `re` backtracks —
`(a+)+$` over forty `a`s and a `b` runs for minutes, on the agent. Go's regexp is RE2's
syntax and RE2's guarantee: matching in time linear in the text, no backreferences, no
lookaround. The C++ RE2 speaks the same syntax as Go (leftmost-first, Perl classes, `(?P<n>)`
and `(?<n>)`), so patterns pass through unchanged; what differs is done here:
- `ReplaceAllString`'s replacement is expanded as Go's `Expand` does (`$1`, `$name`,
  `${name}`, `$$`; a name takes the longest run of letters, digits and `_`, so `$1x` is the
  group named "1x", which is empty; a malformed `$` is kept as text);
- empty matches follow Go: none right after a previous match, and the scan always advances;
- a compile error reads as Go's "error parsing regexp: …" (RE2's own wording after it).

The replacement's UTF-8 size is checked while it is built (`limits.MAX_OUTPUT`), since an empty
pattern over a long text repeats the replacement once per character; each match is charged to
the running execution's step budget, since the loop over matches runs in Python.

What RE2 itself costs is charged too, as it is spent in a render thread that holds a render
slot until it ends. RE2 is linear in the text, but the factor is the program's size: once its
DFA gives up (a pattern like `[ab]*a[ab]{999}c` defeats it), it runs its NFA, ~3-5 ns per
byte of text and instruction of program here, so a 20 KB text against a 1000-character
pattern is seconds for one call. Parsing a pattern is linear in it, but a Unicode class
(`\\pL`) parses into hundreds of ranges: up to ~50 µs a pattern character; the program it
compiles to then stops at RE2's memory cap (`max_mem`, 8 MiB), ~0.2 s of work at most, which
is measured but not counted in advance. Neither cost can be known short of its worst case,
which is far above the usual one (the DFA scans a megabyte in a millisecond), and charging
the worst case would refuse ordinary templates.
So each compile and each search first checks that its worst case fits in what remains of the
budget (`limits.afford`: no call can outrun the budget), then is charged the thread CPU time
it took (`limits.NS_PER_STEP`); one whose worst case is a few steps is charged that instead of
two clock reads. The measure matters for `regexReplaceAll`: each search scans on from the last
match, as far as the text's end when a higher-priority alternative could still match
(`a[ab]*c|a` over `aaaa…`), so a loop of searches can be quadratic where each is linear.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from yurt.runtime.gotemplate.limits import MAX_OUTPUT, NS_PER_STEP, afford, charge
from yurt.runtime.lib.goregexp import GoRegexpError, compile_re2

#: What one match of `replace_all_string`'s Python loop costs, in evaluator steps (~2 µs).
MATCH_STEPS: Final = 10
#: A search's worst case: one step (0.2 µs) per this many bytes of text times instructions
#: of program (RE2's NFA measured at 3-5 ns for each).
SEARCH_UNITS_PER_STEP: Final = 32
#: A compile's worst case, in steps per character of pattern (`\pL` parses in ~50 µs per
#: character of it).
COMPILE_STEPS_PER_CHAR: Final = 250
#: Work whose worst case is at most this many steps is charged that, unmeasured.
MEASURE_ABOVE: Final = 64

_T = TypeVar("_T")

#: Compiled patterns kept (a pattern in a `range` body compiles once). Each program and its
#: DFA states stay within `PROGRAM_MEMORY`, and compiling with an explicit bound bypasses
#: google-re2's own module cache (its last 128 programs at 8 MiB each), so the patterns kept
#: alive are these 16: at most ~32 MiB however hostile.
_CACHE_SIZE: Final = 16
#: RE2's `max_mem` for template patterns: ~85,000 instructions, far beyond a real pattern.
PROGRAM_MEMORY: Final = 2 << 20


class RegexpError(Exception):
    """A pattern that does not compile, or a result beyond the size bound."""


def _bounded(worst: int, work: Callable[[], _T]) -> _T:
    """`work()`, refused unless its `worst` case (in steps) fits in the running execution's
    remaining budget, and charged the thread CPU time it took (or `worst`, when small).

    Raises:
        TemplateError: the worst case, or the time taken, exceeds the budget.
    """
    if worst <= MEASURE_ABOVE:
        charge(worst)
        return work()
    afford(worst)
    started = time.thread_time_ns()
    try:
        return work()
    finally:
        charge((time.thread_time_ns() - started) // NS_PER_STEP)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def compile_go(pattern: str) -> Any:
    """The compiled pattern (RE2 with Go's defaults). A compile is charged to the running
    execution (a pattern found in the cache costs nothing more).

    Raises:
        RegexpError: the pattern is not valid RE2 syntax.
        TemplateError: the compile's worst case exceeds what remains of the budget.
    """
    try:
        return _bounded(len(pattern) * COMPILE_STEPS_PER_CHAR,
                        lambda: compile_re2(pattern, max_mem=PROGRAM_MEMORY))
    except GoRegexpError as e:
        raise RegexpError(str(e)) from None


def _search(rx: Any, data: bytes, pos: int = 0) -> Any:
    """`rx.search(data, pos)`, bounded by the budget (see the module's header).

    Raises:
        TemplateError: the search's worst case, or its time, exceeds the budget.
    """
    worst = (len(data) - pos) * rx.programsize // SEARCH_UNITS_PER_STEP
    return _bounded(worst, lambda: rx.search(data, pos))


def match_string(pattern: str, text: str) -> bool:
    """Go's `regexp.MatchString`.

    Raises:
        RegexpError: a bad pattern.
        TemplateError: the search exceeds the budget.
    """
    return _search(compile_go(pattern), text.encode()) is not None


def _name_end(template: str, i: int) -> int:
    while i < len(template):
        ch = template[i]
        if not (ch.isalpha() or ch.isdecimal() or ch == "_"):
            break
        i += 1
    return i


def _group_number(name: str) -> int:
    """Go's `extract`: a decimal name without a leading zero is a group number, else -1."""
    if not name.isascii() or not name.isdigit() or (name[0] == "0" and len(name) > 1):
        return -1
    return int(name) if len(name) <= 8 else -1


def _expand(template: str, match: Any, names: dict[str, int], groups: int) -> bytes:
    """Go's `Regexp.Expand` of `template` for one match (of a UTF-8 text)."""
    out: list[bytes] = []
    i = 0
    while True:
        j = template.find("$", i)
        if j < 0:
            out.append(template[i:].encode())
            return b"".join(out)
        out.append(template[i:j].encode())
        i = j + 1
        if template.startswith("$", i):
            out.append(b"$")
            i += 1
            continue
        brace = template.startswith("{", i)
        start = i + brace
        end = _name_end(template, start)
        if end == start or (brace and not template.startswith("}", end)):
            out.append(b"$")  # malformed: the `$` is text
            continue
        name = template[start:end]
        i = end + brace
        num = _group_number(name)
        if num < 0:
            num = names.get(name, -1)
        if 0 <= num <= groups:
            out.append(match.group(num) or b"")


def _rune_width(data: bytes, i: int) -> int:
    """The length of the UTF-8 sequence starting at `i` (1 at the end, as Go steps)."""
    if i >= len(data):
        return 1
    lead = data[i]
    return 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


def replace_all_string(pattern: str, repl: str, text: str, limit: int = MAX_OUTPUT) -> str:
    """Go's `Regexp.ReplaceAllString`, over the text's UTF-8 bytes as Go works.

    Bytes, not str: the wrapper re-encodes a str text on every search, which made this loop
    quadratic; one encoding up front keeps it linear.

    Raises:
        RegexpError: a bad pattern, or a result longer than `limit` bytes.
        TemplateError: a search exceeds the budget.
    """
    rx = compile_go(pattern)
    names: dict[str, int] = dict(rx.groupindex)
    groups: int = rx.groups
    src = text.encode()
    literal = repl.encode() if "$" not in repl else None
    out: list[bytes] = []
    size = 0
    last_end = 0
    pos = 0
    while pos <= len(src):
        m = _search(rx, src, pos)
        if m is None:
            break
        charge(MATCH_STEPS)  # a match per character would otherwise be free
        start, end = m.span()
        pieces = [src[last_end:start]]
        # No replacement for an empty match right after the previous one (Go's rule, so a
        # pattern matching both empty and non-empty strings replaces once).
        if end > last_end or start == 0:
            pieces.append(literal if literal is not None else _expand(repl, m, names, groups))
        size += sum(map(len, pieces))
        if size > limit:
            raise RegexpError(f"result exceeds {limit} bytes")
        out += pieces
        last_end = end
        # Always advance, by at least one character (Go's rule for empty matches).
        pos = max(end, pos + _rune_width(src, pos))
    out.append(src[last_end:])
    return b"".join(out).decode()

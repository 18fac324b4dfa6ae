"""Go's `regexp`, as Nomad's scheduler, go-version and the template functions use it: RE2,
through google-re2.

Why not Python's `re`: the patterns and texts matched here come from jobs (a `regexp`
constraint's pattern and, through a literal or `${meta.*}`, its value; version strings and
version constraints), and the scheduler matches them on its own path. `re` backtracks: `(a+)+$`
against thirty `a`s and a `b` takes a minute, and each `a` more doubles it; go-version's own
patterns, harmless in Go, take quadratic time on a long malformed pre-release. RE2 never
backtracks: a match costs time linear in the text (times the pattern's size at worst), and RE2
refuses exactly what it cannot match so (backreferences, lookaround), as Go's `regexp.Compile`
does, so a pattern compiles here when it compiles in Nomad. Known corners where C++ RE2 and
Go's regexp/syntax differ: C++ accepts `\\C` (one byte) and nesting deeper than Go's 1000
levels, and takes a capture name used twice.

Errors read as Go's (`error parsing regexp: <code>: `<text>``), RE2's wording of each code
translated to Go's by `_GO_CODES`: they reach users in jobspec validation messages, where
Nomad prints Go's.

Patterns from jobs, a `regexp` constraint's, are compiled by `compile_regexp` and matched only
when `regexp_refusal` allows it: the scheduler (runtime/server/scheduler/feasible.py) and
jobspec validation (runtime/jobspec/rules_constraint.py) both use them, so registration refuses
what the scheduler would. RE2 is linear in the value, but a pattern built to defeat its DFA
(`[ab]*a[ab]{999}c`, many times over) makes it simulate the automaton: every instruction of the
program once per byte of the value. The scheduler runs on the event loop, so bounds Nomad does
not have keep one check short. A pattern longer than `MAX_PATTERN` characters, or whose program
and DFA states need more than `MAX_PROGRAM_MEMORY` bytes, does not compile ("expression too
large", Go's own error for a pattern past its limits; that leaves programs of at most ~21,000
instructions). A match whose worst case, instructions × (UTF-8 bytes of the value + 1), exceeds
`MAX_MATCH_WORK` is not run: the constraint is not met, and the node's filter reason says why
(`regexp_refusal`); a value longer than `MAX_TEXT` characters is refused so too. Measured on
the 2-core build machine, the worst shapes found (the DFA-defeating alternation above, with and
without a match at the end, word boundaries, case folding, Unicode classes) cost 5-7.5 ns per
unit of work (load average 3): 20-32 ms at the bound, against 11-14 s for the 4 KB,
241-alternative pattern on a 16 KB value before. Real patterns are a few dozen instructions, so
they still match values of the full `MAX_TEXT`.

Invariants: a `GoRegexp` is immutable and shares its compiled program (RE2 is thread-safe);
nothing here logs (RE2's own error log is off: an error is the caller's to report).
"""

from __future__ import annotations

from typing import Any, Final, Protocol, cast, final

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

#: RE2's wording of a parse error code (re2.cc) -> Go's (regexp/syntax ErrorCode).
_GO_CODES: Final = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
}


class GoMatch(Protocol):
    def __getitem__(self, group: int) -> str | None: ...


class _Compiled(Protocol):
    def search(self, text: str) -> GoMatch | None: ...

    def fullmatch(self, text: str) -> GoMatch | None: ...

    @property
    def programsize(self) -> int: ...


@final
class GoRegexpError(ValueError):
    """A pattern Go's `regexp.Compile` refuses; `str()` is Go's error text."""


def go_error(code: str, text: str) -> GoRegexpError:
    """Go's regexp/syntax error for `code` (Go's wording) about `text`."""
    return GoRegexpError(f"error parsing regexp: {code}: `{text}`")


def _translate(error: Exception) -> GoRegexpError:
    raw = error.args[0] if error.args else b""
    message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    code, _, text = message.partition(": ")
    return go_error(_GO_CODES.get(code, code), text)


def compile_re2(pattern: str, *, captures: bool = True, max_mem: int | None = None) -> Any:
    """The raw RE2 program for `pattern`, for callers that walk matches themselves (the
    template functions); `captures=False` compiles it for yes/no matching only.

    `max_mem` (bytes) replaces RE2's default 8 MiB bound on the program and its DFA states (a
    bigger program does not compile: "expression too large"), and compiles outside
    google-re2's module cache: `re2.compile` keeps its last 128 programs alive, which would
    defeat a caller that bounds memory with its own smaller cache.

    Raises:
        GoRegexpError: Go's regexp.Compile refuses `pattern` (Go's wording).
    """
    options = re2.Options()
    options.log_errors = False  # RE2 would print each bad pattern on the agent's stderr
    options.never_capture = not captures
    if max_mem is not None:
        options.max_mem = max_mem
    try:
        if max_mem is not None:
            return re2._Regexp(pattern, options)  # what re2.compile builds, minus its cache
        return re2.compile(pattern, options)
    except re2.error as e:
        raise _translate(e) from None


@final
class GoRegexp:
    """One compiled pattern. `captures=False` (the default) compiles it for yes/no matching
    only: RE2 then needs no submatch engine, ten times faster on hostile patterns."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str, *, captures: bool = False, max_mem: int | None = None) -> None:
        """Compile `pattern` as Go's regexp.Compile does (`max_mem`: as `compile_re2`).

        Raises:
            GoRegexpError: Go's regexp.Compile refuses `pattern`.
        """
        self._compiled = cast(_Compiled, compile_re2(pattern, captures=captures, max_mem=max_mem))
        self.pattern = pattern

    @property
    def program_size(self) -> int:
        """RE2's count of instructions in the compiled program: what one step of a match
        costs at worst (RE2's NFA runs every instruction once per byte of the text)."""
        return self._compiled.programsize

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in `text` (Go's MatchString)."""
        return self._compiled.search(text) is not None

    def fullmatch(self, text: str) -> GoMatch | None:
        """The match of the whole of `text`, its groups by index (None: did not take part),
        or None."""
        return self._compiled.fullmatch(text)


# --------------------------------------------------------------------------- patterns from jobs

#: The longest `regexp` pattern compiled, and the longest value one is matched against.
MAX_PATTERN: Final = 4096
MAX_TEXT: Final = 16 * 1024
#: RE2's `max_mem` for a constraint pattern (its default is 8 MiB, which let one cached
#: hostile pattern keep 2-20 MiB). Ordinary patterns need a few KiB.
MAX_PROGRAM_MEMORY: Final = 256 * 1024
#: The most work one match may cost: program instructions × (UTF-8 bytes of the value + 1).
MAX_MATCH_WORK: Final = 4_000_000

#: RE2's error when the program outgrows `max_mem`, as `_translate` words it.
_TOO_LARGE: Final = str(go_error("expression too large", ""))


def compile_regexp(pattern: str) -> GoRegexp:
    """Go's regexp.Compile, refusing patterns longer than `MAX_PATTERN` characters or whose
    program needs more than `MAX_PROGRAM_MEMORY` bytes.

    Raises:
        GoRegexpError: with Go's message, as Nomad's validation reports it.
    """
    if len(pattern) > MAX_PATTERN:
        raise go_error("expression too large", f"{pattern[:32]}… ({len(pattern)} characters, "
                                               f"at most {MAX_PATTERN})")
    try:
        return GoRegexp(pattern, max_mem=MAX_PROGRAM_MEMORY)
    except GoRegexpError as e:
        if str(e) != _TOO_LARGE:
            raise
        raise go_error("expression too large", f"{pattern[:32]}… (its program needs more "
                                               f"than {MAX_PROGRAM_MEMORY // 1024} KiB)") from None


def regexp_refusal(value: str, compiled: GoRegexp) -> str | None:
    """Why `compiled` is not matched against `value` at all (the constraint is then not met),
    or None: a value past `MAX_TEXT`, or a match whose worst case exceeds `MAX_MATCH_WORK`."""
    if len(value) > MAX_TEXT:
        return f"value of {len(value)} characters, at most {MAX_TEXT}"
    positions = len(value.encode("utf-8", "surrogatepass")) + 1
    work = compiled.program_size * positions
    if work > MAX_MATCH_WORK:
        return (f"regexp too costly: {compiled.program_size} instructions × {positions} "
                f"positions > {MAX_MATCH_WORK}")
    return None

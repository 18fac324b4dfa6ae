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

The replacement's size is checked while it is built (`limits.MAX_OUTPUT`), since an empty
pattern over a long text repeats the replacement once per character.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import re2  # type: ignore[import-untyped]

from yurt.runtime.gotemplate.limits import MAX_OUTPUT

#: Compiled patterns kept (a pattern in a `range` body compiles once). RE2 bounds each
#: program's memory (`max_mem`, 8 MiB by default), so the cache is bounded too.
_CACHE_SIZE: Final = 16


class RegexpError(Exception):
    """A pattern that does not compile, or a result beyond the size bound."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print each bad pattern on the agent's stderr
    return options


_OPTIONS: Final = _options()


@functools.lru_cache(maxsize=_CACHE_SIZE)
def compile_go(pattern: str) -> Any:
    """The compiled pattern (RE2 with Go's defaults).

    Raises:
        RegexpError: the pattern is not valid RE2 syntax.
    """
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        detail = e.args[0] if e.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise RegexpError(f"error parsing regexp: {detail}") from None


def match_string(pattern: str, text: str) -> bool:
    """Go's `regexp.MatchString`."""
    return compile_go(pattern).search(text) is not None


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


def _expand(template: str, match: Any, names: dict[str, int], groups: int) -> str:
    """Go's `Regexp.Expand` of `template` for one match."""
    out: list[str] = []
    i = 0
    while True:
        j = template.find("$", i)
        if j < 0:
            out.append(template[i:])
            return "".join(out)
        out.append(template[i:j])
        i = j + 1
        if template.startswith("$", i):
            out.append("$")
            i += 1
            continue
        brace = template.startswith("{", i)
        start = i + brace
        end = _name_end(template, start)
        if end == start or (brace and not template.startswith("}", end)):
            out.append("$")  # malformed: the `$` is text
            continue
        name = template[start:end]
        i = end + brace
        num = _group_number(name)
        if num < 0:
            num = names.get(name, -1)
        if 0 <= num <= groups:
            out.append(match.group(num) or "")


def replace_all_string(pattern: str, repl: str, text: str, limit: int = MAX_OUTPUT) -> str:
    """Go's `Regexp.ReplaceAllString`.

    Raises:
        RegexpError: a bad pattern, or a result longer than `limit` characters.
    """
    rx = compile_go(pattern)
    names: dict[str, int] = dict(rx.groupindex)
    groups: int = rx.groups
    literal = "$" not in repl
    out: list[str] = []
    size = 0
    last_end = 0
    pos = 0
    while pos <= len(text):
        m = rx.search(text, pos)
        if m is None:
            break
        start, end = m.span()
        pieces = [text[last_end:start]]
        # No replacement for an empty match right after the previous one (Go's rule, so a
        # pattern matching both empty and non-empty strings replaces once).
        if end > last_end or start == 0:
            pieces.append(repl if literal else _expand(repl, m, names, groups))
        size += sum(map(len, pieces))
        if size > limit:
            raise RegexpError(f"result exceeds {limit} characters")
        out += pieces
        last_end = end
        pos = end if end > pos else pos + 1  # always advance at least one character
    out.append(text[last_end:])
    return "".join(out)

"""Version constraints as Nomad's `version` and `semver` operators read them.

`version` is hashicorp/go-version: a loose version syntax (`1.2`, `v1.2.3-beta.1+meta`, the
`-` before a textual pre-release optional), constraints `= != > < >= <= ~>` joined by commas,
and its pre-release rule (a constraint without a pre-release never matches a pre-release
version; one with a pre-release matches pre-releases of the same base version only).
`semver` is Nomad's helper/constraints/semver: the same comparison, but the constraint's
versions must be strict SemVer (the `-` required), no `~>`, and no pre-release rule, so
pre-releases order as SemVer 2.0 says. The node's version is parsed loosely in both cases,
as Nomad does.

Invariants: pure, no state but an LRU cache of parsed constraints; a malformed constraint is
`VersionError` with go-version's message ("Malformed constraint: …"), which the jobspec
reports and the scheduler treats as "does not match". Version strings are matched with
`fullmatch` and Go's `\\s` class, never Python's `$`/`\\s`, which accept more.

Cost: versions and constraints come from jobs and node attributes and are parsed on the
scheduler's path, so parsing is linear. go-version's patterns are matched by RE2
(runtime/lib/goregexp.py), Go's own engine: Python's `re` backtracks through them in quadratic time
(a 5,000-character malformed pre-release took a second, 100 KB minutes). Numbers longer than
int64 are refused by their length before `int()`, which raises past 4300 digits. And a text
longer than `MAX_TEXT` is malformed without being read, which bounds the work and the cache
(go-version has no such bound; real ones are a few dozen characters).

Rejected: `packaging.version` (PEP 440 orders pre-releases and accepts spellings differently)
and the `semver` package (it refuses go-version's two-part and four-part versions).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from yurt.runtime.lib.goregexp import GoRegexp

_INT64_MAX: Final = (1 << 63) - 1
#: The longest version or constraint text parsed.
MAX_TEXT: Final = 4096
_SEGMENTS: Final = r"v?([0-9]+(\.[0-9]+)*?)"
_META: Final = r"(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))??"
#: go-version's VersionRegexpRaw and SemverRegexpRaw (the latter needs `-` before any
#: pre-release). Groups: 1 segments, 4 or 7 pre-release, 10 metadata.
VERSION_RE: Final = (_SEGMENTS + r"(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|"
                     r"(-?([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?" + _META)
SEMVER_RE: Final = _SEGMENTS + (
    r"(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|"
    r"(-([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?" + _META)
_VERSION: Final = GoRegexp(VERSION_RE, captures=True)
_SEMVER: Final = GoRegexp(SEMVER_RE, captures=True)
_GO_SPACE: Final = r"[\t\n\f\r ]*"  # Go's \s


class VersionError(ValueError):
    """A version or a constraint that does not parse (go-version's message)."""


@dataclass(frozen=True)
class Version:
    segments: tuple[int, ...]  # padded to at least three, as go-version does
    given: int  # how many segments the text had (the `~>` operator reads it)
    pre: str
    metadata: str

    def __str__(self) -> str:
        text = ".".join(map(str, self.segments))
        return text + (f"-{self.pre}" if self.pre else "") + (
            f"+{self.metadata}" if self.metadata else "")


def _shown(text: str) -> str:
    """`text` for an error message: a long one is cut, with its length."""
    return text if len(text) <= 64 else f"{text[:64]}… ({len(text)} characters)"


def _parse(text: str, pattern: GoRegexp) -> Version:
    m = pattern.fullmatch(text) if len(text) <= MAX_TEXT else None
    if m is None:
        raise VersionError(f"malformed version: {_shown(text)}")
    parts = (m[1] or "").split(".")
    segments = [go_int(p) for p in parts]
    if None in segments:
        raise VersionError(f"error parsing version: {_shown(text)}")
    padded = [s or 0 for s in segments] + [0] * (3 - len(segments))
    return Version(tuple(padded), len(parts), m[7] or m[4] or "", m[10] or "")


def parse_version(text: str) -> Version:
    """go-version's NewVersion (the loose syntax)."""
    return _parse(text, _VERSION)


_GO_INT: Final = re.compile(r"[+-]?[0-9]+")  # one way to match: linear in `re` too


def go_int(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64), or None."""
    if _GO_INT.fullmatch(text) is None:
        return None
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 19:
        return None  # out of range anyway; and int() raises past 4300 digits
    value = -int(digits or "0") if text.startswith("-") else int(digits or "0")
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def _compare_part(a: str, b: str) -> int:
    if a == b:
        return 0
    ai, bi = go_int(a), go_int(b)
    if a == "":
        return -1 if bi is not None else 1
    if b == "":
        return 1 if ai is not None else -1
    if ai is not None and bi is None:
        return -1
    if ai is None and bi is not None:
        return 1
    if ai is None and bi is None and a > b:
        return 1
    # go-version compares the parsed ints here (0 for text): equal ints fall through to -1.
    return 1 if (ai or 0) > (bi or 0) else -1


def _compare_pre(a: str, b: str) -> int:
    if a == b:
        return 0
    left, right = a.split("."), b.split(".")
    for i in range(max(len(left), len(right))):
        c = _compare_part(left[i] if i < len(left) else "", right[i] if i < len(right) else "")
        if c:
            return c
    return 0


def compare(v: Version, o: Version) -> int:
    """go-version's Version.Compare: -1, 0 or 1."""
    if str(v) == str(o):
        return 0
    if v.segments == o.segments:
        if not v.pre and not o.pre:
            return 0
        if not v.pre:
            return 1
        if not o.pre:
            return -1
        return _compare_pre(v.pre, o.pre)
    for i in range(max(len(v.segments), len(o.segments))):
        if i >= len(v.segments):
            return -1 if any(o.segments[i:]) else 0
        if i >= len(o.segments):
            return 1 if any(v.segments[i:]) else 0
        if v.segments[i] != o.segments[i]:
            return -1 if v.segments[i] < o.segments[i] else 1
    return 0


def _prerelease_ok(v: Version, c: Version) -> bool:
    if c.pre and v.pre:
        return v.segments == c.segments
    return not (v.pre and not c.pre)


def _pessimistic(v: Version, c: Version) -> bool:
    if not _prerelease_ok(v, c) or (c.pre and not v.pre):
        return False
    if compare(v, c) < 0:
        return False
    n = len(c.segments)
    if n > len(v.segments):
        return False
    if any(v.segments[i] != c.segments[i] for i in range(c.given - 1)):
        return False
    return c.segments[n - 1] <= v.segments[n - 1]


Check = Callable[[Version, Version], bool]

_OPS: Final[dict[str, Check]] = {
    "": lambda v, c: compare(v, c) == 0,
    "=": lambda v, c: compare(v, c) == 0,
    "!=": lambda v, c: compare(v, c) != 0,
    ">": lambda v, c: _prerelease_ok(v, c) and compare(v, c) == 1,
    "<": lambda v, c: _prerelease_ok(v, c) and compare(v, c) == -1,
    ">=": lambda v, c: _prerelease_ok(v, c) and compare(v, c) >= 0,
    "<=": lambda v, c: _prerelease_ok(v, c) and compare(v, c) <= 0,
    "~>": _pessimistic,
}
_SEMVER_OPS: Final[dict[str, Check]] = {
    "": lambda v, c: compare(v, c) == 0,
    "=": lambda v, c: compare(v, c) == 0,
    "!=": lambda v, c: compare(v, c) != 0,
    ">": lambda v, c: compare(v, c) == 1,
    "<": lambda v, c: compare(v, c) == -1,
    ">=": lambda v, c: compare(v, c) >= 0,
    "<=": lambda v, c: compare(v, c) <= 0,
}


def _single(ops: dict[str, Check], version_re: str) -> GoRegexp:
    alternatives = "|".join(re.escape(op) for op in sorted(ops, key=len, reverse=True))
    return GoRegexp(f"{_GO_SPACE}({alternatives}){_GO_SPACE}({version_re}){_GO_SPACE}",
                    captures=True)


_VERSION_SINGLE: Final = _single(_OPS, VERSION_RE)
_SEMVER_SINGLE: Final = _single(_SEMVER_OPS, SEMVER_RE)

Constraints = tuple[tuple[Check, Version], ...]


def _constraints(text: str, single: GoRegexp, ops: dict[str, Check],
                 version_re: GoRegexp) -> Constraints:
    if len(text) > MAX_TEXT:
        raise VersionError(f"Malformed constraint: {_shown(text)}")
    out = []
    for part in text.split(","):
        m = single.fullmatch(part)
        if m is None:
            raise VersionError(f"Malformed constraint: {part}")
        out.append((ops[m[1] or ""], _parse(m[2] or "", version_re)))
    return tuple(out)


@lru_cache(maxsize=256)
def version_constraint(text: str) -> Constraints:
    """go-version's NewConstraint. Raises VersionError."""
    return _constraints(text, _VERSION_SINGLE, _OPS, _VERSION)


@lru_cache(maxsize=256)
def semver_constraint(text: str) -> Constraints:
    """Nomad's semver.NewConstraint. Raises VersionError."""
    return _constraints(text, _SEMVER_SINGLE, _SEMVER_OPS, _SEMVER)


def satisfies(version: str, constraint: str, *, semver: bool = False) -> bool:
    """Whether `version` (loose syntax) meets every part of `constraint`; False when either
    does not parse, as Nomad's checkVersionMatch."""
    try:
        v = parse_version(version)
        parsed = semver_constraint(constraint) if semver else version_constraint(constraint)
    except VersionError:
        return False
    return all(check(v, c) for check, c in parsed)

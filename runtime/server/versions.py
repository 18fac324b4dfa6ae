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

Rejected: `packaging.version` (PEP 440 orders pre-releases and accepts spellings differently)
and the `semver` package (it refuses go-version's two-part and four-part versions).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

_INT64_MAX: Final = (1 << 63) - 1
_SEGMENTS: Final = r"v?([0-9]+(\.[0-9]+)*?)"
_META: Final = r"(\+([0-9A-Za-z\-~]+(\.[0-9A-Za-z\-~]+)*))??"
#: go-version's VersionRegexpRaw and SemverRegexpRaw (the latter needs `-` before any
#: pre-release). Groups: 1 segments, 4 or 7 pre-release, 10 metadata.
VERSION_RE: Final = (_SEGMENTS + r"(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|"
                     r"(-?([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?" + _META)
SEMVER_RE: Final = _SEGMENTS + (
    r"(-([0-9]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)|"
    r"(-([A-Za-z\-~]+[0-9A-Za-z\-~]*(\.[0-9A-Za-z\-~]+)*)))?" + _META)
_VERSION: Final = re.compile(VERSION_RE)
_SEMVER: Final = re.compile(SEMVER_RE)
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


def _parse(text: str, pattern: re.Pattern[str]) -> Version:
    m = pattern.fullmatch(text)
    if m is None:
        raise VersionError(f"malformed version: {text}")
    parts = m[1].split(".")
    segments = [int(p) for p in parts]
    if any(s > _INT64_MAX for s in segments):
        raise VersionError(f"error parsing version: {text}")
    segments += [0] * (3 - len(segments))
    return Version(tuple(segments), len(parts), m[7] or m[4] or "", m[10] or "")


def parse_version(text: str) -> Version:
    """go-version's NewVersion (the loose syntax)."""
    return _parse(text, _VERSION)


def go_int(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64), or None."""
    if re.fullmatch(r"[+-]?[0-9]+", text) is None:
        return None
    value = int(text)
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


def _single(ops: dict[str, Check], version_re: str) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(op) for op in sorted(ops, key=len, reverse=True))
    return re.compile(f"{_GO_SPACE}({alternatives}){_GO_SPACE}({version_re}){_GO_SPACE}")


_VERSION_SINGLE: Final = _single(_OPS, VERSION_RE)
_SEMVER_SINGLE: Final = _single(_SEMVER_OPS, SEMVER_RE)

Constraints = tuple[tuple[Check, Version], ...]


def _constraints(text: str, single: re.Pattern[str], ops: dict[str, Check],
                 version_re: re.Pattern[str]) -> Constraints:
    out = []
    for part in text.split(","):
        m = single.fullmatch(part)
        if m is None:
            raise VersionError(f"Malformed constraint: {part}")
        out.append((ops[m[1]], _parse(m[2], version_re)))
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

"""Go-style durations: parsing jobspec strings and formatting task event messages.

Nomad writes durations two ways and yurt must speak both exactly:
- jobspecs say `"15s"`, `"1m30s"`, `"100ms"` (Go's `time.ParseDuration` grammar), while the
  JSON encoding carries plain integer nanoseconds;
- task event display messages print `time.Duration.String()`: `10ms`, `5s`, `1m0s`, `30m0s`,
  `15.587610296s`, `0s`. Tests compare these strings byte for byte, so the formatter follows
  Go's algorithm (largest unit first, trailing zeros of the fraction trimmed) rather than any
  "friendlier" rendering.

Everything here is integer nanoseconds: floats would lose the last digits of `15.587610296s`.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

NANOSECOND: Final = 1
MICROSECOND: Final = 1_000
MILLISECOND: Final = 1_000_000
SECOND: Final = 1_000_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE

_UNITS: Final[dict[str, int]] = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "µs": MICROSECOND,  # U+00B5 micro sign, as Go accepts
    "μs": MICROSECOND,  # U+03BC greek mu, as Go accepts
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
# ASCII digits only, as Go: `\d` would also take "٣" (Arabic-Indic three) and Decimal reads it.
_PART: Final = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_MAX_NS: Final = 2**63 - 1
#: Longer is not a duration anyone writes; refusing it first keeps hostile input cheap (a
#: 200,000-digit number costs a second in Decimal) and error messages short.
_MAX_CHARS: Final = 64


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def parse_duration(text: str) -> int:
    """Parse a Go duration string into integer nanoseconds.

    Args:
        text: e.g. `"15s"`, `"1m30s"`, `"1.5h"`, `"-2ms"`, or `"0"`.

    Returns:
        The duration in nanoseconds.

    Raises:
        ValueError: with a message that says what was expected.
    """
    s = text.strip()
    if len(s) > _MAX_CHARS:
        raise ValueError(f'expected a duration such as "15s", got "{_shown(text)}" '
                         f"(longer than {_MAX_CHARS} characters)")
    if not s:
        raise ValueError('expected a duration such as "15s", "1m30s" or "100ms", got ""')
    sign = 1
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f'expected a duration such as "15s", "1m30s" or "100ms", got "{text}"')
    total = Decimal(0)
    pos = 0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            hint = " (a unit is required: ns, us, ms, s, m or h)" if s[pos:].isdigit() else ""
            raise ValueError(
                f'expected a duration such as "15s", "1m30s" or "100ms", got "{text}"{hint}'
            )
        try:
            total += Decimal(m.group(1)) * _UNITS[m.group(2)]
        except InvalidOperation:  # pragma: no cover - the regex only admits valid decimals
            raise ValueError(f'invalid number in duration "{text}"') from None
        pos = m.end()
    ns = int(total)
    if ns > _MAX_NS:
        raise ValueError(f'duration "{text}" is out of range')
    return sign * ns


def _fmt_frac(value: int, digits: int) -> str:
    """`value` as a decimal fraction with `digits` places, trailing zeros trimmed."""
    whole, frac = divmod(value, 10**digits)
    if frac == 0:
        return str(whole)
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def format_duration(ns: int) -> str:
    """Format nanoseconds exactly as Go's `time.Duration.String()` does."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < SECOND:
        if u < MICROSECOND:
            return f"{sign}{u}ns"
        if u < MILLISECOND:
            return f"{sign}{_fmt_frac(u, 3)}µs"
        return f"{sign}{_fmt_frac(u, 6)}ms"
    hours, rem = divmod(u, HOUR)
    minutes, rem = divmod(rem, MINUTE)
    seconds = _fmt_frac(rem, 9) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return f"{sign}{seconds}"

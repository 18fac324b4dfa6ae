"""Nomad's cron dialect (hashicorp/cronexpr), read with croniter: is a spec valid, which time
zone does a name mean, and when does a spec next match.

The syntax: 5 fields, 6 with a trailing year, 7 with a leading second and trailing year, or
`@yearly|@annually|@monthly|@weekly|@daily|@hourly`; `?` is `*`. A spec is evaluated on
*wall-clock* times in a time zone and turned into instants the way cronexpr does across
daylight-saving changes:

- a wall time that does not exist (the spring-forward gap) does not match: `30 2 * * *` skips
  2026-03-08 in America/New_York;
- a wall time that happens twice (the autumn repeated hour) matches twice: `30 1 * * *` runs
  at 01:30 EDT and again at 01:30 EST on 2026-11-01;
- so an hourly or per-minute schedule matches at every real hour or minute, none missed.

Used by jobspec validation (runtime/jobspec/rules.py `_check_periodic`: `check_spec`,
`load_zone`) and by the periodic planner (runtime/server/scheduler/periodic.py: `next_after`).

Invariants: nothing here reads a clock (time is a parameter); `next_after` returns the earliest
instant strictly after `after`, or None. What `load_zone` reads of the host is the time zone
database (zoneinfo) and, for "Local", /etc/localtime, as Go's `time.LoadLocation` does.
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Any, Final

from croniter import croniter  # type: ignore[import-untyped]

#: Nomad's predefined schedules (cronexpr's list; `@midnight` and `@reboot` are not in it).
_PREDEFINED: Final = {"@yearly": "0 0 0 1 1 * *", "@annually": "0 0 0 1 1 * *",
                      "@monthly": "0 0 0 1 * * *", "@weekly": "0 0 0 * * 0 *",
                      "@daily": "0 0 0 * * * *", "@hourly": "0 0 * * * * *"}

#: No zone shifts its clock by more than this at one change (Antarctica/Troll: 2 h).
_MAX_SHIFT: Final = timedelta(hours=3)

#: How far ahead a schedule is searched: a spec that matches nothing in that time (Feb 30)
#: never matches (`next_after` is None), as cronexpr answers the zero time.
_HORIZON_YEARS: Final = 8


class CronError(ValueError):
    """A cron spec Nomad would refuse."""


@lru_cache(maxsize=256)
def _seven_fields(spec: str) -> str:
    """The spec as croniter's 7-field form (second first, year last), or `CronError`."""
    text = spec.strip()
    if text.startswith("@"):
        if text not in _PREDEFINED:
            raise CronError(f"unknown predefined schedule {text!r}")
        return _PREDEFINED[text]
    fields = text.split()
    if len(fields) == 5:
        fields = ["0", *fields, "*"]
    elif len(fields) == 6:
        fields = ["0", *fields]
    elif len(fields) != 7:
        raise CronError(f"expected 5 to 7 fields, got {len(fields)}")
    # cronexpr's `?` is `*`; croniter wants it spelled so.
    seven = " ".join("*" if f == "?" else f for f in fields)
    if not croniter.is_valid(seven, second_at_beginning=True):
        raise CronError("syntax error in cron expression")
    return seven


def check_spec(spec: str) -> None:
    """Raise `CronError` unless `spec` is a cron spec Nomad accepts."""
    _seven_fields(spec)


def load_zone(name: str) -> tzinfo:
    """Nomad's `time.LoadLocation`: "" and "UTC" are UTC, "Local" is this host's zone."""
    if name in ("", "UTC"):
        return UTC
    if name == "Local":
        try:
            with open("/etc/localtime", "rb") as f:
                return zoneinfo.ZoneInfo.from_file(f)
        except OSError:
            return UTC
    if not re.fullmatch(r"[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*", name):
        raise CronError(f"unknown time zone {name}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise CronError(f"unknown time zone {name}") from None


def _instants(wall: datetime, zone: tzinfo) -> list[datetime]:
    """The UTC instants at which the zone's clock shows `wall` (naive): none in a
    spring-forward gap, two in an autumn repeated hour, one otherwise."""
    out: list[datetime] = []
    for fold in (0, 1):
        instant = wall.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == wall and instant not in out:
            out.append(instant)
    return sorted(out)


def _steady(zone: tzinfo, around: datetime) -> bool:
    """Whether the zone keeps one UTC offset within `_MAX_SHIFT` of `around`."""
    return len({(around + d).astimezone(zone).utcoffset()
                for d in (-_MAX_SHIFT, timedelta(0), _MAX_SHIFT)}) == 1


def next_after(spec: str, zone: tzinfo, after: datetime) -> datetime | None:
    """The earliest instant strictly after `after` whose wall time in `zone` matches `spec`,
    or None (no year left in the spec, or no match within `_HORIZON_YEARS`).

    Raises:
        CronError: `spec` is not a cron spec Nomad accepts.
    """
    it: Any = croniter(_seven_fields(spec), _wall(after, zone) - (
        timedelta(0) if _steady(zone, after) else _MAX_SHIFT), second_at_beginning=True)
    limit = after + timedelta(days=366 * _HORIZON_YEARS)
    best: datetime | None = None
    stop_wall: datetime | None = None
    while True:
        try:
            wall: datetime = it.get_next(datetime)
        except (StopIteration, ValueError, OverflowError):  # no year left in the spec
            return best
        if stop_wall is not None and wall > stop_wall:
            return best
        for instant in _instants(wall, zone):
            if instant > after and (best is None or instant < best):
                best = instant
                # A later wall time can still be an earlier instant only across a clock
                # change: search on as far as the largest shift, where there is one.
                stop_wall = _wall(best, zone) + (
                    timedelta(0) if _steady(zone, best) else _MAX_SHIFT)
        if best is None and wall.replace(tzinfo=UTC) > limit + _MAX_SHIFT:
            return None


def _wall(instant: datetime, zone: tzinfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None, microsecond=0)

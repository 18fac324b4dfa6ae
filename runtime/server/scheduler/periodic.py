"""Periodic jobs: the sans-io planner (when is the next launch, what is due now).

The planner reads Nomad's cron syntax (hashicorp/cronexpr: 5 fields, 6 with a trailing year,
7 with a leading second and trailing year, or `@yearly|@annually|@monthly|@weekly|@daily|
@hourly`) with croniter, evaluated on *wall-clock* times in the job's time zone, and turns them
into instants the way Nomad's cronexpr does across daylight-saving changes:

- a wall time that does not exist (the spring-forward gap) does not launch: `30 2 * * *` skips
  2026-03-08 in America/New_York;
- a wall time that happens twice (the autumn repeated hour) launches twice: `30 1 * * *` runs
  at 01:30 EDT and again at 01:30 EST on 2026-11-01;
- so an hourly or per-minute schedule launches at every real hour or minute, none missed.

Invariants: the planner never reads a clock (time is a parameter); `next_launch` returns the
earliest instant strictly after `after`; the launch time names the child job
(`<id>/periodic-<unix>`), so a launch registered twice (an agent killed between launch and
its record) is the same child and is never duplicated.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Any, Final

from croniter import croniter  # type: ignore[import-untyped]

from yurt.runtime.structs import PeriodicConfig

#: Nomad's predefined schedules (cronexpr's list; `@midnight` and `@reboot` are not in it).
_PREDEFINED: Final = {"@yearly": "0 0 0 1 1 * *", "@annually": "0 0 0 1 1 * *",
                      "@monthly": "0 0 0 1 * * *", "@weekly": "0 0 0 * * 0 *",
                      "@daily": "0 0 0 * * * *", "@hourly": "0 0 * * * * *"}

#: No zone shifts its clock by more than this at one change (Antarctica/Troll: 2 h).
_MAX_SHIFT: Final = timedelta(hours=3)

#: How far ahead a schedule is searched: a spec that matches nothing in that time (Feb 30)
#: never launches, as cronexpr answers the zero time.
_HORIZON_YEARS: Final = 8

PERIODIC_LAUNCH_SUFFIX: Final = "/periodic-"


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


def _next_one(spec: str, zone: tzinfo, after: datetime) -> datetime | None:
    """The earliest instant strictly after `after` whose wall time in `zone` matches."""
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


def next_launch(config: PeriodicConfig, after: datetime) -> datetime | None:
    """Nomad's `PeriodicConfig.Next`: the earliest launch strictly after `after` over all
    the config's specs (UTC), or None when no spec matches again."""
    zone = load_zone(config.time_zone)
    found = [t for spec in config.specs() if (t := _next_one(spec, zone, after)) is not None]
    return min(found, default=None)


def periodic_child_id(parent_id: str, launch: datetime) -> str:
    return f"{parent_id}{PERIODIC_LAUNCH_SUFFIX}{int(launch.timestamp())}"


def launch_of_child(parent_id: str, child_id: str) -> datetime | None:
    """The launch time a periodic child's ID carries, or None if it is not one."""
    prefix = parent_id + PERIODIC_LAUNCH_SUFFIX
    rest = child_id[len(prefix):] if child_id.startswith(prefix) else ""
    return datetime.fromtimestamp(int(rest), UTC) if rest.isdigit() else None


@dataclass(frozen=True)
class Plan:
    """What to do at `now` for one periodic job."""

    launch: datetime | None  # a launch due now (names the child), or None
    skipped: bool  # the due launch is skipped: prohibit_overlap and a child still runs
    wake: datetime | None  # when to look again (the next launch), None: never again


def plan(config: PeriodicConfig, last: datetime, now: datetime, child_running: bool) -> Plan:
    """The decision for one periodic job whose previous launch (or registration) was `last`.

    Launches missed while the agent was down collapse into one catch-up launch at `now`, as
    Nomad's leader forces one launch of a job whose launch it missed. With
    `prohibit_overlap`, a due launch while a previous child is not dead is skipped (and the
    schedule moves on).
    """
    due = next_launch(config, last)
    if due is None or due > now:
        return Plan(None, False, due)
    following = next_launch(config, due)
    if following is not None and following <= now:
        # More than one launch was missed (the agent was down): one catch-up launch, now.
        due = now.replace(microsecond=0)
        following = next_launch(config, due)
    if config.prohibit_overlap and child_running:
        return Plan(None, True, following)
    return Plan(due, False, following)

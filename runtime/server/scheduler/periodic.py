"""Periodic jobs: the sans-io planner (when is the next launch, what is due now).

A periodic job's specs are Nomad's cron dialect, read and evaluated in the job's time zone by
runtime/lib/cron.py (hashicorp/cronexpr's part): a launch time that does not exist on the
wall clock (the spring-forward gap) is skipped, one that happens twice (the autumn repeated
hour) launches twice. Here: `next_launch` (Nomad's `PeriodicConfig.Next`, over all the
config's specs), the child job's ID, and `plan`, the decision at one instant.

Invariants: the planner never reads a clock (time is a parameter); `next_launch` returns the
earliest instant strictly after `after`; the launch time names the child job
(`<id>/periodic-<unix>`), so a launch registered twice (an agent killed between launch and
its record) is the same child and is never duplicated. Its one read outside memory is the
time zone's: `load_zone` (lib/cron.py) reads the zone database, and /etc/localtime for
"Local", as Go's `time.LoadLocation` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from yurt.runtime.lib.cron import load_zone, next_after
from yurt.runtime.structs import PeriodicConfig

PERIODIC_LAUNCH_SUFFIX: Final = "/periodic-"


def next_launch(config: PeriodicConfig, after: datetime) -> datetime | None:
    """Nomad's `PeriodicConfig.Next`: the earliest launch strictly after `after` over all
    the config's specs (UTC), or None when no spec matches again."""
    zone = load_zone(config.time_zone)
    found = [t for spec in config.specs() if (t := next_after(spec, zone, after)) is not None]
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

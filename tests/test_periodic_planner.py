"""The sans-io periodic planner: cron in a time zone across DST changes, prohibit_overlap."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from yurt.runtime.lib.cron import CronError, check_spec
from yurt.runtime.server.scheduler.periodic import (
    launch_of_child,
    next_launch,
    periodic_child_id,
    plan,
)
from yurt.runtime.structs import PeriodicConfig

NY = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def week_of_launches(config: PeriodicConfig, start: datetime) -> list[datetime]:
    """Every launch in the week after `start`, by stepping a simulated clock from wake-up
    to wake-up as the dispatcher does (nothing running, so nothing skipped)."""
    launches: list[datetime] = []
    last = now = start
    end = start + timedelta(days=7)
    while True:
        decision = plan(config, last, now, child_running=False)
        if decision.launch is not None:
            launches.append(decision.launch)
            last = decision.launch
        if decision.wake is None or decision.wake > end:
            return launches
        now = decision.wake


def local(ts: list[datetime]) -> list[str]:
    return [t.astimezone(NY).strftime("%m-%d %H:%M %Z") for t in ts]


def test_spring_forward_week_skips_the_missing_0230_as_nomad() -> None:
    config = PeriodicConfig(cron="30 2 * * *", time_zone="America/New_York")
    launches = week_of_launches(config, utc(2026, 3, 5, 12))
    assert local(launches) == ["03-06 02:30 EST", "03-07 02:30 EST", "03-09 02:30 EDT",
                               "03-10 02:30 EDT", "03-11 02:30 EDT", "03-12 02:30 EDT"]


def test_fall_back_week_runs_the_repeated_0130_twice_as_nomad() -> None:
    config = PeriodicConfig(cron="30 1 * * *", time_zone="America/New_York")
    launches = week_of_launches(config, utc(2026, 10, 29, 12))
    assert local(launches) == ["10-30 01:30 EDT", "10-31 01:30 EDT", "11-01 01:30 EDT",
                               "11-01 01:30 EST", "11-02 01:30 EST", "11-03 01:30 EST",
                               "11-04 01:30 EST", "11-05 01:30 EST"]
    assert launches[3] - launches[2] == timedelta(hours=1)


@pytest.mark.parametrize(("start", "distinct_wall_hours"), [(utc(2026, 3, 5), 7 * 24),
                                                            (utc(2026, 10, 29), 7 * 24 - 1)])
def test_hourly_schedule_misses_no_real_hour_across_dst(start: datetime,
                                                        distinct_wall_hours: int) -> None:
    config = PeriodicConfig(cron="0 * * * *", time_zone="America/New_York")
    launches = week_of_launches(config, start)
    # One launch per real hour, always exactly an hour apart; in autumn two of them show the
    # same wall-clock hour (01:00 EDT and 01:00 EST), in spring 02:00 never shows.
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(launches))
    assert len(launches) == 7 * 24
    wall_hours = {(t.astimezone(NY).date(), t.astimezone(NY).hour) for t in launches}
    assert len(wall_hours) == distinct_wall_hours


def test_prohibit_overlap_skips_while_a_child_runs_and_moves_on() -> None:
    config = PeriodicConfig(cron="0 */6 * * *", prohibit_overlap=True,
                            time_zone="America/New_York")
    start = utc(2026, 3, 7, 0)
    # A child launched at each launch keeps running 10 hours: every launch that falls while
    # it runs is skipped; the schedule is never stalled.
    launched: list[datetime] = []
    skipped: list[datetime] = []
    last = now = start
    for _ in range(7 * 4 + 2):
        running = bool(launched) and now < launched[-1] + timedelta(hours=10)
        decision = plan(config, last, now, child_running=running)
        if decision.skipped:
            skipped.append(now)
            last = now
        if decision.launch is not None:
            launched.append(decision.launch)
            last = decision.launch
        assert decision.wake is not None
        now = decision.wake
    assert launched
    assert skipped
    assert all(b - a >= timedelta(hours=10) for a, b in itertools.pairwise(launched))
    for t in skipped:
        assert any(a <= t < a + timedelta(hours=10) for a in launched)
    # Spring forward: 00:00, 06:00 EST then 12:00 EDT — wall times, five hours apart.
    assert {"03-08 06:00 EDT", "03-08 00:00 EST"} & set(local(launched + skipped))
    # Without prohibit_overlap nothing is skipped.
    config.prohibit_overlap = False
    assert plan(config, start, utc(2026, 3, 7, 5), child_running=True).launch == utc(
        2026, 3, 7, 5)


def test_missed_launches_collapse_into_one_catch_up_now() -> None:
    config = PeriodicConfig(cron="*/10 * * * *")
    one = plan(config, utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 0, 10, 30), False)
    assert (one.launch, one.wake) == (utc(2026, 1, 1, 0, 10), utc(2026, 1, 1, 0, 20))
    many = plan(config, utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 3, 7, 12), False)
    assert (many.launch, many.wake) == (utc(2026, 1, 1, 3, 7, 12), utc(2026, 1, 1, 3, 10))
    early = plan(config, utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 0, 9, 59), False)
    assert (early.launch, early.wake) == (None, utc(2026, 1, 1, 0, 10))


def test_several_crons_take_the_earliest_and_specs_that_never_match_end() -> None:
    config = PeriodicConfig(crons=["0 12 * * *", "30 6 * * *"], time_zone="Asia/Tokyo")
    assert next_launch(config, utc(2026, 5, 1, 0)) == utc(2026, 5, 1, 3)
    assert next_launch(config, utc(2026, 5, 1, 3)) == utc(2026, 5, 1, 21, 30)
    assert next_launch(PeriodicConfig(cron="0 0 30 2 *"), utc(2026, 1, 1)) is None
    assert next_launch(PeriodicConfig(cron="0 0 1 1 * 2027"), utc(2027, 6, 1)) is None
    assert plan(PeriodicConfig(cron="0 0 30 2 *"), utc(2026, 1, 1), utc(2026, 2, 1),
                False).wake is None
    assert next_launch(PeriodicConfig(cron="15 10 0 * * * *"), utc(2026, 1, 1)) == utc(
        2026, 1, 1, 0, 10, 15)


def test_child_ids_carry_the_launch_time() -> None:
    t = utc(2026, 3, 8, 7, 0)
    child = periodic_child_id("nightly", t)
    assert child == f"nightly/periodic-{int(t.timestamp())}"
    assert launch_of_child("nightly", child) == t
    assert launch_of_child("nightly", "nightly/dispatch-1-abcdef12") is None
    assert launch_of_child("night", child) is None


@pytest.mark.parametrize("spec", ["", "* * *", "@never", "60 * * * *", "* * * * 8"])
def test_bad_specs(spec: str) -> None:
    with pytest.raises(CronError):
        check_spec(spec)

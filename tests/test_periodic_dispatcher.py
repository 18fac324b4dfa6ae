"""The periodic dispatcher service under the mock clock: a simulated week of launches across a
DST change with prohibit_overlap, a catch-up after downtime, and no duplicate on restart."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import msgspec
import pytest
import trio
from trio.testing import MockClock

from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer, Registration
from yurt.runtime.server.periodic_dispatcher import PeriodicDispatcher, launch
from yurt.runtime.server.scheduler.periodic import launch_of_child
from yurt.runtime.structs import Job, Node

NY = ZoneInfo("America/New_York")
START = datetime(2026, 3, 5, 12, tzinfo=UTC)  # a week that holds the spring-forward change
RUN_FOR = timedelta(hours=10)

JOB = '''job "backup" {
  type = "batch"
  periodic {
    cron = "0 */6 * * *"
    time_zone = "America/New_York"
    prohibit_overlap = true
  }
  group "g" {
    task "t" {
      driver = "mock_driver"
      config {
        run_for = "10h"
      }
    }
  }
}
'''


def wall_clock() -> Callable[[], float]:
    """Unix time that starts at START and moves with Trio's (mock) clock."""
    origin = trio.current_time()
    return lambda: START.timestamp() + trio.current_time() - origin


async def run_like_mock_driver(server: LocalServer, log: dict[str, tuple[float, float]],
                               now: Callable[[], float]) -> None:
    """The client side, reduced to what the dispatcher observes: every allocation runs for
    RUN_FOR (the mock driver's `run_for`) and then reports `complete`."""

    async def run(alloc_id: str) -> None:
        started = now()
        await trio.sleep(RUN_FOR.total_seconds())
        alloc = server.allocs[alloc_id]
        await server.update_allocs([msgspec.structs.replace(alloc, client_status="complete")])
        log[alloc.job_id] = (started, now())

    seen: set[str] = set()
    async with trio.open_nursery() as nursery:
        while True:
            changed = server.changed
            for alloc in list(server.allocs.values()):
                if alloc.id not in seen and not alloc.is_terminal():
                    seen.add(alloc.id)
                    nursery.start_soon(run, alloc.id)
            await changed.wait()


def launches(server: LocalServer) -> list[datetime]:
    found = [launch_of_child("backup", j.id) for j in server.jobs.values()]
    return sorted(t for t in found if t is not None)


async def test_a_week_of_launches_across_spring_forward_with_prohibit_overlap(
        autojump_clock: MockClock) -> None:
    server = LocalServer(Node(id="n1", name="n1"), EventBroker())
    now = wall_clock()
    job = parse_job(JOB)
    runs: dict[str, tuple[float, float]] = {}
    async with trio.open_nursery() as nursery:
        await server.register_job(job)
        # The registration time is the first "launch" (Nomad); make it the simulated now.
        server.jobs["backup"].submit_time = int(now() * 1e9)
        nursery.start_soon(run_like_mock_driver, server, runs, now)
        await nursery.start(PeriodicDispatcher(server, now=now).run)
        await trio.sleep(timedelta(days=7).total_seconds())
        nursery.cancel_scope.cancel()

    launched = launches(server)
    local = [t.astimezone(NY) for t in launched]
    # Every 6 h slot, but a child runs 10 h: the next slot is skipped, the one after runs.
    assert {(t.hour, t.minute) for t in local} == {(0, 0), (12, 0)}
    assert len(launched) == 14
    # Children never overlap, and each ran its 10 hours to completion (but the last, still
    # running when the week ends).
    spans = sorted(runs.values())
    assert len(spans) == 13
    assert launched[-1].timestamp() > START.timestamp() + timedelta(days=7).total_seconds() - (
        RUN_FOR.total_seconds())
    assert all(end - start == RUN_FOR.total_seconds() for start, end in spans)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    # Each child started the instant its launch was due (the dispatcher slept until then).
    assert [s for s, _ in spans] == [t.timestamp() for t in launched[:-1]]
    # Spring forward: 00:00 EST then 12:00 EDT on 2026-03-08, eleven real hours apart.
    march8 = [t for t in launched if t.astimezone(NY).date().isoformat() == "2026-03-08"]
    assert march8[1] - march8[0] == timedelta(hours=11)
    # The parent is a template: never placed.
    assert server.job_allocs("backup") == []
    assert server.jobs["backup"].status == "running"


async def test_catch_up_once_after_downtime_and_no_duplicate_on_restart(
        autojump_clock: MockClock) -> None:
    server = LocalServer(Node(id="n1", name="n1"), EventBroker())
    now = wall_clock()
    job = parse_job(JOB.replace("prohibit_overlap = true", "prohibit_overlap = false"))
    await server.register_job(job)
    server.jobs["backup"].submit_time = int(now() * 1e9)
    # The agent is down for two days: no dispatcher runs.
    await trio.sleep(timedelta(days=2).total_seconds())
    dispatcher = PeriodicDispatcher(server, now=now)
    wake = await dispatcher.tick()
    (catch_up,) = launches(server)
    assert catch_up.timestamp() == int(now())  # one launch, now, for the eight missed
    assert wake is not None
    assert datetime.fromtimestamp(wake, NY).hour % 6 == 0
    # A restarted dispatcher (killed right after that launch) launches nothing again.
    assert await PeriodicDispatcher(server, now=now).tick() == wake
    assert launches(server) == [catch_up]
    # The same launch registered twice is the same child: nothing new is placed.
    allocs = len(server.allocs)
    result = await launch(server, server.jobs["backup"], catch_up)
    assert result.unchanged
    assert len(server.allocs) == allocs


async def test_a_failing_parent_neither_stops_the_dispatcher_nor_floods_the_log(
        autojump_clock: MockClock, caplog: pytest.LogCaptureFixture) -> None:
    server = LocalServer(Node(id="n1", name="n1"), EventBroker())
    now = wall_clock()
    for job_id in ("backup", "lost-zone", "refused"):
        job = parse_job(JOB.replace('"backup"', f'"{job_id}"')
                        .replace("prohibit_overlap = true", "prohibit_overlap = false"))
        await server.register_job(job)
        server.jobs[job_id].submit_time = int(now() * 1e9)
    # A zone database that lost the parent's zone (an upgrade, a slim container).
    periodic = server.jobs["lost-zone"].periodic
    assert periodic is not None
    periodic.time_zone = "Nowhere/Gone"
    register = server.register_job

    async def refusing(job: Job) -> Registration:
        if job.parent_id == "refused":
            raise OSError(28, "No space left on device")
        return await register(job)

    server.register_job = refusing  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR, "yurt.server.periodic")
    async with trio.open_nursery() as nursery:
        await nursery.start(PeriodicDispatcher(server, now=now).run)
        await trio.sleep(timedelta(days=1).total_seconds())
        nursery.cancel_scope.cancel()
    assert len(launches(server)) == 4  # every 6 h, the good parent kept its schedule
    assert [j for j in server.jobs.values() if j.parent_id in ("lost-zone", "refused")] == []
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 2
    assert any("'lost-zone'" in m and "unknown time zone Nowhere/Gone" in m for m in logged)
    assert any("'refused'" in m and "No space left on device" in m for m in logged)

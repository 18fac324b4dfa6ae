"""`SimulatedAllocRunner` under the mock clock, run by the real `Client`: the timeline its
profile draws, stops, restarts, destroy and shutdown, failures, and the same seed giving the
same run."""

from __future__ import annotations

import random

import msgspec
import pytest
import trio
import trio.testing

from tests.runtime_support import job_alloc, seconds, stopped, unix_clock
from yurt.runtime.client.allocrunner.interface import AllocRunnerError
from yurt.runtime.client.allocrunner.simulated import (
    AllocProfile,
    SimulatedAllocRunner,
    simulated_factory,
)
from yurt.runtime.client.client import Client
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.structs import Allocation

BATCH = '''job "b" {
  type = "batch"
  group "g" {
    task "one" {
      driver = "mock_driver"
    }
    task "two" {
      driver = "mock_driver"
    }
  }
}'''

SERVICE = '''job "s" {
  group "g" {
    task "web" {
      driver = "mock_driver"
    }
  }
}'''

PROFILE = AllocProfile(start_delay=(1.0, 2.0), run_time=(10.0, 20.0))


class Recorder:
    def __init__(self) -> None:
        self.updates: list[tuple[float, str, str]] = []

    def __call__(self, alloc: Allocation) -> None:
        self.updates.append((trio.current_time(), alloc.id, alloc.client_status))

    def statuses(self, alloc_id: str) -> list[str]:
        return [s for _, a, s in self.updates if a == alloc_id]


def client(record: Recorder, profile: AllocProfile = PROFILE, seed: int = 1) -> Client:
    return Client(None, EventBroker(), on_alloc_update=record,
                  factory=simulated_factory(profile, random.Random(seed),
                                            unix_clock=unix_clock))


def runner_of(c: Client, alloc_id: str) -> SimulatedAllocRunner:
    runner = c.runners[alloc_id]
    assert isinstance(runner, SimulatedAllocRunner)
    return runner


async def test_a_batch_allocation_runs_its_drawn_timeline_to_complete(
        autojump_clock: object) -> None:
    record = Recorder()
    c = client(record)
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        start = trio.current_time()
        c.sync_allocs([job_alloc(BATCH, "b1")])
        runner = runner_of(c, "b1")
        await runner.wait_done.wait()
        assert record.statuses("b1") == ["pending", "running", "complete"]
        times = [t - start for t, a, _ in record.updates]
        assert times[1] == pytest.approx(runner.start_delay)
        assert times[2] == pytest.approx(runner.start_delay + runner.run_time)
        assert 1.0 <= runner.start_delay <= 2.0
        assert 10.0 <= runner.run_time <= 20.0
        done = runner.client_alloc()
        for name in ("one", "two"):
            state = done.task_states[name]
            assert [e.type for e in state.events] == [
                "Received", "Task Setup", "Started", "Terminated"]
            assert state.state == "dead"
            assert not state.failed
            assert seconds(int(state.finished_at.timestamp() * 1e9)) == pytest.approx(
                times[2], abs=1e-3)
        nursery.cancel_scope.cancel()


async def test_a_service_runs_until_stopped_and_a_stop_kills_it(autojump_clock: object
                                                                ) -> None:
    record = Recorder()
    c = client(record)
    alloc = job_alloc(SERVICE, "s1")
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        c.sync_allocs([alloc])
        await trio.sleep(3600)
        assert record.statuses("s1") == ["pending", "running"]
        c.sync_allocs([stopped(alloc)])
        runner = runner_of(c, "s1")
        await runner.wait_done.wait()
        assert record.statuses("s1")[-1] == "complete"
        events = [e.type for e in runner.client_alloc().task_states["web"].events]
        assert events[-2:] == ["Killing", "Killed"]
        with pytest.raises(AllocRunnerError, match="should not run"):
            await runner.restart_all()
        nursery.cancel_scope.cancel()


async def test_a_drawn_failure_fails_the_allocation(autojump_clock: object) -> None:
    record = Recorder()
    c = client(record, AllocProfile(start_delay=(0, 0), run_time=(5, 5),
                                    failure_probability=1.0))
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        c.sync_allocs([job_alloc(SERVICE, "f1")])
        await runner_of(c, "f1").wait_done.wait()
        assert record.statuses("f1") == ["pending", "running", "failed"]
        state = runner_of(c, "f1").client_alloc().task_states["web"]
        assert state.failed
        assert state.events[-1].details["exit_code"] == "1"
        nursery.cancel_scope.cancel()


async def test_restart_goes_back_through_the_start_delay(autojump_clock: object) -> None:
    record = Recorder()
    c = client(record, AllocProfile(start_delay=(2, 2), run_time=(5, 5)))
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        c.sync_allocs([job_alloc(SERVICE, "r1")])
        await trio.sleep(10)
        runner = runner_of(c, "r1")
        restarted_at = trio.current_time()
        await runner.restart_all()
        await trio.sleep(1)
        assert runner.client_status() == "pending"
        await trio.sleep(1.5)
        assert runner.client_status() == "running"
        state = runner.client_alloc().task_states["web"]
        assert state.restarts == 1
        assert seconds(int(state.started_at.timestamp() * 1e9)) == pytest.approx(
            restarted_at + 2, abs=1e-3)
        await runner.signal("web", "SIGHUP")
        assert runner.client_alloc().task_states["web"].events[-1].type == "Signaling"
        with pytest.raises(AllocRunnerError):
            await runner.restart_task("nope")
        nursery.cancel_scope.cancel()


async def test_destroy_and_shutdown_end_the_runner(autojump_clock: object) -> None:
    record = Recorder()
    c = client(record)
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        c.sync_allocs([job_alloc(SERVICE, "d1"), job_alloc(SERVICE, "k1")])
        await trio.sleep(60)
        c.sync_allocs([job_alloc(SERVICE, "k1")])  # d1 gone from the server: destroyed
        await trio.testing.wait_all_tasks_blocked()
        assert "d1" not in c.runners
        keep = runner_of(c, "k1")
        await c.shutdown()
        assert keep.shutdown_done.is_set()
        assert keep.wait_done.is_set()
        assert keep.client_status() == "running"  # a shutdown leaves the state as it is
        nursery.cancel_scope.cancel()


async def test_a_stopped_allocation_given_a_runner_reports_its_end_without_starting(
        autojump_clock: object) -> None:
    record = Recorder()
    c = client(record)
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        c.sync_allocs([msgspec.structs.replace(stopped(job_alloc(SERVICE, "t1")),
                                               client_status="running")])
        await runner_of(c, "t1").wait_done.wait()
        assert record.statuses("t1") == ["complete"]
        nursery.cancel_scope.cancel()


def run_seeded(seed: int) -> list[tuple[float, str, str]]:
    async def main() -> list[tuple[float, str, str]]:
        record = Recorder()
        c = client(record, AllocProfile(start_delay=(0, 3), run_time=(1, 30),
                                        failure_probability=0.3), seed=seed)
        async with trio.open_nursery() as nursery:
            await nursery.start(c.run)
            c.sync_allocs([job_alloc(BATCH, f"a{i}") for i in range(20)])
            await c.wait_all()
            nursery.cancel_scope.cancel()
        return record.updates

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_same_seed_gives_the_same_run_and_another_seed_another() -> None:
    # Sorted: updates at the same instant arrive in whatever order Trio runs the runners;
    # each allocation's timeline is the seed's.
    first, again, other = (sorted(run_seeded(s)) for s in (7, 7, 8))
    assert first == again
    assert first != other
    assert {s for _, _, s in first} == {"pending", "running", "complete", "failed"}


async def test_a_replacement_waits_for_the_allocation_it_replaces(autojump_clock: object
                                                                  ) -> None:
    record = Recorder()
    c = client(record, AllocProfile(start_delay=(1, 1), run_time=(30, 30)))
    first = job_alloc(BATCH, "b1")
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        c.sync_allocs([first])
        await trio.sleep(5)
        replacement = msgspec.structs.replace(job_alloc(BATCH, "b2"), previous_allocation="b1")
        c.sync_allocs([first, replacement])
        await runner_of(c, "b2").wait_done.wait()
        order = [(round(t), a, s) for t, a, s in record.updates if s != "pending"]
        # b1 completes at 31 s; only then b2 starts (its delay, 1 s) and runs its 30 s.
        assert order == [(1, "b1", "running"), (31, "b1", "complete"),
                         (32, "b2", "running"), (62, "b2", "complete")]
        nursery.cancel_scope.cancel()

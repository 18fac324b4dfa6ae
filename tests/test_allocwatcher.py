"""Previous-alloc and preemption watchers under the mock clock (layer 1)."""

from __future__ import annotations

import msgspec
import pytest
import trio
from trio.testing import MockClock

from tests.runtime_support import job_alloc, stopped, unix_clock
from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client.allocwatcher import GroupWatcher
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.structs import Allocation
from yurt.store import MemoryStateDB

SLOW_TO_STOP = '''job "j" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      kill_timeout = "30s"  # the driver takes its time to stop, within the kill timeout
      config {
        run_for    = "1h"
        kill_after = "30s"
      }
    }
  }
}'''


def client_with(driver: MockDriver) -> Client:
    return Client(AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"mock_driver": driver},
                                    unix_clock=unix_clock), EventBroker())


def starts(driver: MockDriver) -> list[tuple[float, str]]:
    return [(t, task_id.split("/")[0]) for t, kind, task_id in driver.log if kind == "start"]


async def test_replacement_waits_for_the_previous_alloc_to_be_dead(
        autojump_clock: MockClock) -> None:
    driver = MockDriver(unix_clock)
    client = client_with(driver)
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        old = job_alloc(SLOW_TO_STOP, alloc_id="old")
        client.add_alloc(old)
        await trio.sleep(10)
        new = msgspec.structs.replace(job_alloc(SLOW_TO_STOP, alloc_id="new"),
                                      previous_allocation="old")
        runner = client.add_alloc(new)
        client.update_alloc(stopped(old))  # a desired stop alone does not release it
        await trio.sleep(20)
        assert starts(driver) == [(0.0, "old")]
        assert runner.watcher.waiting
        assert runner.client_alloc().client_description == (
            "Waiting for previous or preempted allocations to stop")
        await trio.sleep(15)  # the old task took 30 s to stop, at 40 s
        assert starts(driver) == [(0.0, "old"), (40.0, "new")]
        nursery.cancel_scope.cancel()


async def test_preempting_alloc_waits_for_every_preempted_one(
        autojump_clock: MockClock) -> None:
    driver = MockDriver(unix_clock)
    client = client_with(driver)
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        victims = [job_alloc(SLOW_TO_STOP.replace('"30s"', f'"{d}s"'), alloc_id=name)
                   for name, d in (("v1", 5), ("v2", 25))]
        for v in victims:
            client.add_alloc(v)
        await trio.sleep(1)
        new: Allocation = msgspec.structs.replace(job_alloc(SLOW_TO_STOP, alloc_id="new"),
                                                  preempted_allocations=["v1", "v2"])
        client.add_alloc(new)
        for v in victims:
            client.update_alloc(msgspec.structs.replace(stopped(v), desired_status="evict",
                                                        desired_description="Preempted"))
        await trio.sleep(100)
        assert starts(driver)[-1] == (26.0, "new")  # after v2, the slower one, at 26 s
        evicted = client.runners["v1"].client_alloc()
        assert evicted.client_description == "Preempted"
        killing = next(e for e in evicted.task_states["t"].events if e.type == "Killing")
        assert killing.display_message == "Preempted"
        nursery.cancel_scope.cancel()


async def test_without_anything_to_wait_for_the_watcher_returns_at_once(
        autojump_clock: MockClock) -> None:
    watcher = GroupWatcher()
    assert watcher.is_noop
    start = trio.current_time()
    await watcher.wait()
    assert trio.current_time() == start


async def test_a_restored_replacement_still_waits_for_the_previous_alloc(
        autojump_clock: MockClock) -> None:
    driver = MockDriver(unix_clock)
    db = MemoryStateDB()

    def client() -> Client:
        return Client(AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                                        unix_clock=unix_clock), EventBroker())

    old = job_alloc(SLOW_TO_STOP, alloc_id="old")
    new = msgspec.structs.replace(job_alloc(SLOW_TO_STOP, alloc_id="new"),
                                  previous_allocation="old")
    first = client()
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        first.add_alloc(old)
        await trio.sleep(10)
        first.add_alloc(new)  # waits: the old one was not even told to stop yet
        await trio.sleep(1)
        await first.shutdown()  # agent restart: tasks keep running
        nursery.cancel_scope.cancel()
    second = client()
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
        await second.restore_alloc(stopped(old))  # oldest first, as the agent restores
        runner = await second.restore_alloc(new)
        assert runner.watcher.previous is second.runners["old"]
        await trio.sleep(60)
        stops = [t for t, kind, task_id in driver.log if kind == "stop"]
        new_starts = [t for t, kind, task_id in driver.log
                      if kind == "start" and task_id.startswith("new/")]
        assert len(new_starts) == 1
        assert new_starts[0] >= stops[0]  # only once the old task was stopped
        nursery.cancel_scope.cancel()


class FailingBroadcaster:
    def listen(self) -> None:
        raise RuntimeError("broadcaster failed")


class BrokenRunner:
    """Just enough of an alloc runner for a watcher, whose broadcaster fails."""

    id = "broken"
    broadcaster = FailingBroadcaster()


async def test_group_watcher_errors_are_not_exception_groups() -> None:
    watcher = GroupWatcher(BrokenRunner(), preempted=[])  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="broadcaster failed"):
        await watcher.wait()
    assert not watcher.waiting

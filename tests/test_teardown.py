"""Destroy, shutdown and client teardown under one deadline, with a driver that does not
report a task's exit in time (layer 1: mock driver, in-memory store, `autojump_clock`)."""

from __future__ import annotations

import msgspec
import trio
from trio.testing import MockClock

from tests.runtime_support import harness, job_alloc, stopped, types, unix_clock
from yurt.hooks.base import AllocDestroyHook, AllocShutdownHook
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.errors import StateError
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.structs import TaskState
from yurt.store import MemoryStateDB

#: A task whose driver takes an hour to stop it, within a kill timeout of 30 s: the task
#: runner's own bound (timeout + grace) is longer than the callers' deadlines below.
HUNG = '''job "j" {
  type = "service"
  group "g" {
    task "t" {
      driver = "mock_driver"
      kill_timeout = "30s"
      config {
        run_for    = "1h"
        kill_after = "1h"
      }
    }
  }
}'''


class Recorder(AllocDestroyHook, AllocShutdownHook):
    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def destroy(self) -> None:
        await trio.lowlevel.checkpoint()
        self.calls.append("destroy")

    async def shutdown(self) -> None:
        await trio.lowlevel.checkpoint()
        self.calls.append("shutdown")


async def test_destroy_keeps_the_callers_deadline_tail_included(
        autojump_clock: MockClock) -> None:
    hook = Recorder()
    async with harness(alloc_hooks=(hook,)) as h:
        ar = h.start(job_alloc(HUNG))
        await trio.sleep(1)
        start = trio.current_time()
        with trio.move_on_after(30):  # the agent's shutdown timeout
            await ar.destroy_and_wait()
        assert trio.current_time() - start <= 30
        assert ar.destroyed.is_set()
        assert ar.wait_done.is_set()
        assert hook.calls == ["destroy"]
        assert await h.db.get_all_allocations() == ([], {})
        assert await h.db.get_task_runner_state("a1", "t") == (None, None)


async def test_destroy_without_a_deadline_is_bounded_by_the_slowest_kill(
        autojump_clock: MockClock) -> None:
    hook = Recorder()
    async with harness(alloc_hooks=(hook,)) as h:
        ar = h.start(job_alloc(HUNG))
        await trio.sleep(1)
        ar.destroy()
        with trio.fail_after(ar.task_runners["t"].kill_bound() + 5):
            await ar.destroyed.wait()
        assert hook.calls == ["destroy"]
        assert types(ar.task_runners["t"])[-2:] == ["Terminated", "Killed"]
        assert await h.db.get_all_allocations() == ([], {})


async def test_shutdown_during_a_hung_stop_keeps_its_deadline(
        autojump_clock: MockClock) -> None:
    hook = Recorder()
    async with harness(alloc_hooks=(hook,)) as h:
        alloc = job_alloc(HUNG)
        ar = h.start(alloc)
        await trio.sleep(1)
        ar.update(stopped(alloc))
        await trio.sleep(1)  # the stop hangs in the driver
        start = trio.current_time()
        with trio.move_on_after(10):
            await ar.shutdown_and_wait()
        assert trio.current_time() - start <= 10
        assert ar.shutdown_done.is_set()
        assert ar.wait_done.is_set()
        assert hook.calls == ["shutdown"]


async def test_client_destroy_all_keeps_the_agents_deadline(autojump_clock: MockClock) -> None:
    hook = Recorder()
    db = MemoryStateDB()
    client = Client(AllocRunnerConfig(state_db=db, drivers={"mock_driver": MockDriver(unix_clock)},
                                      unix_clock=unix_clock, alloc_hooks=(hook,)),
                    EventBroker())
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        for name in ("a1", "a2"):
            client.add_alloc(job_alloc(HUNG, alloc_id=name))
        await trio.sleep(1)
        start = trio.current_time()
        with trio.move_on_after(30, shield=True):  # as the agent in dev mode
            await client.destroy_all()
        assert trio.current_time() - start <= 30
        assert hook.calls == ["destroy", "destroy"]
        assert client.runners == {}
        assert await db.get_all_allocations() == ([], {})
        nursery.cancel_scope.cancel()


async def test_a_kill_interrupts_a_start_that_hangs_in_the_driver(
        autojump_clock: MockClock) -> None:
    async with harness() as h:
        alloc = job_alloc(HUNG.replace('run_for    = "1h"',
                                       'run_for = "1h"\n start_block_for = "1h"'))
        ar = h.start(alloc)
        await trio.sleep(1)
        tr = ar.task_runners["t"]
        assert tr.handle is None  # still starting
        ar.update(stopped(alloc))
        with trio.fail_after(10):
            await ar.wait_done.wait()
        assert tr.state.state == "dead"
        assert h.task_log("start") == []  # the start never completed
        assert "Started" not in types(tr)
        assert ar.client_alloc().client_status == "complete"


class FailsKillingWrites(MemoryStateDB):
    """The state DB fails the write of a `Killing` event."""

    async def put_task_state(self, alloc_id: str, task: str, state: TaskState) -> None:
        if state.events and state.events[-1].type == "Killing":
            await trio.lowlevel.checkpoint()
            raise StateError("disk on fire")
        await super().put_task_state(alloc_id, task, state)


async def test_a_failing_kill_is_logged_and_never_an_exception_group(
        autojump_clock: MockClock) -> None:
    job = '''job "j" {
  type = "service"
  group "g" {
    task "a" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
    task "b" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''
    alloc = job_alloc(job)
    config = AllocRunnerConfig(state_db=FailsKillingWrites(),
                               drivers={"mock_driver": MockDriver(unix_clock)},
                               unix_clock=unix_clock)
    async with trio.open_nursery() as nursery:
        ar = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(ar.run)
        await trio.sleep(1)
        ar.update(stopped(alloc))
        with trio.fail_after(60):
            await ar.wait_done.wait()
        assert {tr.state.state for tr in ar.task_runners.values()} == {"dead"}


class FailsOneDelete(MemoryStateDB):
    async def delete_allocation_bucket(self, alloc_id: str) -> None:
        if alloc_id == "a1":
            await trio.lowlevel.checkpoint()
            raise StateError("disk on fire")
        await super().delete_allocation_bucket(alloc_id)


async def test_client_teardowns_log_failures_and_never_raise_exception_groups(
        autojump_clock: MockClock) -> None:
    hook = Recorder()
    db = FailsOneDelete()
    client = Client(AllocRunnerConfig(state_db=db, drivers={"mock_driver": MockDriver(unix_clock)},
                                      unix_clock=unix_clock, alloc_hooks=(hook,)),
                    EventBroker())
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        for name in ("a1", "a2"):
            client.add_alloc(job_alloc(HUNG, alloc_id=name))
        await trio.sleep(1)
        await client.destroy_all()  # a1's state cannot be deleted: logged, a2 unaffected
        assert hook.calls == ["destroy", "destroy"]
        (left,), _ = await db.get_all_allocations()
        assert left.id == "a1"
        assert client.runners == {}
        nursery.cancel_scope.cancel()


async def test_a_kill_for_a_task_gone_from_an_update_lives_in_the_run_loop(
        autojump_clock: MockClock) -> None:
    two = HUNG.replace('''    task "t" {''', '''    task "gone" {
      driver = "mock_driver"
      kill_timeout = "30s"
      config {
        run_for    = "1h"
        kill_after = "1h"
      }
    }
    task "t" {''')
    alloc = job_alloc(two)
    db = MemoryStateDB()
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": MockDriver(unix_clock)},
                               unix_clock=unix_clock)
    async with trio.open_nursery() as lent, trio.open_nursery() as own:
        ar = AllocRunner(alloc, config, nursery=lent)
        own.start_soon(ar.run)
        await trio.sleep(1)
        ar.update(msgspec.structs.replace(job_alloc(HUNG), alloc_modify_index=5))
        await trio.sleep(1)  # the kill of "gone" hangs in the driver
        assert not ar.task_runners["gone"].done.is_set()  # still being killed
        assert not lent.child_tasks  # yet nothing runs in the borrowed nursery
        with trio.fail_after(ar.task_runners["gone"].kill_bound()):
            await ar.task_runners["gone"].done.wait()
        assert types(ar.task_runners["gone"])[-1] == "Killed"
        own.cancel_scope.cancel()

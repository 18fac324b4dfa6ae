"""A stop signals its tasks in the step that saw it persisted, and once (layer 1 with a driver
that signals without a checkpoint over the mock driver, under `autojump_clock`; layer 2 with
raw_exec and real processes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from tests.runtime_support import (
    eventually,
    harness,
    job_alloc,
    stopped,
    types,
    unix_clock,
    until_running,
)
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.drivers.protocol import ExitResult, Fingerprint, TaskConfig
from yurt.runtime.client.drivers.rawexec import RawExecDriver
from yurt.runtime.structs import Allocation, TaskHandle
from yurt.store import MemoryStateDB
from yurt.store.base import alloc_key, decode

SERVICE = '''job "j" {
  type = "service"
  group "g" {
    task "t" {
      driver = "mock_driver"
      config {
        run_for = "1h"
      }
    }
  }
}'''

LEADER = '''job "j" {
  type = "service"
  group "g" {
    task "lead" {
      driver = "mock_driver"
      leader = true
      config {
        run_for    = "1h"
        kill_after = "2s"
      }
    }
    task "follow" {
      driver = "mock_driver"
      config {
        run_for = "1h"
      }
    }
  }
}'''


class AtOnceDriver:
    """The mock driver plus `begin_stop`, which records what the runtime looked like when it
    was called (the mock's own `stop_task` still ends the task)."""

    def __init__(self, db: MemoryStateDB) -> None:
        self.inner = MockDriver(unix_clock)
        self.db = db
        self.runners: list[AllocRunner] = []
        #: (task id, the stop persisted by then, any task's exit processed by then).
        self.begun: list[tuple[str, bool, bool]] = []
        self.stops: list[str] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def begin_stop(self, task_id: str, kill_timeout: int, signal: str) -> bool:
        alloc_id = task_id.split("/")[0]
        saved = decode(self.db._data.get(alloc_key(alloc_id, "alloc")), Allocation)
        exited = any("Terminated" in types(tr) for ar in self.runners
                     for tr in ar.task_runners.values())
        self.begun.append((task_id, saved is not None and saved.desired_status == "stop",
                           exited))
        return True

    async def start_task(self, config: TaskConfig) -> TaskHandle:
        return await self.inner.start_task(config)

    async def wait_task(self, task_id: str) -> ExitResult:
        return await self.inner.wait_task(task_id)

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        self.stops.append(task_id)
        await self.inner.stop_task(task_id, kill_timeout, signal)

    async def destroy_task(self, task_id: str, *, force: bool) -> None:
        await self.inner.destroy_task(task_id, force=force)

    async def signal_task(self, task_id: str, signal: str) -> None:
        await self.inner.signal_task(task_id, signal)

    async def recover_task(self, handle: TaskHandle) -> None:
        await self.inner.recover_task(handle)

    async def fingerprint(self) -> AsyncIterator[Fingerprint]:
        async for fp in self.inner.fingerprint():
            yield fp


def at_once() -> tuple[AtOnceDriver, AllocRunnerConfig]:
    """A driver that records its at-once stops, and a runner config over it and its store."""
    db = MemoryStateDB()
    driver = AtOnceDriver(db)
    return driver, AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                                     unix_clock=unix_clock)


async def test_a_job_stop_signals_every_task_before_any_exit_is_processed(
        autojump_clock: MockClock) -> None:
    driver, config = at_once()
    async with trio.open_nursery() as nursery:
        runners = [AllocRunner(job_alloc(SERVICE, f"a{i}"), config, nursery=nursery)
                   for i in range(20)]
        driver.runners = runners
        for ar in runners:
            nursery.start_soon(ar.run)
        for ar in runners:
            await until_running(ar, "t")
        for ar in runners:  # what the server watch does: every update in one step
            ar.update(stopped(ar.alloc))
        with trio.fail_after(60):
            for ar in runners:
                await ar.wait_done.wait()
    # One signal per task, each after its stop was persisted, all before any exit was seen.
    assert sorted(task_id.split("/")[0] for task_id, _, _ in driver.begun) == sorted(
        ar.id for ar in runners)
    assert all(persisted and not exited for _, persisted, exited in driver.begun)
    for ar in runners:
        tr = ar.task_runners["t"]
        assert types(tr)[-3:] == ["Killing", "Terminated", "Killed"]
        assert types(tr).count("Killing") == 1
        assert ar.alloc_state().client_status == "complete"


async def test_only_the_leader_is_signalled_at_once_the_others_after_it(
        autojump_clock: MockClock) -> None:
    driver, config = at_once()
    async with trio.open_nursery() as nursery:
        ar = AllocRunner(job_alloc(LEADER), config, nursery=nursery)
        driver.runners = [ar]
        nursery.start_soon(ar.run)
        await until_running(ar, "lead")
        await until_running(ar, "follow")
        ar.update(stopped(ar.alloc))
        with trio.fail_after(60):
            await ar.wait_done.wait()
    # The leader at once; the follower only once the leader's exit was processed (when the
    # dead leader's kill signals it, as a stop's second wave would).
    begun = [(task_id.split("/")[1], exited) for task_id, _, exited in driver.begun]
    assert begun[0] == ("lead", False)
    assert all(exited for name, exited in begun if name == "follow")
    lead, follow = ar.task_runners["lead"], ar.task_runners["follow"]
    lead_end = next(e.time for e in lead.state.events if e.type == "Terminated")
    follow_killing = next(e.time for e in follow.state.events if e.type == "Killing")
    assert follow_killing >= lead_end  # the leader's kill (2 s) ended first
    assert types(follow)[-3:] == ["Killing", "Terminated", "Killed"]


async def test_a_mock_driver_without_begin_stop_takes_the_runners_path(
        autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.start(job_alloc(SERVICE))
        await until_running(ar, "t")
        ar.update(stopped(ar.alloc))
        with trio.fail_after(60):
            await ar.wait_done.wait()
        assert types(ar.task_runners["t"])[-3:] == ["Killing", "Terminated", "Killed"]
        assert [kind for _, kind, _ in h.driver.log] == ["start", "stop"]


@pytest.mark.slow
async def test_a_raw_exec_stop_begun_at_once_is_not_signalled_again(tmp_path: Path) -> None:
    """After `begin_stop`, the run's `stop_task` only waits out the kill timeout and SIGKILLs
    (a second SIGTERM is, for many programs, "quit now")."""
    task_dir = tmp_path / "alloc" / "a1" / "t"
    task_dir.mkdir(parents=True)
    terms = tmp_path / "terms"
    script = f"trap 'echo term >> {terms}' TERM; : > {terms}; while :; do sleep 0.02; done"
    config = TaskConfig(id="a1/t/00000001", name="t", alloc_id="a1", job_id="j",
                        task_group="g", driver_config={"command": "/bin/sh",
                                                       "args": ["-c", script]},
                        task_dir=task_dir)
    driver = RawExecDriver()
    with trio.fail_after(30):
        await driver.start_task(config)
        await eventually(terms.exists)  # the trap is set
        assert driver.begin_stop(config.id, 500_000_000, "SIGTERM")
        await eventually(lambda: "term" in terms.read_text())
        await driver.stop_task(config.id, 500_000_000, "SIGTERM")
        result = await driver.wait_task(config.id)
        await driver.destroy_task(config.id, force=True)
    assert terms.read_text().split() == ["term"]
    assert result.exit_code == 137  # SIGKILLed when the timeout from the first signal ran out
    assert not driver.begin_stop(config.id, 500_000_000, "SIGTERM")  # gone: nothing sent

"""The `AllocRunner` protocol and factory (runtime/client/allocrunner/interface.py).

- The interface module loads none of the concrete runner, task runner, hooks or drivers: a
  consumer implements a runner without them (checked in a fresh interpreter).
- `EmptyAllocRunner` below is the shortest complete implementation (Nomad's
  `TestEmptyAllocRunner`): what a consumer must provide. mypy checks it against the protocol,
  and the client runs it: started, handed updates, destroyed when the server drops it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import msgspec
import trio

from tests.runtime_support import job_alloc, stopped
from yurt.runtime.client.allocrunner.broadcaster import AllocBroadcaster
from yurt.runtime.client.allocrunner.interface import (
    AllocRunner,
    AllocState,
    RunnerSetup,
)
from yurt.runtime.client.client import Client
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.structs import Allocation, TaskEvent
from yurt.store.protocol import SavedTask

JOB = '''job "j" {
  group "g" {
    task "t" {
      driver = "mock_driver"
    }
  }
}'''


def test_the_interface_imports_no_concrete_runner_hook_or_driver() -> None:
    code = ("import sys, yurt.runtime.client.allocrunner.interface as i; "
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('yurt'))))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                            text=True).stdout.split()
    assert "yurt.runtime.client.allocrunner.interface" in loaded
    heavy = [m for m in loaded if m.startswith((
        "yurt.runtime.client.allocrunner.runner", "yurt.runtime.client.allocrunner.teardown",
        "yurt.runtime.client.taskrunner", "yurt.hooks", "yurt.runtime.client.drivers",
        "yurt.runtime.client.pluginmanager", "yurt.runtime.client.client", "yurt.store.sqlite"))]
    assert heavy == []


class EmptyAllocRunner:
    """The least an `AllocRunner` must do: report running, take updates, report its end
    when stopped, stop."""

    def __init__(self, alloc: Allocation, setup: RunnerSetup) -> None:
        self._alloc = alloc
        self._setup = setup
        self._status = "running"
        self.broadcaster: AllocBroadcaster[Allocation] = AllocBroadcaster()
        self.wait_done = trio.Event()
        self.destroyed = trio.Event()
        self.shutdown_done = trio.Event()

    @property
    def id(self) -> str:
        return self._alloc.id

    @property
    def alloc(self) -> Allocation:
        return self._alloc

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        task_status.started()
        self._setup.on_alloc_state_updated(self.client_alloc())
        await self.destroyed.wait()
        self.wait_done.set()

    async def restore(self, saved: Mapping[str, SavedTask] | None = None) -> None:
        await trio.lowlevel.checkpoint()

    def update(self, alloc: Allocation) -> None:
        self._alloc = alloc
        if alloc.is_terminal() and self._status == "running":
            self._status = "complete"
            self._setup.on_alloc_state_updated(self.client_alloc())
            self.broadcaster.send(self.client_alloc())

    def alloc_state(self) -> AllocState:
        return AllocState(self._status)

    def client_alloc(self) -> Allocation:
        return msgspec.structs.replace(self._alloc, client_status=self._status)

    def client_status(self) -> str:
        return self._status

    def destroy(self) -> None:
        self.broadcaster.close()
        self.destroyed.set()
        self.shutdown_done.set()
        self.wait_done.set()  # a runner destroyed before it ran never will

    async def destroy_and_wait(self) -> None:
        self.destroy()
        await trio.lowlevel.checkpoint()

    def shutdown(self) -> None:
        self.shutdown_done.set()

    async def shutdown_and_wait(self) -> None:
        self.shutdown()
        await trio.lowlevel.checkpoint()

    async def restart_task(self, name: str, event: TaskEvent | None = None) -> None:
        await trio.lowlevel.checkpoint()

    async def restart_running(self, event: TaskEvent | None = None) -> None:
        await trio.lowlevel.checkpoint()

    async def restart_all(self, event: TaskEvent | None = None) -> None:
        await trio.lowlevel.checkpoint()

    async def signal(self, task: str | None, signal: str) -> None:
        await trio.lowlevel.checkpoint()

    def stop_bound(self) -> float:
        return 0.0


def test_the_empty_runner_is_an_alloc_runner_and_a_broken_one_is_not(tmp_path: Path
                                                                     ) -> None:
    # Type-checked as a consumer's code would be (one mypy run, two modules): the protocol
    # is the contract.
    head = ("from yurt.runtime.client.allocrunner.interface import AllocRunnerFactory\n"
            "from tests.test_allocrunner_interface import EmptyAllocRunner\n")
    (tmp_path / "good.py").write_text(head + "f: AllocRunnerFactory = EmptyAllocRunner\n")
    (tmp_path / "broken.py").write_text(
        head + "class NoStop(EmptyAllocRunner):\n"
        "    stop_bound = None  # type: ignore[assignment]\n"
        "f: AllocRunnerFactory = NoStop\n")
    root = Path(__file__).resolve().parent.parent
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-incremental",
         str(tmp_path / "good.py"), str(tmp_path / "broken.py")], cwd=root,
        capture_output=True, text=True,
        env={**os.environ, "MYPYPATH": str(root / ".venv/typecheck")})
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, checked.stdout
    assert "broken.py" in errors[0]
    assert "type[NoStop]" in errors[0]


async def test_the_client_runs_a_consumer_runner_through_its_factory(
        autojump_clock: object) -> None:
    made: list[EmptyAllocRunner] = []
    updates: list[Allocation] = []

    def factory(alloc: Allocation, setup: RunnerSetup) -> AllocRunner:
        runner = EmptyAllocRunner(alloc, setup)
        made.append(runner)
        return runner

    client = Client(None, EventBroker(), on_alloc_update=updates.append, factory=factory)
    first = job_alloc(JOB, "a1")
    replacement = msgspec.structs.replace(job_alloc(JOB, "a2"), previous_allocation="a1")
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        client.sync_allocs([first])
        await trio.testing.wait_all_tasks_blocked()
        assert [(u.id, u.client_status) for u in updates] == [("a1", "running")]

        newer = msgspec.structs.replace(first, alloc_modify_index=7)
        client.sync_allocs([newer])
        assert made[0].alloc.alloc_modify_index == 7

        # The replacement's factory call is told which runner it replaces; the stop of
        # the one it replaces reaches the client as its end.
        client.sync_allocs([stopped(newer, 8), replacement])
        await trio.testing.wait_all_tasks_blocked()
        assert made[1].id == "a2"
        assert made[1]._setup.previous is made[0]
        assert [(u.id, u.client_status) for u in updates] == [
            ("a1", "running"), ("a1", "complete"), ("a2", "running")]

        client.sync_allocs([replacement])  # the server dropped a1: destroyed here
        await trio.testing.wait_all_tasks_blocked()
        assert made[0].destroyed.is_set()
        assert made[0].wait_done.is_set()
        assert sorted(client.runners) == ["a2"]
        nursery.cancel_scope.cancel()


async def test_a_factory_refusal_is_reported_as_a_failed_allocation(
        autojump_clock: object) -> None:
    from yurt.runtime.client.allocrunner.interface import AllocRunnerError

    def refuse(alloc: Allocation, setup: RunnerSetup) -> AllocRunner:
        raise AllocRunnerError("no such driver here")

    updates: list[Allocation] = []
    client = Client(None, EventBroker(), on_alloc_update=updates.append, factory=refuse)
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        client.sync_allocs([job_alloc(JOB, "bad")])
        assert [(u.id, u.client_status, u.client_description) for u in updates] == [
            ("bad", "failed", "no such driver here")]
        assert client.runners == {}
        nursery.cancel_scope.cancel()

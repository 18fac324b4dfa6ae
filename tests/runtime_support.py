"""Helpers for the runtime tests: jobs from HCL snippets, a virtual unix clock, a harness."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import msgspec
import trio

from yurt.hooks.base import Hook
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.taskrunner.runner import TaskRunner
from yurt.runtime.errors import DriverError
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.structs import (
    Allocation,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
    TaskHandle,
)
from yurt.store import MemoryStateDB

EPOCH = 1_800_000_000 * 10**9


async def eventually(predicate: Callable[[], bool], *, interval: float = 0.01) -> None:
    """Wait until `predicate()` holds. Only for OS state that offers no event to wait on
    (file contents, /proc); callers bound it with `fail_after`."""
    while not predicate():  # noqa: ASYNC110 - polling OS state that has no event
        await trio.sleep(interval)


async def until_running(ar: AllocRunner, task: str) -> None:
    """Wait, on the alloc runner's broadcasts, until `task` is running."""
    listener = ar.broadcaster.listen()
    try:
        async for alloc in listener:
            state = alloc.task_states.get(task)
            if state is not None and state.state == "running" and (
                    ar.task_runners[task].handle is not None):
                return
    finally:
        listener.close()


def unix_clock() -> int:
    """Unix ns that follow trio's (virtual) clock, so event times are deterministic."""
    return EPOCH + int(trio.current_time() * 1e9)


def seconds(unix_ns: int) -> float:
    return (unix_ns - EPOCH) / 1e9


#: A service whose mock task fails after a second, restarted 3 times an hour after `delay`.
CRASH_LOOP = '''job "j" {
  type = "service"
  group "g" {
    restart {
      attempts = 3
      interval = "1h"
      delay    = "%s"
      mode     = "fail"
    }
    task "t" {
      driver = "mock_driver"
      config {
        run_for   = "1s"
        exit_code = 1
      }
    }
  }
}'''


def crash_loop_alloc(delay: str) -> Allocation:
    """An allocation of `CRASH_LOOP` with the restart delay `delay` (e.g. "0s")."""
    return job_alloc(CRASH_LOOP % delay)


def job_alloc(hcl: str, alloc_id: str = "a1") -> Allocation:
    job = parse_job(hcl)
    group = job.task_groups[0]
    return Allocation(id=alloc_id, name=f"{job.id}.{group.name}[0]", job=job, job_id=job.id,
                      task_group=group.name)


def stopped(alloc: Allocation, index: int = 100) -> Allocation:
    return msgspec.structs.replace(alloc, desired_status="stop", alloc_modify_index=index)


def types(tr: TaskRunner) -> list[str]:
    return [e.type for e in tr.state.events]


def displays(tr: TaskRunner) -> list[str]:
    return [e.display_message for e in tr.state.events]


def at(tr: TaskRunner, type_: str, nth: int = 0) -> float:
    """Virtual time (s) of the nth event of that type."""
    return [seconds(e.time) for e in tr.state.events if e.type == type_][nth]


@dataclass
class Harness:
    db: MemoryStateDB
    driver: MockDriver
    config: AllocRunnerConfig
    nursery: trio.Nursery

    def runner(self, alloc: Allocation) -> AllocRunner:
        return AllocRunner(alloc, self.config, nursery=self.nursery)

    def start(self, alloc: Allocation) -> AllocRunner:
        """A runner for `alloc`, already running in the harness's nursery."""
        runner = self.runner(alloc)
        self.nursery.start_soon(runner.run)
        return runner

    def task_log(self, kind: str) -> list[tuple[float, str]]:
        """(time, task name) of each driver start or stop, in order."""
        return [(t, task_id.split("/")[1]) for t, k, task_id in self.driver.log if k == kind]


class RecoverFailsDriver(MockDriver):
    """The mock driver after a plugin restart: no task from before it can be found again."""

    def __init__(self, message: str = "no such task") -> None:
        super().__init__(unix_clock)
        self.message = message

    async def recover_task(self, handle: TaskHandle) -> None:
        await trio.lowlevel.checkpoint()
        raise DriverError(self.message)


@asynccontextmanager
async def harness(alloc_hooks: tuple[Hook, ...] = (),
                  driver: MockDriver | None = None) -> AsyncIterator[Harness]:
    db = MemoryStateDB()
    driver = driver or MockDriver(unix_clock)
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                               unix_clock=unix_clock, alloc_hooks=alloc_hooks,
                               rng=random.Random(7))
    async with trio.open_nursery() as nursery:
        yield Harness(db, driver, config, nursery)


@asynccontextmanager
async def wired_server(*, memory_mb: int = 4096, reschedule: bool = True
                       ) -> AsyncIterator[LocalServer]:
    """A server and a client (mock driver, memory state) wired as the agent wires them:
    the client's updates go to the server (unbatched, as AllocSyncer sends them), and each
    server change hands the node's allocations to the client (the agent's server watch)."""
    node = Node(id="n1", name="n1", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=memory_mb)))
    server = LocalServer(node, EventBroker(), owns_events=True, reschedule=reschedule,
                         unix_clock=unix_clock)
    config = AllocRunnerConfig(state_db=MemoryStateDB(),
                               drivers={"mock_driver": MockDriver(unix_clock)},
                               unix_clock=unix_clock, rng=random.Random(7))
    async with trio.open_nursery() as nursery:
        updates, received = trio.open_memory_channel[Allocation](1000)
        client = Client(config, EventBroker(), on_alloc_update=updates.send_nowait)
        await nursery.start(client.run)
        await nursery.start(server.run)

        async def sync_to_server() -> None:
            async for alloc in received:
                await server.update_allocs([alloc])

        async def run_server_allocs() -> None:
            while True:
                changed = server.changed
                client.sync_allocs(server.allocs_for_node())
                await changed.wait()

        nursery.start_soon(sync_to_server)
        nursery.start_soon(run_server_allocs)
        yield server
        nursery.cancel_scope.cancel()

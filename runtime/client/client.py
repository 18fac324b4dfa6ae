"""`Client`: the agent core that runs allocations on this node.

It owns the alloc-runners nursery (every `AllocRunner.run`, and the destroy/shutdown work the
runners hand off, live there), and wires each runner's output to the event broker: every task
event as a `Task/TaskEvent` record, every client view of an allocation as
`Allocation/AllocationUpdated` (unless the server publishes them, as in the agent, where an
allocation's event must carry the index the server gave it).

The client makes its runners with an `AllocRunnerFactory` (allocrunner/interface.py) and
speaks to them only through the `AllocRunner` protocol. The default factory is the real
runner's, from an `AllocRunnerConfig` (the state DB, drivers and clock: the same client runs
real tasks, or mock tasks under a mock clock); the node simulator gives the simulated
runner's.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, final

import msgspec
import trio

from yurt.runtime.client.allocrunner.interface import (
    AllocRunner,
    AllocRunnerError,
    AllocRunnerFactory,
    RunnerSetup,
)
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.structs import Allocation, is_client_terminal
from yurt.store.protocol import SavedTask

if TYPE_CHECKING:
    from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig

log = logging.getLogger("yurt.client")


@final
class Client:
    def __init__(self, config: AllocRunnerConfig | None, broker: EventBroker,
                 on_alloc_update: Callable[[Allocation], None] | None = None,
                 *, factory: AllocRunnerFactory | None = None,
                 publish_alloc_updates: bool = True) -> None:
        """Runners come from `factory`; without one, from the real runner's factory over
        `config` (its task events go to `broker`)."""
        self.broker = broker
        self._publish_alloc_updates = publish_alloc_updates
        self._on_alloc_update = on_alloc_update
        if factory is None:
            from yurt.runtime.client.allocrunner.runner import runner_factory

            assert config is not None, "a client needs an AllocRunnerConfig or a factory"
            factory = runner_factory(dataclasses.replace(config,
                                                         on_task_event=broker.task_event))
        self._factory = factory
        self.runners: dict[str, AllocRunner] = {}
        self.invalid: set[str] = set()  # allocations that could not even get a runner
        # Destroyed here (garbage collected): never run again, even while the server still
        # lists them as running because the final update is on its way.
        self.collected: set[str] = set()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Own the alloc-runners nursery until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def add_alloc(self, alloc: Allocation) -> AllocRunner:
        """Create a runner for a new allocation and start it."""
        runner = self._new_runner(alloc)
        self._launch(runner)
        return runner

    def _new_runner(self, alloc: Allocation) -> AllocRunner:
        """The factory's runner for `alloc`, told what it must wait for: the allocation it
        replaces and the ones it preempted, when they run here."""
        assert self._nursery is not None, "Client.run must be started first"
        preempted = [self.runners[a] for a in alloc.preempted_allocations if a in self.runners]
        return self._factory(alloc, RunnerSetup(
            self._nursery, self._alloc_updated,
            previous=self.runners.get(alloc.previous_allocation), preempted=preempted))

    def _launch(self, runner: AllocRunner) -> None:
        assert self._nursery is not None, "Client.run must be started first"
        self.runners[runner.id] = runner
        self._nursery.start_soon(runner.run)

    def _alloc_updated(self, alloc: Allocation) -> None:
        """Every new client view of an allocation: to the event stream and the server sync."""
        if self._publish_alloc_updates:
            self.broker.allocation_updated(alloc)
        if self._on_alloc_update is not None and alloc.id not in self.collected:
            self._on_alloc_update(alloc)

    async def restore_alloc(self, alloc: Allocation,
                            saved: Mapping[str, SavedTask] | None = None) -> AllocRunner:
        """Re-attach to an allocation an earlier agent ran, and launch its runner.

        Args:
            alloc: the allocation (the server's copy when it has one).
            saved: its tasks' saved state, task name → what the store holds, when the caller
                read it already (`StateDB.get_all_state`); None: each task reads its own.

        Raises:
            Exception: whatever stopped the restore; the runner is then not registered
                (its re-attached tasks were stopped, see `AllocRunner.restore`).
        """
        runner = self._new_runner(alloc)
        await runner.restore(saved)
        self._launch(runner)
        return runner

    def update_alloc(self, alloc: Allocation) -> None:
        runner = self.runners.get(alloc.id)
        if runner is not None:
            runner.update(alloc)

    def sync_allocs(self, allocs: list[Allocation]) -> None:
        """Bring the runners in line with the server's allocations for this node (Nomad's
        `runAllocs`): new ones start (stopped ones the server still thinks alive get a runner
        that reports their end), newer versions are handed to their runner, ones the server
        no longer has are destroyed."""
        seen = set()
        for alloc in allocs:
            seen.add(alloc.id)
            runner = self.runners.get(alloc.id)
            if runner is None:
                # A server-terminal allocation the client has no runner for still gets one
                # unless the server knows it ended: a stop (and the destroy of its state)
                # finished here, but the agent died before the last update reached the
                # server. Run as the terminal allocation it is, its tasks never start and
                # the runner reports how it ended (Nomad runs the task runners of terminal
                # allocations for the same reason).
                over = alloc.is_terminal() and is_client_terminal(alloc.client_status)
                if (not over and alloc.id not in self.invalid
                        and alloc.id not in self.collected):
                    try:
                        self.add_alloc(alloc)
                    except AllocRunnerError as e:
                        # Nomad's "invalid alloc": report it failed instead of running it.
                        log.error("allocation %s cannot run: %s", alloc.id, e)
                        self.invalid.add(alloc.id)
                        self._alloc_updated(msgspec.structs.replace(
                            alloc, client_status="failed", client_description=str(e)))
            elif alloc.alloc_modify_index > runner.alloc.alloc_modify_index:
                runner.update(alloc)
        for alloc_id in [a for a in self.runners if a not in seen]:
            if alloc_id not in self.collected and self._nursery is not None:
                self._nursery.start_soon(self.destroy_alloc, alloc_id)
        # What the server forgot, or knows is over, can never come back: forget it here too,
        # so these sets stay as small as the server's own list.
        alive = {a.id for a in allocs
                 if not (a.is_terminal() and is_client_terminal(a.client_status))}
        self.collected &= alive | set(self.runners)
        self.invalid &= seen

    async def destroy_alloc(self, alloc_id: str) -> None:
        """Destroy a runner (kill, remove its dir and state) and forget it."""
        runner = self.runners.get(alloc_id)
        if runner is None:
            await trio.lowlevel.checkpoint()
            return
        self.collected.add(alloc_id)
        try:
            await runner.destroy_and_wait()
        finally:  # destroyed even when its last write failed: never run it again
            self.runners.pop(alloc_id, None)

    async def destroy_all(self) -> None:
        """Destroy every allocation (dev mode's way to stop), all within the caller's
        deadline (each destroy keeps it, tail included). One failed destroy is logged and
        never stops the others, nor reaches the caller as an ExceptionGroup."""
        async def destroy(alloc_id: str) -> None:
            try:
                await self.destroy_alloc(alloc_id)
            except Exception:
                log.exception("destroying allocation %s failed", alloc_id)

        async with trio.open_nursery() as nursery:
            for alloc_id in list(self.runners):
                nursery.start_soon(destroy, alloc_id)

    async def shutdown(self) -> None:
        """Agent shutdown: every runner stops, every task keeps running; within the
        caller's deadline, failures logged (never an ExceptionGroup)."""
        async def shutdown(runner: AllocRunner) -> None:
            try:
                await runner.shutdown_and_wait()
            except Exception:
                log.exception("shutting down allocation %s failed", runner.id)

        async with trio.open_nursery() as nursery:
            for runner in list(self.runners.values()):
                nursery.start_soon(shutdown, runner)

    def stop_bound(self) -> float:
        """Seconds within which a stop of every allocation ends: the slowest runner's."""
        return max((runner.stop_bound() for runner in self.runners.values()), default=0.0)

    async def wait_all(self) -> None:
        """Until every runner's `run()` has finished."""
        for runner in list(self.runners.values()):
            await runner.wait_done.wait()

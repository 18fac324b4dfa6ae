"""`SimulatedAllocRunner`: an allocation that only pretends to run (nomad-nodesim's
`allocrunnersim/allocrunnersim.go` `simulatedAllocRunner`).

No driver, no hook, no file, no state DB: the runner walks its allocation's tasks through
pending → running → dead on the Trio clock, drawn from an `AllocProfile` with a seeded RNG, and
reports every step exactly as the real runner does: to the client's `on_alloc_state_updated`
(so the real alloc sync sends it) and to its broadcaster. With it, one process runs the real
client code of a thousand nodes against real servers (`yurt nodesim`), and the whole-cluster
simulation runs hours of a cluster under the mock clock.

The timeline of one allocation (each step one client update):
  t=0                 every task pending: `Received`, `Task Setup`; then, as the real runner,
                      it waits for the allocation it replaces and the ones it preempted
                      (when they run on this node) to end
  t=start_delay       every task running: `Started`                  → client status running
  t=+run_time         for a batch job (or a failure drawn with `failure_probability`) every
                      task dead: `Terminated` with exit code 0 (1)   → complete (failed)
A service or system allocation that did not draw a failure runs until stopped. A desired stop
(`update`), `destroy` or a restart ends or restarts the tasks at once (`Killing`, `Killed`;
`Restart Signaled`, `Restarting`); `shutdown` stops the runner and leaves the state as it is.

Invariant: an allocation's `client_status` comes from its task states by the real rules
(`status.py`), and a dead allocation never runs again.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

import msgspec
import trio

from yurt.runtime.client.allocrunner.broadcaster import AllocBroadcaster
from yurt.runtime.client.allocrunner.interface import (
    AllocRunnerError,
    AllocRunnerFactory,
    AllocState,
    RunnerSetup,
    group_of,
)
from yurt.runtime.client.allocrunner.status import client_status
from yurt.runtime.client.allocwatcher import wait_terminal
from yurt.runtime.client.taskrunner import events
from yurt.runtime.structs import (
    ALLOC_CLIENT_PENDING,
    TASK_STATE_DEAD,
    TASK_STATE_PENDING,
    TASK_STATE_RUNNING,
    Allocation,
    TaskEvent,
    TaskState,
    is_client_terminal,
)

if TYPE_CHECKING:
    from yurt.store.protocol import SavedTask

#: Job types whose allocations end by themselves.
_FINITE = frozenset({"batch", "sysbatch"})


@dataclass(frozen=True)
class AllocProfile:
    """How simulated allocations behave; every draw is uniform in [low, high] seconds."""

    start_delay: tuple[float, float] = (0.1, 0.5)
    #: How long a batch allocation runs (and how long a failing one runs before it fails).
    run_time: tuple[float, float] = (1.0, 5.0)
    #: The chance that an allocation fails after its run time, whatever its job's type.
    failure_probability: float = 0.0

    def __post_init__(self) -> None:
        for name in ("start_delay", "run_time"):
            low, high = getattr(self, name)
            if not 0 <= low <= high:
                raise ValueError(f"{name}: need 0 <= low <= high, got [{low}, {high}]")
        if not 0 <= self.failure_probability <= 1:
            raise ValueError(f"failure_probability must be in [0, 1], got "
                             f"{self.failure_probability}")


@final
class SimulatedAllocRunner:
    """An `AllocRunner` (interface.py) that runs nothing; see the module header."""

    def __init__(self, alloc: Allocation, setup: RunnerSetup, profile: AllocProfile,
                 rng: random.Random, *, unix_clock: Callable[[], int]) -> None:
        job, group = group_of(alloc)
        self._alloc = alloc
        self._setup = setup
        self._clock = unix_clock
        self.broadcaster: AllocBroadcaster[Allocation] = AllocBroadcaster()
        self.wait_done = trio.Event()
        self.destroyed = trio.Event()
        self.shutdown_done = trio.Event()
        # Drawn now, in construction order: a seeded client makes the same allocations run
        # the same way.
        self.start_delay = rng.uniform(*profile.start_delay)
        self.run_time = rng.uniform(*profile.run_time)
        self.fails = rng.random() < profile.failure_probability
        self.finite = self.fails or job.type in _FINITE
        self._tasks = {t.name: TaskState() for t in group.tasks}
        self._published: Allocation | None = None
        self._scope = trio.CancelScope()
        self._wake = trio.Event()  # an update, a restart or a stop to act on
        self._restart = False
        self._stopping = False

    # ------------------------------------------------------------------ views

    @property
    def id(self) -> str:
        return self._alloc.id

    @property
    def alloc(self) -> Allocation:
        return self._alloc

    def alloc_state(self) -> AllocState:
        status, description = client_status(self._tasks.values())
        return AllocState(status, description, dict(self._tasks))

    def client_alloc(self) -> Allocation:
        return self._published or self._live()

    def client_status(self) -> str:
        return self.client_alloc().client_status

    def stop_bound(self) -> float:
        return 0.0

    def _live(self) -> Allocation:
        state = self.alloc_state()
        return msgspec.structs.replace(
            self._alloc, client_status=state.client_status or ALLOC_CLIENT_PENDING,
            client_description=state.client_description,
            task_states={name: msgspec.structs.replace(t, events=list(t.events))
                         for name, t in self._tasks.items()})

    def _publish(self) -> None:
        self._published = calloc = self._live()
        self._setup.on_alloc_state_updated(calloc)
        if not self.broadcaster.closed:
            self.broadcaster.send(calloc)

    # ------------------------------------------------------------------ the timeline

    async def restore(self, saved: Mapping[str, SavedTask] | None = None) -> None:
        """Nothing was saved: a simulated allocation restored starts over."""
        await trio.lowlevel.checkpoint()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        task_status.started()
        try:
            with self._scope:
                if self._alloc.is_terminal() or self._dead():
                    self._kill("alloc was stopped before it started")
                    return
                self._event_all(events.RECEIVED, message="Task received by client")
                self._event_all(events.SETUP, message="Building Task Directory")
                self._publish()
                for before in [*([self._setup.previous] if self._setup.previous else []),
                               *self._setup.preempted]:
                    await wait_terminal(before)
                await self._live_out()
        finally:
            self.wait_done.set()

    async def _live_out(self) -> None:
        """Start, run and end (or restart) the tasks until they are dead or stopped."""
        while True:
            self._restart = False
            if await self._sleep_or_wake(self.start_delay):
                continue
            if self._stopping:
                return
            now = self._clock()
            for state in self._tasks.values():
                state.state = TASK_STATE_RUNNING
                state.started_at = events.datetime_of(now)
                events.append_event(state, events.new_event(events.STARTED, now))
            self._publish()
            if not self.finite:
                await self._wait_stop_or_restart()
            elif await self._sleep_or_wake(self.run_time):
                continue
            if self._stopping or self._dead():
                return
            if self._restart:
                continue
            now = self._clock()
            code = 1 if self.fails else 0
            for state in self._tasks.values():
                events.append_event(state, events.new_event(
                    events.TERMINATED, now, exit_code=code, fails_task=self.fails))
                state.state = TASK_STATE_DEAD
                state.finished_at = events.datetime_of(now)
            self._publish()
            return

    async def _sleep_or_wake(self, seconds: float) -> bool:
        """Sleep; True when a restart cut it short (a stop returns through `_stopping`)."""
        with trio.move_on_after(seconds):
            await self._wait_stop_or_restart()
        return self._restart and not self._stopping

    async def _wait_stop_or_restart(self) -> None:
        while not (self._stopping or self._restart):
            self._wake = trio.Event()
            await self._wake.wait()

    def _dead(self) -> bool:
        # A group has at least one task (the jobspec's rule): all dead is never vacuous.
        return all(t.state == TASK_STATE_DEAD for t in self._tasks.values())

    def _event_all(self, type_: str, message: str) -> None:
        now = self._clock()
        for state in self._tasks.values():
            events.append_event(state, events.new_event(type_, now, message=message))

    def _kill(self, reason: str) -> None:
        """Every task that is not dead yet: killed now."""
        now = self._clock()
        changed = False
        for state in self._tasks.values():
            if state.state == TASK_STATE_DEAD:
                continue
            changed = True
            if state.state == TASK_STATE_RUNNING:
                events.append_event(state, events.new_event(events.KILLING, now,
                                                            kill_reason=reason))
                events.append_event(state, events.new_event(events.KILLED, now))
            state.state = TASK_STATE_DEAD
            state.finished_at = events.datetime_of(now)
        if changed or self._published is None:
            self._publish()

    def _stop(self, reason: str) -> None:
        self._stopping = True
        self._wake.set()
        self._kill(reason)

    # ------------------------------------------------------------------ what the client asks

    def update(self, alloc: Allocation) -> None:
        self._alloc = alloc
        if alloc.is_terminal() and not self._stopping:
            self._stop("alloc was stopped")
        elif self._published is not None:
            self._publish()  # the new server copy under the same client view

    async def _restart_tasks(self, event_message: str, *, running_only: bool) -> None:
        await trio.lowlevel.checkpoint()
        if self._stopping or is_client_terminal(self.client_status()):
            raise AllocRunnerError("restart of an alloc that should not run")
        running = [s for s in self._tasks.values() if s.state == TASK_STATE_RUNNING]
        if running_only and not running:
            return
        now = self._clock()
        for state in self._tasks.values():
            events.append_event(state, events.new_event(events.RESTART_SIGNALED, now,
                                                        restart_reason=event_message))
            events.append_event(state, events.new_event(
                events.RESTARTING, now, restart_reason=event_message))
            state.state = TASK_STATE_PENDING
        self._restart = True
        self._wake.set()
        self._publish()

    async def restart_task(self, name: str, event: TaskEvent | None = None) -> None:
        if name not in self._tasks:
            await trio.lowlevel.checkpoint()
            raise AllocRunnerError(f"Could not find task runner for task: {name}")
        await self._restart_tasks(events.USER_RESTART_TASK, running_only=False)

    async def restart_running(self, event: TaskEvent | None = None) -> None:
        await self._restart_tasks(events.USER_RESTART_RUNNING, running_only=True)

    async def restart_all(self, event: TaskEvent | None = None) -> None:
        await self._restart_tasks(events.USER_RESTART_ALL, running_only=False)

    async def signal(self, task: str | None, signal: str) -> None:
        await trio.lowlevel.checkpoint()
        if task is not None and task not in self._tasks:
            raise AllocRunnerError("Task not found")
        now = self._clock()
        for name, state in self._tasks.items():
            if task is None or name == task:
                events.append_event(state, events.new_event(
                    events.SIGNALING, now, task_signal=signal,
                    task_signal_reason="signal requested"))
        self._publish()

    def destroy(self) -> None:
        if self.destroyed.is_set():
            return
        self._stop("alloc was destroyed")
        self._scope.cancel()
        self.broadcaster.close()
        self.wait_done.set()  # a runner destroyed before it ran never will
        self.shutdown_done.set()
        self.destroyed.set()

    async def destroy_and_wait(self) -> None:
        self.destroy()
        await self.destroyed.wait()

    def shutdown(self) -> None:
        if self.shutdown_done.is_set():
            return
        self._scope.cancel()
        self.wait_done.set()
        self.shutdown_done.set()

    async def shutdown_and_wait(self) -> None:
        self.shutdown()
        await self.shutdown_done.wait()


def simulated_factory(profile: AllocProfile, rng: random.Random, *,
                      unix_clock: Callable[[], int]) -> AllocRunnerFactory:
    """An `AllocRunnerFactory` of simulated runners that draw from `rng`."""
    def make(alloc: Allocation, setup: RunnerSetup) -> SimulatedAllocRunner:
        return SimulatedAllocRunner(alloc, setup, profile, rng, unix_clock=unix_clock)
    return make

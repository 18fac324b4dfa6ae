"""`AllocRunner`: one allocation, run as one nursery tree with Nomad's client semantics.

Theory of operation (Nomad's `client/allocrunner/alloc_runner.go` `Run`). `run()` owns a
nursery with two services and the task runners:

    AllocRunner.run
    ├─ task-state update handler   every task change → leader/sibling/main-dead kill
    │                              decisions, lifecycle gates, client status, persistence,
    │                              broadcast (Nomad's `handleTaskStateUpdates`)
    ├─ alloc update handler        server updates, one at a time (`handleAllocUpdates`)
    └─ task runners                one per task, each waiting at its lifecycle gate

Task runners call `_task_state_updated()`, which only sets a flag and an event: the handler
coalesces any number of changes into one pass, so a burst of events costs one status
computation, one broadcast and one persisted write.

The kill order, destroy and shutdown live in `teardown.py`, and the hooks are built in
`builtin_hooks.py` (Nomad's `initRunnerHooks`); this module is the run loop.

Two views of the allocation, never mixed: `alloc` is the static server copy (replaced only by
`update()`); `alloc_state()` is the live client view: task states and client status.
`client_alloc()` is what the runner last *published* (persisted, broadcast, handed to sync
and GC): readers never see an allocation end before the collector may collect it.

`destroy()` and `shutdown()` return at once; their work runs in the nursery lent to the
constructor (the client's alloc-runners nursery), and `destroyed`/`shutdown_done` tell when
it finished; `*_and_wait()` do the same work in the caller's task, within the caller's
deadline (one deadline for all of it, tail included: see `teardown.py`). `destroy()`
completes even if `run()` was never called: unstarted task runners count as exited. A kill
the run loop starts itself (a task gone from an update) lives in the run loop's own nursery.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar, final

import msgspec
import trio

from yurt.hooks.base import (
    AllocHookResources,
    AllocPostrunHook,
    AllocPrekillHook,
    AllocPrerunHook,
    AllocUpdateHook,
    Hook,
)
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.allocrunner import builtin_hooks, interface, maxrun, teardown
from yurt.runtime.client.allocrunner.broadcaster import AllocBroadcaster
from yurt.runtime.client.allocrunner.checkresults import CheckResults
from yurt.runtime.client.allocrunner.gate import Gate
from yurt.runtime.client.allocrunner.health import ClientHealth
from yurt.runtime.client.allocrunner.interface import (
    AllocRunnerError,
    AllocState,
    RunnerSetup,
    group_of,
)
from yurt.runtime.client.allocrunner.lifecycle import Coordinator, Stage, stage_of
from yurt.runtime.client.allocrunner.status import client_status
from yurt.runtime.client.allocwatcher import GroupWatcher
from yurt.runtime.client.checks.registration import ServiceDeps, no_checks
from yurt.runtime.client.devices.manager import DeviceManager
from yurt.runtime.client.drivers.protocol import Driver
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.taskrunner import events
from yurt.runtime.client.taskrunner.runner import TaskRunner
from yurt.runtime.client.templating.data import TemplateData
from yurt.runtime.errors import TaskNotRunningError, YurtError
from yurt.runtime.structs import (
    ALLOC_CLIENT_COMPLETE,
    TASK_STATE_DEAD,
    ZERO_TIME,
    Allocation,
    Node,
    Task,
    TaskEvent,
    TaskGroup,
    is_client_terminal,
)
from yurt.store.protocol import SavedTask, StateDB

log = logging.getLogger("yurt.allocrunner")
#: How long stopping the re-attached tasks of an allocation that failed to restore may take.
RESTORE_CLEANUP_TIMEOUT: Final = 15.0
#: Default bound of task starts in flight. A start mostly waits (for its shim, for a commit
#: it shares with other starts), so the bound is high enough to overlap those waits when the
#: host is busy and low enough that 500 tasks start in a few waves, not in lock-step
#: (scripts/bench_lifecycle, 500 tasks: 64, 128 and 256 gave the same total within noise).
START_CONCURRENCY: Final = 128
#: Default worker threads for allocation directory builds.
DIR_BUILD_THREADS: Final = 2

H = TypeVar("H", bound=Hook)

@dataclass(frozen=True)
class AllocRunnerConfig:
    """What every alloc runner of a client shares."""

    state_db: StateDB
    drivers: dict[str, Driver]
    unix_clock: Callable[[], int]
    alloc_hooks: Sequence[Hook] = ()  # appended after the built-in ones (Nomad's extra hooks)
    task_hooks: Callable[[], Sequence[Hook]] = lambda: ()
    #: Called for every task event as it is appended: (allocation, task name, event).
    on_task_event: Callable[[Allocation, str, TaskEvent], None] = lambda a, t, e: None
    rng: random.Random | None = None
    #: Where allocation directories live (`<data-dir>/alloc`); None runs without them (mock).
    alloc_root: Path | None = None
    node: Node | None = None
    device_manager: DeviceManager | None = None
    #: Signs a task's identity claims with the server's workload key (hooks/identity.py
    #: `Signer`); None: tasks get no identity token.
    sign_identity: Callable[[dict[str, Any]], str] | None = None
    #: Task starts in flight in the whole agent (held from prestart until `Started`): each
    #: task goes from `Received` to `Started` on its own, and the first ones finish before
    #: the last ones begin, instead of every task advancing through each phase together.
    start_limiter: trio.CapacityLimiter = field(
        default_factory=lambda: trio.CapacityLimiter(START_CONCURRENCY))
    #: Worker threads building allocation directories at once (they contend for the GIL).
    dir_limiter: trio.CapacityLimiter = field(
        default_factory=lambda: trio.CapacityLimiter(DIR_BUILD_THREADS))
    #: How many Nomad service checks an allocation has (allocation health waits for them).
    expected_checks: Callable[[Allocation], int] = no_checks
    #: Services and variables for `template` blocks (None: an empty in-memory source).
    template_data: TemplateData | None = None
    artifact: ArtifactConfig = field(default_factory=ArtifactConfig)  # the client's limits
    #: The service catalogue and check runner service hooks use; None runs without them.
    services: ServiceDeps | None = None


@final
class AllocRunner:
    # Run state that starts out as None or False starts out here, and the run loop, update(),
    # destroy() and shutdown() set it per runner; what is mutable (events, scopes, the kill
    # lock) is made per runner in __init__.
    _published: Allocation | None = None  # the last client view sent out
    _run_launched = False
    _destroy_launched = False
    _shutdown_launched = False
    _tasks_exited = False
    _pending_update: Allocation | None = None
    _services: trio.Nursery | None = None  # the run loop's, while it runs
    _runners_started = False
    #: The group's max_run_duration passed and the runner killed its tasks (maxrun.py).
    max_run_exceeded = False

    def __init__(self, alloc: Allocation, config: AllocRunnerConfig, *, nursery: trio.Nursery,
                 on_alloc_state_updated: Callable[[Allocation], None] = lambda a: None,
                 watcher: GroupWatcher | None = None) -> None:
        _, group = group_of(alloc)
        self.alloc = alloc
        self.id = alloc.id
        self.group: TaskGroup = group
        self._config = config
        self._db = config.state_db
        self._nursery = nursery
        self._on_alloc_state_updated = on_alloc_state_updated
        self.broadcaster: AllocBroadcaster[Allocation] = AllocBroadcaster()
        self.resources = AllocHookResources()
        self.check_results = CheckResults()  # service checks write, alloc health reads
        self.health = ClientHealth.of(alloc)  # DeploymentStatus's Healthy and Timestamp
        self.alloc_dir = AllocDir(config.alloc_root, alloc.id) if config.alloc_root else None
        self.watcher = watcher or GroupWatcher()
        # Set by the first server copy that asks for no shutdown_delay (Nomad's
        # alloc_runner.go `shutdownDelayCtx`): it ends any shutdown_delay wait under way.
        self.shutdown_delay_skipped = trio.Event()
        self.hooks: list[Hook] = builtin_hooks.alloc_runner_hooks(
            self, config, nursery=nursery, publish=self._task_state_updated)
        self.coordinator = Coordinator(group.tasks)
        # One gate per stage this group uses (an unused stage has nobody to let through).
        self.gates = {stage: Gate() for stage in {stage_of(t) for t in group.tasks}}
        self.task_runners = {task.name: self._task_runner(task) for task in group.tasks}
        self.state = AllocState()
        self.wait_done = trio.Event()  # run() finished (or will never run)
        self.destroyed = trio.Event()
        self.shutdown_done = trio.Event()
        self._handler_done = trio.Event()
        self._state_dirty = trio.Event()
        self._update_wake = trio.Event()
        self.alloc_changed = trio.Event()  # set, then replaced, on every server copy
        self._kill_lock = trio.Lock()
        self._run_scope = trio.CancelScope()
        self._prerun_scope = trio.CancelScope()

    def _task_runner(self, task: Task) -> TaskRunner:
        """The runner of one of the group's tasks, with its hooks (builtin_hooks.py)."""
        config = self._config
        driver = config.drivers.get(task.driver)
        if driver is None:
            raise AllocRunnerError(f'failed creating runner for task "{task.name}": '
                                   f'driver "{task.driver}" is not available')
        return TaskRunner(
            self.alloc, task, driver=driver, state_db=config.state_db,
            gate=self.gates[stage_of(task)], on_state_updated=self._task_state_updated,
            unix_clock=config.unix_clock,
            hooks=builtin_hooks.task_runner_hooks(self, task, config), rng=config.rng,
            resources=self.resources, node=config.node,
            start_limiter=config.start_limiter,
            task_dir=self.alloc_dir.task_dir(task.name) if self.alloc_dir else None,
            on_event=lambda tr, ev: config.on_task_event(tr.alloc, tr.name, ev))

    # ------------------------------------------------------------------ views

    def alloc_state(self) -> AllocState:
        states = {name: tr.task_state() for name, tr in self.task_runners.items()}
        status, description = client_status(states.values())
        return AllocState(status, description, states)

    def client_alloc(self) -> Allocation:
        """The server copy with the client view this runner last published laid over it:
        what the client reports, and what sync and GC know (an allocation must not look
        terminal to a reader before the garbage collector may collect it). Before the first
        publication, the live view."""
        published = self._published
        if published is None:
            return self._live_client_alloc()
        return msgspec.structs.replace(self.alloc, client_status=published.client_status,
                                       client_description=published.client_description,
                                       task_states=published.task_states,
                                       deployment_status=published.deployment_status)

    def stop_bound(self) -> float:
        """Seconds within which a stop of this allocation ends: its slowest task's kill
        bound (a backstop: each task runner bounds its own kill well within it)."""
        return max((tr.kill_bound() for tr in self.task_runners.values()), default=0.0)

    def client_status(self) -> str:
        """`client_alloc().client_status`, without building the allocation (lists and
        summaries ask it of every allocation)."""
        published = self._published
        if published is None:
            return self._live_client_alloc().client_status
        return published.client_status

    def _live_client_alloc(self) -> Allocation:
        """The server copy with the client's live view laid over it."""
        state = self.alloc_state()
        description = state.client_description
        if self.alloc.desired_status == "evict" and self.alloc.desired_description:
            description = self.alloc.desired_description  # e.g. "Preempted by …"
        elif self.watcher.waiting:
            description = "Waiting for previous or preempted allocations to stop"
        status = state.client_status
        if self.max_run_exceeded and is_client_terminal(status):  # alloc_runner.go
            status, description = ALLOC_CLIENT_COMPLETE, maxrun.MAX_RUN_EXCEEDED
        return msgspec.structs.replace(
            self.alloc, client_status=status, client_description=description,
            task_states=state.task_states,
            deployment_status=self.health.status(self.alloc, state.client_status))

    @property
    def stopping(self) -> bool:
        """An agent shutdown or a destroy is under way."""
        return self._shutdown_launched or self._destroy_launched

    def unix_now(self) -> int:
        return self._config.unix_clock()

    async def enforce_max_run_duration(self) -> None:
        """The group's max_run_duration passed: kill the tasks (maxrun.py)."""
        log.debug("alloc %s exceeded max_run_duration, killing its tasks", self.id)
        self.max_run_exceeded = True
        await teardown.kill_tasks(self)

    def _hooks(self, phase: type[H]) -> list[H]:
        return [h for h in self.hooks if isinstance(h, phase)]

    # ------------------------------------------------------------------ restore

    async def restore(self, saved: Mapping[str, SavedTask] | None = None) -> None:
        """After an agent restart, before `run()`: restore every task runner, then the
        lifecycle coordinator from the restored states.

        With `saved` (task name → what the store holds, from the agent's one read of all
        state; a task missing from it has nothing saved), no task reads the store. Without
        it, each task runner reads its own state.

        The task runners restore concurrently: each asks its driver to recover its task, and
        one task's hops need not wait for another's. The first error is raised as itself
        (the others are logged), never as an ExceptionGroup."""
        errors: list[Exception] = []

        async def restore(tr: TaskRunner) -> None:
            try:
                await tr.restore(None if saved is None else saved.get(tr.name, SavedTask()))
            except Exception as e:
                log.error("restoring task %s of alloc %s: %s", tr.name, self.id, e)
                errors.append(e)

        async with trio.open_nursery() as nursery:
            for tr in self.task_runners.values():
                nursery.start_soon(restore, tr)
        if errors:
            # This runner will not run: a sibling re-attached meanwhile would be left with
            # nobody to supervise it, and run twice once the allocation is started afresh.
            # Shielded: a caller cancelled meanwhile must not leave that sibling running.
            with trio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = trio.current_time() + RESTORE_CLEANUP_TIMEOUT
                await teardown.force_destroy_tasks(self)
            raise errors[0]
        self._set_gates(self.coordinator.restore(
            {name: tr.state for name, tr in self.task_runners.items()}))

    def _set_gates(self, open_stages: frozenset[Stage]) -> None:
        for stage, gate in self.gates.items():
            if stage in open_stages:
                gate.open()
            else:
                gate.close()

    # ------------------------------------------------------------------ run

    def _should_run(self) -> bool:
        if self.alloc.is_terminal():
            return False
        return not is_client_terminal(self.alloc_state().client_status)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Run the allocation until every task runner has finished."""
        if self._destroy_launched:  # destroyed before it ever ran: nothing to run
            task_status.started()
            await self.destroyed.wait()
            return
        self._run_launched = True
        try:
            with self._run_scope:
                await self._run(task_status)
            if not (self._shutdown_launched or self._destroy_launched):
                await self._run_hooks(AllocPostrunHook, "postrun")
        finally:
            self.wait_done.set()

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as services:
            self._services = services
            services.start_soon(self._run_task_state_handler)
            services.start_soon(self._run_alloc_update_handler)
            services.start_soon(maxrun.watch_max_run_duration, self)
            task_status.started()
            if self._should_run():
                with self._prerun_scope:  # a shutdown or destroy may end the waiting
                    error = await self._prerun()
                    if error is not None:
                        for tr in self.task_runners.values():
                            await tr.mark_failed_kill(f"failed to setup alloc: {error}")
            if self._shutdown_launched or self._destroy_launched:
                teardown.release_unstarted(self)
            else:
                self._runners_started = True
                async with trio.open_nursery() as runners:
                    for tr in self.task_runners.values():
                        runners.start_soon(tr.run)
            self._tasks_exited = True
            self._state_dirty.set()
            await self._handler_done.wait()
            services.cancel_scope.cancel()

    async def _prerun(self) -> str | None:
        for hook in self._hooks(AllocPrerunHook):
            try:
                await hook.prerun()
            except Exception as e:
                log.error("prerun failed for alloc %s: %s", self.id, e)
                return f'pre-run hook "{hook.name}" failed: {e}'
        return None

    async def _run_hooks(self, phase: type[Hook], method: str, *args: object) -> None:
        """Run every hook of a best-effort phase; failures are logged, never raised."""
        for hook in self._hooks(phase):
            try:
                await getattr(hook, method)(*args)
            except Exception:
                log.exception('%s hook "%s" failed for alloc %s', method, hook.name, self.id)

    # ------------------------------------------------------------------ task state handler

    def _task_state_updated(self) -> None:
        self._state_dirty.set()

    async def _run_task_state_handler(self) -> None:
        try:
            while True:
                await self._state_dirty.wait()
                self._state_dirty = trio.Event()
                done = self._tasks_exited
                await self._handle_task_states(done=done)
                if done:
                    return
        finally:
            self._handler_done.set()

    async def _handle_task_states(self, *, done: bool) -> None:
        """One pass of Nomad's `handleTaskStateUpdates` (`client/allocrunner/alloc_runner.go`)."""
        kill_event: TaskEvent | None = None
        live: list[TaskRunner] = []
        has_sidecars = False
        for tr in self.task_runners.values():
            if tr.is_poststop:
                continue
            has_sidecars |= tr.is_sidecar
            state = tr.state
            if state.state != TASK_STATE_DEAD:
                live.append(tr)
                continue
            if state.failed:
                if kill_event is None:  # a dead leader's event takes priority
                    kill_event = events.new_event(events.SIBLING_FAILED,
                                                  self._config.unix_clock(),
                                                  failed_sibling=tr.name)
            elif tr.is_leader:
                kill_event = events.new_event(events.LEADER_DEAD, self._config.unix_clock())

        if live:
            if kill_event is None and has_sidecars and all(tr.is_sidecar for tr in live):
                kill_event = events.new_event(events.MAIN_DEAD, self._config.unix_clock())
            if kill_event is not None:
                for tr in live:
                    await tr.emit_event(msgspec.structs.replace(kill_event))
                await teardown.kill_tasks(self)
        else:
            if done and not self._shutdown_launched:
                await self._run_hooks(AllocPrekillHook, "prekill")
            # Release dead runners waiting in case of an alloc-wide restart.
            async with trio.open_nursery() as nursery:
                for tr in self.task_runners.values():
                    if not tr.is_poststop and not tr.done.is_set():
                        nursery.start_soon(tr.kill)

        states = {name: tr.state for name, tr in self.task_runners.items()}
        self._set_gates(self.coordinator.task_states_updated(states))
        await self._publish()

    async def _publish(self) -> None:
        """Compute the client view, persist it, and send it to listeners."""
        calloc = self._live_client_alloc()
        if is_client_terminal(calloc.client_status):
            now = events.datetime_of(self._config.unix_clock())
            for state in calloc.task_states.values():
                if state.finished_at == ZERO_TIME:
                    state.finished_at = now
        self.state = AllocState(calloc.client_status, calloc.client_description,
                                calloc.task_states)
        self._published = calloc
        if not self.broadcaster.closed:
            self.broadcaster.send(calloc)
        self._on_alloc_state_updated(calloc)
        if not self.destroyed.is_set():
            await self._db.put_allocation(calloc)

    # ------------------------------------------------------------------ updates

    def update(self, alloc: Allocation) -> None:
        """Queue a new server copy. One slot: a newer update replaces a queued one; a queued
        one with a higher AllocModifyIndex is kept. Never blocks."""
        if self.wait_done.is_set():
            return
        if alloc.desired_transition.should_ignore_shutdown_delay():
            # At once, as Nomad's `Update` cancels `shutdownDelayCtx` before queuing: the
            # update handler may be busy with the very kill that waits out the delay.
            self.shutdown_delay_skipped.set()
            for tr in self.task_runners.values():
                tr.skip_shutdown_delay()
        queued = self._pending_update
        if queued is not None and queued.alloc_modify_index > alloc.alloc_modify_index:
            return
        self._pending_update = alloc
        self._update_wake.set()

    async def _run_alloc_update_handler(self) -> None:
        while True:
            await self._update_wake.wait()
            self._update_wake = trio.Event()
            new = self._pending_update
            self._pending_update = None
            if new is None:
                continue
            await self._handle_alloc_update(new)

    async def _handle_alloc_update(self, new: Allocation) -> None:
        stopping = not self.alloc.is_terminal() and new.is_terminal()
        self.alloc = new
        self.alloc_changed.set()
        self.alloc_changed = trio.Event()
        if stopping:
            # The stop is durable before any task is signalled: an agent (or `yurt run`,
            # whose server lives in memory) killed in the middle resumes it after restore.
            await self._publish()
            # In the step that saw it durable: every allocation of a job stop wakes from the
            # same commit, so all their tasks are signalled in one scheduler pass.
            teardown.signal_first_wave(self)
        if not new.is_terminal():
            await self._run_hooks(AllocUpdateHook, "update", new)
        for tr in self.task_runners.values():
            kill_event = await tr.update(new)
            if kill_event is not None and self._services is not None:
                # In the run loop's own nursery (which outlives every task runner), and
                # bounded: one task's kill never holds up the next update.
                self._services.start_soon(teardown.kill_one, self, tr, kill_event)
        if stopping:
            await teardown.kill_tasks(self)

    # ------------------------------------------------------------------ restarts, signals

    def _check_can_restart(self) -> None:
        if not self._should_run():
            raise AllocRunnerError("restart of an alloc that should not run")

    async def restart_task(self, name: str, event: TaskEvent | None = None) -> None:
        tr = self.task_runners.get(name)
        if tr is None:
            raise AllocRunnerError(f"Could not find task runner for task: {name}")
        self._check_can_restart()
        await tr.restart(event or self._restart_event(events.USER_RESTART_TASK))

    async def _restart_each(self, restart: Callable[[TaskRunner], Awaitable[None]]) -> None:
        """Restart every task concurrently; tasks that are not running are skipped, other
        failures are collected into one `AllocRunnerError` (never an ExceptionGroup)."""
        failures: list[str] = []

        async def one(tr: TaskRunner) -> None:
            try:
                await restart(tr)
            except TaskNotRunningError:
                pass
            except YurtError as e:
                failures.append(f"failed to restart task {tr.name}: {e}")

        async with trio.open_nursery() as nursery:
            for tr in self.task_runners.values():
                nursery.start_soon(one, tr)
        if failures:
            raise AllocRunnerError("; ".join(failures))

    async def restart_running(self, event: TaskEvent | None = None) -> None:
        self._check_can_restart()
        await self._restart_each(
            lambda tr: tr.restart(event or self._restart_event(events.USER_RESTART_RUNNING)))

    async def restart_all(self, event: TaskEvent | None = None) -> None:
        self._check_can_restart()
        self.coordinator.restart()
        self._set_gates(self.coordinator.open_stages())

        await self._restart_each(
            lambda tr: tr.force_restart(event or self._restart_event(events.USER_RESTART_ALL)))
        self._state_dirty.set()

    def _restart_event(self, reason: str) -> TaskEvent:
        return events.new_event(events.RESTART_SIGNALED, self._config.unix_clock(),
                                restart_reason=reason)

    async def signal(self, task: str | None, signal: str) -> None:
        """Signal one task, or every task (`task=None`)."""
        def event() -> TaskEvent:
            ev = events.new_event(events.SIGNALING, self._config.unix_clock())
            ev.details["signal"] = signal
            return ev

        if task is not None:
            tr = self.task_runners.get(task)
            if tr is None:
                raise AllocRunnerError("Task not found")
            await tr.signal(event(), signal)
            return
        failures = []
        for tr in self.task_runners.values():
            try:
                await tr.signal(event(), signal)
            except (YurtError, OSError) as e:
                failures.append(f"Failed to signal task: {tr.name}, err: {e}")
        if failures:
            raise AllocRunnerError("; ".join(failures))

    # ------------------------------------------------------------------ destroy, shutdown

    def destroy(self) -> None:
        """Kill everything, run destroy hooks, delete the persisted state. Returns at once;
        `destroyed` is set when done. Idempotent."""
        if self._destroy_launched or self.destroyed.is_set():
            return
        self._destroy_launched = True
        self._nursery.start_soon(teardown.destroy, self)

    async def destroy_and_wait(self) -> None:
        """`destroy()`, done by the caller's task (for callers that must not depend on the
        lent nursery, which may itself be going away); waits for a destroy in progress."""
        if self._destroy_launched or self.destroyed.is_set():
            await self.destroyed.wait()
            return
        self._destroy_launched = True
        await teardown.destroy(self)

    def shutdown(self) -> None:
        """Agent shutdown: stop the runners, leave the tasks running. Returns at once;
        `shutdown_done` is set when done."""
        if self._shutdown_launched or self._destroy_launched or self.destroyed.is_set():
            return
        self._shutdown_launched = True
        self._nursery.start_soon(teardown.shutdown, self)

    async def shutdown_and_wait(self) -> None:
        """`shutdown()`, done by the caller's task (for callers that must not depend on the
        lent nursery, which may itself be shutting down)."""
        if self._shutdown_launched or self._destroy_launched or self.destroyed.is_set():
            await self.shutdown_done.wait()
            return
        self._shutdown_launched = True
        await teardown.shutdown(self)


def real(runner: interface.AllocRunner | None) -> AllocRunner | None:
    """`runner` if it is this module's runner (with task runners, an alloc dir, ...): what
    the agent's API reads of an allocation beyond the protocol exists only there."""
    return runner if isinstance(runner, AllocRunner) else None


def runner_factory(config: AllocRunnerConfig) -> Callable[[Allocation, RunnerSetup],
                                                             AllocRunner]:
    """The real runner's `AllocRunnerFactory` (interface.py): tasks run by `config`'s drivers,
    waiting for the allocation replaced or preempted (`GroupWatcher`)."""
    def make(alloc: Allocation, setup: RunnerSetup) -> AllocRunner:
        previous = setup.previous if isinstance(setup.previous, AllocRunner) else None
        group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
        disk = group.ephemeral_disk if group is not None else None
        preempted = [r for r in setup.preempted if isinstance(r, AllocRunner)]
        watcher = GroupWatcher(previous, sticky=bool(disk and (disk.sticky or disk.migrate)),
                               preempted=preempted)
        return AllocRunner(alloc, config, nursery=setup.nursery,
                           on_alloc_state_updated=setup.on_alloc_state_updated,
                           watcher=watcher)
    return make

"""`TaskRunner`: one task's life, from `Received` to `Killed`, with Nomad's semantics.

Theory of operation (Nomad's `client/allocrunner/taskrunner/task_runner.go` `TaskRunner.Run`):

    MAIN   wait for the lifecycle gate → prestart hooks → driver start → poststart hooks →
           WAIT for the exit (or a kill) → `Terminated` → exited hooks → restart decision
           → sleep the tracker's delay → MAIN again, or leave
    then   state `dead`; unless poststop, wait for an alloc-wide restart or the final kill
    last   `RunComplete` persisted, stop hooks

Nomad's two contexts become two sets of cancel scopes: `kill()` cancels every scope opened
with `_interruptible(kill=True)` (the gate wait, the WAIT, the restart sleep), `shutdown()` the
ones opened with `shutdown=True`. Everything after a cancel is decided by flags, not by which
exception arrived, so a kill that lands between two awaits is never lost.

The module is the main loop; the kill path (`stopping.handle_kill`: prekill hooks,
`shutdown_delay`, stop retries, the wait for the exit) and the operations other tasks call
(`kill`, `restart`, `signal`, `shutdown`, `update`: `ops.py`) live beside it. A killed task's
exit is reported as `Terminated` like any other, then the tracker answers `Killed`.

State: `state` is the live `TaskState` (events appended in place, ring of 10); snapshots for
others come from `task_state()`. Every change is persisted (`put_task_state`) and announced to
the alloc runner through `on_state_updated`, a non-blocking callback.

A restart with no delay is one pass from the exit to the new start, and one store batch:
the exit's `Terminated`, `Restarting`, the new run's handle (which replaces the ended one) and
`Started` are written together after the new start, and only then does the driver forget the
ended run; nothing sleeps or checkpoints in between. A crash before that write finds the ended
run's handle: the restore re-attaches to it, reads its end from what the driver kept (the
shim's status file) and restarts it, while the new start is stopped by the driver's orphan
reaping, as any crash mid-start is. With a delay, or without a restart, the end is written at
once in a write of its own (`_finish_ended`), before the decision's event (`Restarting`, `Not
Restarting`, `Killed`) and the sleep. Every event is still persisted, in order: a state write
carries the whole ring.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final, TypeVar, final

import trio

from yurt.hooks.base import (
    AllocHookResources,
    Hook,
    TaskExitedHook,
    TaskHookContext,
    TaskPoststartHook,
    TaskPrestartHook,
    TaskStopHook,
)
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.allocrunner.gate import Gate
from yurt.runtime.client.drivers.protocol import Driver, ExitResult, TaskConfig
from yurt.runtime.client.logs.pump import fifo_path
from yurt.runtime.client.taskenv import build_env, interpolate, node_values
from yurt.runtime.client.taskrunner import events, ops, stopping
from yurt.runtime.client.taskrunner.restarts import RestartTracker
from yurt.runtime.client.taskrunner.stopping import (
    MAX_KILL_TIMEOUT,
    TaskShutdown,
)
from yurt.runtime.errors import (
    DriverError,
    HookError,
    PluginShutdownError,
    StateError,
)
from yurt.runtime.structs import (
    TASK_STATE_DEAD,
    TASK_STATE_PENDING,
    TASK_STATE_RUNNING,
    ZERO_TIME,
    Allocation,
    HookState,
    LocalState,
    Node,
    Task,
    TaskDeviceNode,
    TaskEvent,
    TaskHandle,
    TaskMount,
    TaskState,
    is_client_terminal,
)
from yurt.store.protocol import SavedTask, StateDB

log = logging.getLogger("yurt.taskrunner")

LOG_DRAIN_GRACE: Final = 5.0  # seconds for log pumps to finish after the task is done
#: Restart delays shorter than this (ns) are not slept.
MIN_RESTART_SLEEP: Final = 1000


H = TypeVar("H", bound=Hook)


def snapshot(state: TaskState) -> TaskState:
    """A copy safe to hand out: events are never mutated after they are appended."""
    return TaskState(state=state.state, failed=state.failed, restarts=state.restarts,
                     last_restart=state.last_restart, started_at=state.started_at,
                     finished_at=state.finished_at, events=list(state.events))


@final
class TaskRunner:
    def __init__(
        self,
        alloc: Allocation,
        task: Task,
        *,
        driver: Driver,
        state_db: StateDB,
        gate: Gate,
        on_state_updated: Callable[[], None],
        unix_clock: Callable[[], int],
        hooks: Sequence[Hook] = (),
        on_event: Callable[[TaskRunner, TaskEvent], None] = lambda tr, ev: None,
        rng: random.Random | None = None,
        task_dir: Path | None = None,
        resources: AllocHookResources | None = None,
        node: Node | None = None,
        start_limiter: trio.CapacityLimiter | None = None,
    ) -> None:
        self.alloc = alloc
        self.task = task
        self.name = task.name
        self.driver = driver
        self._db = state_db
        self._gate = gate
        self._on_state_updated = on_state_updated
        self._unix_clock = unix_clock
        self.hooks = list(hooks)
        self._task_dir = task_dir
        self._node = node
        self._resources = resources or AllocHookResources()
        # The agent's starts in flight (one slot from prestart to `Started`); without one,
        # this runner's own, which never makes it wait.
        self._start_limiter = start_limiter or trio.CapacityLimiter(1)
        self._background: trio.Nursery | None = None
        self._received: TaskEvent | None = None
        assert alloc.job is not None, "an allocation carries its job"
        assert task.restart_policy is not None, "jobs are canonicalised before they run"
        self.tracker = RestartTracker(task.restart_policy, alloc.job.type, task.lifecycle,
                                      now=self._mono(), rng=rng)
        server_state = alloc.task_states.get(task.name)
        self.state = snapshot(server_state) if server_state is not None else TaskState()
        self.local_state = LocalState()
        self.done = trio.Event()
        self._handle: TaskHandle | None = None
        #: The run that ended and is not yet recorded as ended (`_forget_handle`).
        self._ended: TaskHandle | None = None
        self._kill_requested = False
        self._stop_begun = False  # the stop signal went out at once (`stopping.stop_at_once`)
        # The wait of the task's shutdown_delay while it runs (`stopping.handle_kill`), and
        # whether a server copy asked for no delay (`skip_shutdown_delay`).
        self._shutdown_delay_scope: trio.CancelScope | None = None
        self._skip_shutdown_delay = False
        self._shutdown_requested = False
        self._kill_scopes: set[trio.CancelScope] = set()
        self._shutdown_scopes: set[trio.CancelScope] = set()
        self._restart_wake = trio.Event()
        self._kill_error = ""
        # `state` changed since it was last written (a zero-delay `Restarting`, written with
        # the start that follows it, or when the loop stops before that start).
        self._state_unwritten = False
        self._hook_env: dict[str, dict[str, str]] = {}
        # Mounts and device nodes each hook asked for, handed to the driver at every start.
        self._hook_mounts: dict[str, list[TaskMount]] = {}
        self._hook_devices: dict[str, list[TaskDeviceNode]] = {}
        self._on_event = on_event
        # Appended now, announced when the runner runs (unless a restore replaced it).
        self._received = events.new_event(events.RECEIVED, unix_clock())
        events.append_event(self.state, self._received)

    # ------------------------------------------------------------------ properties

    @property
    def is_leader(self) -> bool:
        return self.task.leader

    @property
    def is_poststop(self) -> bool:
        return self.task.lifecycle is not None and self.task.lifecycle.hook == "poststop"

    @property
    def is_sidecar(self) -> bool:
        return self.task.lifecycle is not None and self.task.lifecycle.sidecar and (
            not self.is_poststop)

    @property
    def kill_timeout(self) -> int:
        """The task's kill_timeout, capped by the client's maximum."""
        return min(self.task.kill_timeout, MAX_KILL_TIMEOUT)

    def kill_bound(self) -> float:
        """Seconds a caller may wait for this task's kill before giving up on it: the kill
        timeout, the shutdown delay, every stop retry, and a margin."""
        return stopping.kill_bound(self.task.shutdown_delay, self.kill_timeout) / 1e9 + 30

    @property
    def handle(self) -> TaskHandle | None:
        return self._handle

    @property
    def stop_begun(self) -> bool:
        """The task's stop signal went out at once, its Killing event with it (`stop_now`)."""
        return self._stop_begun

    @property
    def env(self) -> dict[str, str]:
        """The task's environment: Nomad's variables and the job's `env`, then hook envs in
        hook order (a later hook wins a conflict; a hook that clears its env lets earlier
        values show again)."""
        merged = build_env(self.alloc, self.task, task_dir=self._task_dir, node=self._node)
        for hook in self.hooks:
            merged.update(self._hook_env.get(hook.name, {}))
        return merged

    def set_hook_env(self, hook: str, env: dict[str, str] | None) -> None:
        if env is None:
            self._hook_env.pop(hook, None)
        else:
            self._hook_env[hook] = dict(env)

    def exec_config(self, task_id: str) -> TaskConfig:
        """The task's configuration as its start builds it (env, interpolated driver config,
        user, directories), without logs, mounts or devices: what a command run inside the
        running task (alloc exec, script checks, template change scripts) is given."""
        env = self.env
        allocated = self.alloc.task_resources.get(self.name)
        return TaskConfig(
            id=task_id, name=self.name, alloc_id=self.alloc.id, job_id=self.alloc.job_id,
            task_group=self.alloc.task_group,
            driver_config=interpolate(dict(self.task.config), {**node_values(self._node), **env}),
            user=self.task.user, env=env,
            alloc_dir=self._task_dir.parent if self._task_dir is not None else None,
            task_dir=self._task_dir, memory_mb=self.task.resources.memory,
            memory_max_mb=self.task.resources.memory_max, cpu_shares=self.task.resources.cpu,
            reserved_cores=list(allocated.reserved_cores) if allocated else [])

    def _log_paths(self) -> tuple[str | None, str | None]:
        if self._task_dir is None or self.task.log_config.disabled:
            return None, None
        logs = AllocDir.containing(self._task_dir).logs
        return (str(fifo_path(logs, self.name, "stdout")),
                str(fifo_path(logs, self.name, "stderr")))

    def task_state(self) -> TaskState:
        return snapshot(self.state)

    def _mono(self) -> int:
        return int(trio.current_time() * 1e9)

    def _hooks(self, phase: type[H]) -> list[H]:
        return [h for h in self.hooks if isinstance(h, phase)]

    def _ctx(self) -> TaskHookContext:
        return TaskHookContext(alloc=self.alloc, task=self.task, task_dir=self._task_dir,
                               emit_event=self.emit_event, unix_clock=self._unix_clock,
                               resources=self._resources, nursery=self._background,
                               lifecycle=self)

    # ------------------------------------------------------------------ state changes

    async def _persist_state(self) -> None:
        self._state_unwritten = False
        await self._db.put_task_state(self.alloc.id, self.name, self.state)

    async def _persist_all(self) -> None:
        """Task state and local state in one store batch: both writes are queued in the same
        scheduler pass, so the writer commits them together (one commit to wait for, not
        two in a row)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._persist_state)
            nursery.start_soon(self._persist_local)

    async def _persist_local(self) -> None:
        await self._db.put_task_runner_local_state(self.alloc.id, self.name, self.local_state)

    def _append(self, event: TaskEvent) -> None:
        events.append_event(self.state, event)
        self._on_event(self, event)

    async def emit_event(self, event: TaskEvent) -> None:
        """Append, persist and tell the alloc runner."""
        self._append(event)
        self._on_state_updated()
        await self._persist_state()

    async def update_state(self, new_state: str, event: TaskEvent | None = None, *,
                           persist: bool = True) -> None:
        """Change the task's state (and append `event`); `persist=False` leaves the write to
        the next one (the caller makes sure there is one)."""
        if event is not None:
            self._append(event)
        if new_state == TASK_STATE_RUNNING and self.state.state != TASK_STATE_RUNNING:
            self.state.started_at = events.datetime_of(self._unix_clock())
        if new_state == TASK_STATE_DEAD and self.state.finished_at == ZERO_TIME:
            self.state.finished_at = events.datetime_of(self._unix_clock())
        self.state.state = new_state
        self._on_state_updated()
        if persist:
            await self._persist_state()
        else:
            self._state_unwritten = True
            await trio.lowlevel.checkpoint_if_cancelled()

    # ------------------------------------------------------------------ cancellation

    @contextmanager
    def _interruptible(self, *, kill: bool = True, shutdown: bool = True
                       ) -> Iterator[trio.CancelScope]:
        """A cancel scope that `kill()` and/or `shutdown()` cancel, even retroactively."""
        with trio.CancelScope() as scope:
            if (kill and self._kill_requested) or (shutdown and self._shutdown_requested):
                scope.cancel()
            if kill:
                self._kill_scopes.add(scope)
            if shutdown:
                self._shutdown_scopes.add(scope)
            try:
                yield scope
            finally:
                self._kill_scopes.discard(scope)
                self._shutdown_scopes.discard(scope)

    def _request_kill(self) -> None:
        self._kill_requested = True
        for scope in list(self._kill_scopes):
            scope.cancel()

    def _check_shutdown(self) -> None:
        if self._shutdown_requested:
            raise TaskShutdown

    def _should_shutdown(self) -> bool:
        """The alloc is over for this task: client-terminal, or stopped (poststop tasks
        still run after a stop: that is their purpose)."""
        if is_client_terminal(self.alloc.client_status):
            return True
        return self.alloc.is_desired_stopped() and not self.is_poststop

    # ------------------------------------------------------------------ restore

    async def restore(self, saved: SavedTask | None = None) -> None:
        """Load what an earlier agent persisted, and re-attach to a still-running task.

        Call before `run()`. Hooks that finished their prestart are skipped on the next start
        and their env re-applied; a task whose handle re-attaches is not started again
        (`run()` goes straight to waiting for it, without a new `Started` event).

        Args:
            saved: what the store holds for this task, when the caller read it already (the
                agent reads every task's state in one transaction); None reads it here.

        Raises:
            StateError: the saved state cannot be decoded.
        """
        if saved is None:
            local, state = await self._db.get_task_runner_state(self.alloc.id, self.name)
        elif saved.error is not None:
            raise StateError(saved.error)
        else:
            local, state = saved.local, saved.state
        if state is not None:
            self.state = state
            self._received = None
        if local is None:
            return
        self.local_state = local
        for name, hook_state in local.hooks.items():
            if hook_state.prestart_done:
                self._apply_hook(name, hook_state)
        handle = local.task_handle
        if handle is None or local.run_complete:
            return
        try:
            await self.driver.recover_task(handle)
        except DriverError as e:
            log.warning("task %s of alloc %s could not be recovered: %s", self.name,
                        self.alloc.id, e)
            self.local_state.task_handle = None
            if self.state.state == TASK_STATE_RUNNING:
                # Nomad waits for the servers before restarting such a task (issue #1795);
                # with the embedded server that confirmation is immediate, so start afresh.
                await self.update_state(TASK_STATE_PENDING, events.new_event(
                    events.FAILED_RESTORING, self._unix_clock(),
                    display="failed to restore task; will not run until server is "
                            "contacted"))
            return
        self._handle = handle
        if local.restart_requested:
            # A user restart was under way: the exit it caused (or causes, see `run`) is
            # followed by an immediate, uncounted start, not by the policy's delay. Without
            # a handle to re-attach, the task is started at once anyway, and a trigger set
            # then would make the new run's first failure a free restart.
            self.tracker.set_restart_triggered(failure=False)

    # ------------------------------------------------------------------ the main loop

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Run the task until it is dead and released (or the agent shuts down)."""
        task_status.started()
        if self._received is not None:
            self._on_event(self, self._received)
            self._received = None
        try:
            async with trio.open_nursery() as self._background:
                handle = self._handle
                if self.local_state.restart_requested and handle is not None:
                    # Re-attached to a task a user restart had not stopped yet: stop it.
                    self._background.start_soon(ops.stop_for_restart, self, handle)
                try:
                    await self._run()
                except TaskShutdown:
                    # Leave the task and its output alone: the shim keeps the pipe.
                    self._background.cancel_scope.cancel()
                    if self._state_unwritten:  # a zero-delay restart that did not start
                        await self._persist_state()
                else:
                    # Log pumps end when the task's shim exits; give them a bounded while.
                    self._background.cancel_scope.deadline = (
                        trio.current_time() + LOG_DRAIN_GRACE)
        finally:
            self._background = None
            self.done.set()
            self._on_state_updated()

    async def _run(self) -> None:
        skip_main = False
        if self.state.state == TASK_STATE_DEAD:
            if self.local_state.run_complete:
                await self._run_hooks(TaskStopHook, "stop")
                return
            skip_main = True
        self._on_state_updated()
        while True:
            if not skip_main:
                await self._main()
                handle = self._handle
                if handle is not None:
                    # A re-attached task of an allocation that must not run any more (Nomad's
                    # Run step 7): kill it, report how it ended, forget it.
                    result = await stopping.handle_kill(self, handle)
                    await self.emit_event(events.terminated(self._unix_clock(), result))
                    await self._clear_handle(handle)
                    await self._run_hooks(TaskExitedHook, "exited")
                await self.update_state(TASK_STATE_DEAD)
            skip_main = False
            if self.is_poststop or not await self._wait_for_alloc_restart():
                break
        self.local_state.run_complete = True
        await self._persist_local()
        await self._run_hooks(TaskStopHook, "stop")

    async def _wait_for_alloc_restart(self) -> bool:
        """Dead but not released: wait for a forced restart (True) or the final kill."""
        while True:
            with self._interruptible():
                await self._restart_wake.wait()
            self._check_shutdown()
            if self._kill_requested:
                return False
            self._restart_wake = trio.Event()
            restart, delay = await self._should_restart()
            if restart:
                await self._sleep_restart_delay(delay)
                self._check_shutdown()
                if self._kill_requested:
                    return False
                self.state.finished_at = ZERO_TIME
                return True

    async def _main(self) -> None:
        try:
            await self._main_loop()
        finally:
            # Stopped (a kill, a shutdown, the alloc over) between a run's exit and the zero-
            # delay start meant to follow it: the exit is recorded and forgotten here instead.
            if self._ended is not None:
                await self._finish_ended(persist=True)

    async def _main_loop(self) -> None:
        restarting = False
        while not self._should_shutdown():
            if not (restarting and self._gate.is_open):  # a restart takes no extra pass
                with self._interruptible():
                    await self._gate.wait_open()
            restarting = True
            self._check_shutdown()
            if self._kill_requested:
                return
            try:
                handle = await self._set_up_and_start()
            except (HookError, DriverError) as e:
                await self._finish_ended(persist=True)
                self.tracker.set_start_error(e, recoverable=e.recoverable)
            else:
                # Started: the new run's write (`_start`) also recorded the last one's end.
                await self._finish_ended(persist=handle is None)
                if handle is None:  # killed before or while the driver was starting it
                    return
                await self._run_hooks(TaskPoststartHook, "poststart")
                result = await self._wait_for_exit(handle)
                self._forget_handle(handle)
                self.tracker.set_exit_result(result)
                await self._run_hooks(TaskExitedHook, "exited")
            restart, delay = await self._should_restart()
            if not restart:
                return
            await self._sleep_restart_delay(delay)
            self._check_shutdown()
            if self._kill_requested:
                return

    async def _sleep_restart_delay(self, delay: int) -> None:
        if delay < MIN_RESTART_SLEEP:
            # A policy delay of 0 (the tracker's 1 ns): sleeping it would only cost timer
            # bookkeeping and scheduler passes. The callers check kill and shutdown next.
            return
        with self._interruptible():
            await trio.sleep(delay / 1e9)

    async def _should_restart(self) -> tuple[bool, int]:
        """Ask the tracker, and record its answer as Nomad's events."""
        decision = self.tracker.decide(self._mono())
        now = self._unix_clock()
        if decision.outcome != "Restarting" or decision.delay >= MIN_RESTART_SLEEP:
            # No zero-delay start follows: the ended run's end is written now, in a write of
            # its own, before the decision's event.
            await self._finish_ended(persist=True)
        if decision.outcome == "Killed":
            await self.emit_event(events.new_event(events.KILLED, now,
                                                   kill_error=self._kill_error))
            return False, 0
        if decision.outcome == "Not Restarting":
            await self.update_state(TASK_STATE_DEAD, events.new_event(
                events.NOT_RESTARTING, now, restart_reason=decision.reason, fails_task=True))
            return False, 0
        if decision.outcome == "Terminated":
            return False, 0
        if decision.outcome == "Restarting":
            # With no delay, written together with the start that follows at once.
            await self.update_state(TASK_STATE_PENDING, events.new_event(
                events.RESTARTING, now, start_delay=decision.delay,
                restart_reason=decision.reason), persist=decision.delay >= MIN_RESTART_SLEEP)
        return True, decision.delay

    # ------------------------------------------------------------------ phases

    async def _prestart(self) -> None:
        ctx = self._ctx()
        for hook in self._hooks(TaskPrestartHook):
            saved = self.local_state.hooks.get(hook.name)
            if saved is not None and saved.prestart_done:
                self._apply_hook(hook.name, saved)
                continue
            # A hook that may take long (a download) says so; a kill or shutdown cancels it.
            interruptible = bool(getattr(hook, "interruptible", False))
            try:
                with self._interruptible(kill=interruptible, shutdown=interruptible) as scope:
                    response = await hook.prestart(ctx, dict(saved.data) if saved else {})
            except Exception as e:
                recoverable = bool(getattr(e, "recoverable", False))
                own = getattr(e, "task_event", None)  # a hook's own event (Nomad's HookError)
                await self.emit_event(own if isinstance(own, TaskEvent) else events.new_event(
                    events.HOOK_FAILED, self._unix_clock(), message=f"{hook.name}: {e}"))
                raise HookError(f'prestart hook "{hook.name}" failed: {e}',
                                recoverable=recoverable) from e
            if scope.cancelled_caught:
                return  # killed or shut down: the caller acts on the flags, nothing is kept
            new = HookState(prestart_done=response.done, data=dict(response.data),
                            env=dict(response.env), mounts=list(response.mounts),
                            devices=list(response.devices))
            if new != saved:
                self.local_state.hooks[hook.name] = new
                await self._persist_local()
            self._apply_hook(hook.name, new)

    async def _set_up_and_start(self) -> TaskHandle | None:
        """Prestart hooks and the driver's start, holding one of the agent's start slots.

        The slot bounds how many tasks are between prestart and `Started` at once: a task
        that has its slot goes through every step without queueing behind the same step of
        every other task. Waiting for a slot is interrupted by a kill or shutdown; None when
        a kill came first. A task re-attached after an agent restart starts nothing, so it
        takes no slot (a thousand of them resume together, in one batch of writes)."""
        limiter = self._start_limiter
        acquired = False
        try:
            if self._handle is None:
                try:
                    limiter.acquire_nowait()  # no scheduler pass when a slot is free
                    acquired = True
                except trio.WouldBlock:
                    with self._interruptible():
                        await limiter.acquire()
                        acquired = True
            self._check_shutdown()
            if self._kill_requested:
                return None
            await self._prestart()
            self._check_shutdown()
            if self._kill_requested:
                return None
            return await self._start()
        finally:
            if acquired:
                limiter.release()

    def _apply_hook(self, name: str, state: HookState) -> None:
        self._hook_env[name] = dict(state.env)
        self._hook_mounts[name] = list(state.mounts)
        self._hook_devices[name] = list(state.devices)

    async def _start(self) -> TaskHandle | None:
        if self._handle is not None:
            # Re-attached after an agent restart: running already, and no new event.
            await self.update_state(TASK_STATE_RUNNING)
            return self._handle
        stdout, stderr = self._log_paths()
        config = dataclasses.replace(
            self.exec_config(f"{self.alloc.id}/{self.name}/{uuid.uuid4().hex[:8]}"),
            stdout_path=stdout, stderr_path=stderr,
            mounts=[m for hook in self.hooks for m in self._hook_mounts.get(hook.name, ())],
            devices=[d for hook in self.hooks for d in self._hook_devices.get(hook.name, ())])
        started: TaskHandle | None = None
        try:
            # A kill interrupts the start (a driver that hangs starting must not keep a
            # task from being killed); the driver reaps what it began. An agent shutdown
            # lets it finish, so the handle is persisted for the next start.
            with self._interruptible(shutdown=False):
                started = await self.driver.start_task(config)
        except DriverError as e:
            await self.emit_event(events.new_event(events.DRIVER_FAILURE, self._unix_clock(),
                                                   driver_error=str(e)))
            raise
        if started is None:
            return None
        handle = started
        self._handle = handle
        self.local_state.task_handle = handle
        self.local_state.restart_requested = False  # done: this is the restarted run
        await self.update_state(TASK_STATE_RUNNING,
                                events.new_event(events.STARTED, self._unix_clock()),
                                persist=False)
        # The handle, `Started`, and with a zero-delay restart the last run's `Terminated` and
        # `Restarting`.
        await self._persist_all()
        return handle

    async def _wait_for_exit(self, handle: TaskHandle) -> ExitResult:
        result: ExitResult | None = None
        with self._interruptible():
            result = await self._wait_driver(handle)
        self._check_shutdown()
        if result is None:  # killed while waiting
            result = await stopping.handle_kill(self, handle)
        # Written by `_finish_ended`, together with the handle it clears, or with the next
        # run's start.
        self._append(events.terminated(self._unix_clock(), result))
        self._on_state_updated()
        return result

    async def _clear_handle(self, handle: TaskHandle) -> None:
        """The task exited: forget its handle here, in the persisted state and in the driver
        (a restore must never re-attach to an invocation that is over)."""
        self._forget_handle(handle)
        await self._finish_ended(persist=True)

    @property
    def ended_handle(self) -> TaskHandle | None:
        """A run that ended and that the driver has not been told to forget yet."""
        return self._ended

    def _forget_handle(self, handle: TaskHandle) -> None:
        """The run of `handle` is over: no longer this runner's (nor, in memory, its local
        state's). Recording that and the driver's forgetting it wait in `_ended` for
        `_finish_ended`: with a zero-delay restart, until the next run has started."""
        self._handle = None
        self.local_state.task_handle = None
        self._ended = handle

    async def _finish_ended(self, *, persist: bool) -> None:
        """Persist that the last run ended (its `Terminated` and its cleared handle: one
        store batch), unless `persist` is False because the next run's write did; then let
        the driver forget the run. In this order: until the write, a restore re-attaches to
        the ended run and reads its end from what the driver keeps of it."""
        ended = self._ended
        if ended is None:
            return
        if persist:
            await self._persist_all()
        # Only now: a cancel during the write leaves the run for the teardown's forced
        # destroy (`ended_handle`), rather than with nobody to destroy it.
        self._ended = None
        try:
            await self.driver.destroy_task(ended.task_id, force=True)
        except DriverError as e:
            log.debug("destroying finished task %s: %s", ended.task_id, e)

    async def _wait_driver(self, handle: TaskHandle) -> ExitResult:
        """The task's exit as the driver reports it; a driver error is an exit with an error
        (Nomad reports exit code -1), never an exception out of the runner."""
        while True:
            try:
                return await self.driver.wait_task(handle.task_id)
            except PluginShutdownError:
                # The driver went away; it comes back with the task it had (Nomad
                # re-dispenses the plugin and recovers the task from its handle).
                try:
                    await self.driver.recover_task(handle)
                except DriverError as e:
                    return ExitResult(exit_code=-1, err=f"failed to recover task: {e}")
            except DriverError as e:
                return ExitResult(exit_code=-1, err=str(e))

    async def _run_hooks(self, phase: type[Hook], method: str) -> None:
        """Run every hook of a best-effort phase; failures are logged, never raised."""
        ctx = self._ctx()
        for hook in self._hooks(phase):
            try:
                await getattr(hook, method)(ctx)
            except Exception:
                log.exception('%s hook "%s" failed for task %s', method, hook.name, self.name)

    # ------------------------------------------------------------------ lifecycle ops
    # Called from other tasks than the runner's own; the work is in `ops.py`.

    async def kill(self, event: TaskEvent | None = None) -> str:
        """Kill the task and wait until this runner has finished, stop hooks included.

        Bounded by the caller's cancel scope. Returns the kill error ("" if none)."""
        return await ops.kill(self, event)

    def stop_now(self, killing: Callable[[], TaskEvent | None]) -> bool:
        """Begin the kill in the caller's step: signal the running task and mark this runner
        killed, without a checkpoint; False when the runner's own kill path must do it
        (`stopping.stop_at_once`). Follow with `kill()` to wait for the end."""
        return stopping.stop_at_once(self, killing)

    async def restart(self, event: TaskEvent, *, failure: bool = False) -> None:
        """Restart a running task: stop it and wait for the exit (the main loop starts it
        again). `failure=False` (a user restart) is immediate and not counted."""
        await ops.restart(self, event, failure=failure)

    async def force_restart(self, event: TaskEvent, *, failure: bool = False) -> None:
        """Like `restart`, but also reruns a dead task that has not been released yet."""
        await ops.force_restart(self, event, failure=failure)

    async def driver_event(self, message: str, timestamp: int,
                           annotations: dict[str, str]) -> None:
        """Something the driver said about this task: a `Driver` task event."""
        await ops.driver_event(self, message, timestamp, annotations)

    async def signal(self, event: TaskEvent, signal: str) -> None:
        await ops.signal(self, event, signal)

    def shutdown(self) -> None:
        """Agent shutdown: stop running this task's loop, leave the task itself alone."""
        ops.shutdown(self)

    async def shutdown_and_wait(self) -> None:
        await ops.shutdown_and_wait(self)

    async def after_shutdown(self) -> None:
        """Once stopped by `shutdown()`: shutdown hooks, local state persisted."""
        await ops.after_shutdown(self)

    async def mark_failed_kill(self, reason: str) -> None:
        """The alloc could not be set up: fail the task and send it down the kill path."""
        await ops.mark_failed_kill(self, reason)

    def skip_shutdown_delay(self) -> None:
        """A server copy of the allocation asked for no shutdown_delay
        (`DesiredTransition.NoShutdownDelay`): a wait under way ends, none starts."""
        self._skip_shutdown_delay = True
        if self._shutdown_delay_scope is not None:
            self._shutdown_delay_scope.cancel()

    async def update(self, alloc: Allocation) -> TaskEvent | None:
        """A new server copy of the allocation: run update hooks; the event to kill the
        task with if the update no longer has it."""
        return await ops.update(self, alloc)

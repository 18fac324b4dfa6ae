"""An allocation's teardown: the kill order, destroy and shutdown (Nomad's `killTasks`,
`destroyImpl` and `Shutdown` in `client/allocrunner/alloc_runner.go`).

Apart from the run loop (`runner.py`): the run loop owns the task runners and decides when
tasks die of their own accord; teardown is what others ask of an allocation from outside,
in the nursery lent to the alloc runner (or the caller's task, for `*_and_wait`).

Kill order (`kill_tasks`): prekill hooks, then the leader alone, then the other main tasks
together, then sidecars together; poststop tasks are never killed: once everything else is
dead the coordinator opens their stage and they run.

The first of those waves that has a live task is signalled at once (`signal_first_wave`), in
the caller's step: by the run loop right after the stop is persisted, and at the top of every
`kill_tasks`. Every allocation of a job stop wakes from the same commit, so every task gets its
signal in one scheduler pass, before any exit is processed (post-exit work, events and state
writes included, comes after); the kills then wait together as before. Only the first wave can
go at once: the next waits for it to end. With alloc prekill hooks, nothing goes at once.

One deadline per teardown, tail included (runtime/ARCHITECTURE.md, "The nursery tree": a driver
that never reports an exit cannot hang the agent). A destroy or shutdown takes the caller's
deadline (the agent's shutdown timeout) or its own default, keeps `TAIL_BUDGET` of it for the
tail, and runs shielded, so a caller cancelled halfway still gets a complete teardown, and
bounded, so the shield never outlives the deadline. Rejected: a shield per step with its own
timeout (the old way): each step was bounded, their sum was not (a dev-mode `destroy_all` took
290 s of its 30 s, then lost its destroy hooks and left the allocation in the state DB).

The functions work on the alloc runner's private state (same package, same invariants), which
`TeardownHost` spells out member by member: runner.py imports this module, and this module
knows the runner only by that protocol, so the two do not import each other.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import trio

from yurt.hooks.base import AllocDestroyHook, AllocPrekillHook, AllocShutdownHook, Hook
from yurt.runtime.client.allocrunner.broadcaster import AllocBroadcaster
from yurt.runtime.client.allocrunner.maxrun import MAX_RUN_EXCEEDED
from yurt.runtime.client.taskrunner import events
from yurt.runtime.errors import TaskNotFoundError, YurtError
from yurt.runtime.structs import TASK_STATE_DEAD, ZERO_TIME, Allocation, TaskEvent, TaskState

if TYPE_CHECKING:
    from yurt.runtime.client.taskrunner.runner import TaskRunner
    from yurt.store.protocol import StateDB

log = logging.getLogger("yurt.allocrunner")

#: The part of a teardown's budget kept for its tail (the final state persisted, destroy or
#: shutdown hooks, the state deleted): the kills get the rest.
TAIL_BUDGET: Final = 5.0
#: Of the tail, what the hooks may not use: the last write to the state DB.
DB_RESERVE: Final = 1.0
#: A shutdown's budget when its caller sets none (the runners only stop; tasks keep running).
SHUTDOWN_BUDGET: Final = 30.0

H = TypeVar("H", bound=Hook)


class UnixClock(Protocol):
    """The part of the runner's `AllocRunnerConfig` teardown reads: the clock of its events."""

    @property
    def unix_clock(self) -> Callable[[], int]: ...


class TeardownHost(Protocol):
    """The alloc runner (runner.py `AllocRunner`) as teardown sees it: its public face, and the
    run state it shares with its run loop."""

    @property
    def id(self) -> str: ...
    @property
    def alloc(self) -> Allocation: ...
    @property
    def task_runners(self) -> Mapping[str, TaskRunner]: ...
    @property
    def broadcaster(self) -> AllocBroadcaster[Allocation]: ...
    @property
    def wait_done(self) -> trio.Event: ...
    @property
    def destroyed(self) -> trio.Event: ...
    @property
    def shutdown_done(self) -> trio.Event: ...
    @property
    def _config(self) -> UnixClock: ...
    @property
    def _db(self) -> StateDB: ...
    @property
    def _run_launched(self) -> bool: ...
    @property
    def _shutdown_launched(self) -> bool: ...
    @property
    def max_run_exceeded(self) -> bool: ...
    @property
    def _runners_started(self) -> bool: ...
    @property
    def _kill_lock(self) -> trio.Lock: ...
    @property
    def _prerun_scope(self) -> trio.CancelScope: ...
    @property
    def _run_scope(self) -> trio.CancelScope: ...
    @property
    def _handler_done(self) -> trio.Event: ...
    def _hooks(self, phase: type[H]) -> list[H]: ...
    async def _run_hooks(self, phase: type[Hook], method: str, *args: object) -> None: ...
    async def _publish(self) -> None: ...


def _deadlines(default_budget: float) -> tuple[float, float]:
    """(end of the main phase, end of everything) for a teardown starting now: the caller's
    deadline if it has one (the agent's shutdown timeout, a test's), else `default_budget`.
    The tail gets `TAIL_BUDGET` of it, or a quarter of a smaller budget."""
    now = trio.current_time()
    end = trio.current_effective_deadline()
    if end == math.inf:
        end = now + default_budget
    tail = min(TAIL_BUDGET, max(end - now, 0.0) / 4)
    return end - tail, end


async def kill_one(ar: TeardownHost, tr: TaskRunner, event: TaskEvent | None) -> None:
    """Kill one task and wait for its runner, within the task's kill bound (a driver that
    never reports the exit must not hold up whatever waits for this)."""
    with trio.move_on_after(tr.kill_bound()) as scope:
        try:
            error = await tr.kill(event)
        except Exception:  # a failed kill is logged; it must not end the others
            log.exception("killing task %s of alloc %s failed", tr.name, ar.id)
            return
        if error:
            log.error("failed to kill task %s of alloc %s: %s", tr.name, ar.id, error)
    if scope.cancelled_caught:
        log.error("task %s of alloc %s did not stop within %.0fs; moving on",
                  tr.name, ar.id, tr.kill_bound())


def _killing(ar: TeardownHost, tr: TaskRunner) -> TaskEvent | None:
    """The `Killing` event for `tr`, or None: a task that finished already, or whose stop
    began at once (its event was appended then)."""
    if tr.state.finished_at != ZERO_TIME or tr.stop_begun:
        return None
    reason = ar.alloc.desired_description if ar.alloc.desired_status == "evict" else ""
    event = events.new_event(events.KILLING, ar._config.unix_clock(),
                             kill_timeout=tr.kill_timeout, kill_reason=reason)
    if ar.max_run_exceeded:  # alloc_runner.go `killTasks`
        event.display_message = MAX_RUN_EXCEEDED
    return event


def _waves(ar: TeardownHost) -> tuple[list[TaskRunner], list[TaskRunner], list[TaskRunner]]:
    """The kill order's waves: the leader, the other main tasks, the sidecars."""
    runners = [tr for tr in ar.task_runners.values() if not tr.is_poststop]
    return ([tr for tr in runners if tr.is_leader],
            [tr for tr in runners if not tr.is_leader and not tr.is_sidecar],
            [tr for tr in runners if not tr.is_leader and tr.is_sidecar])


def signal_first_wave(ar: TeardownHost) -> int:
    """Signal, in the caller's step, the running tasks of the first wave that has a live
    task (the waves after it wait for it to end, in `kill_tasks`); how many were signalled.
    Nothing with alloc prekill hooks: they run before any kill. Tasks the driver cannot
    signal at once, or that are being killed already, are left to `kill_tasks`."""
    if ar._hooks(AllocPrekillHook):
        return 0
    for wave in _waves(ar):
        if any(tr.state.state != TASK_STATE_DEAD for tr in wave):
            return sum(tr.stop_now(functools.partial(_killing, ar, tr)) for tr in wave)
    return 0


async def kill_tasks(ar: TeardownHost) -> dict[str, TaskState]:
    """Nomad's `killTasks` (`client/allocrunner/alloc_runner.go`): leader, then main, then
    sidecars; the first wave with a live task is signalled before the first checkpoint."""
    signal_first_wave(ar)
    async with ar._kill_lock:
        await ar._run_hooks(AllocPrekillHook, "prekill")

        async def kill(tr: TaskRunner) -> None:
            await kill_one(ar, tr, _killing(ar, tr))

        leaders, mains, sidecars = _waves(ar)
        for tr in leaders:
            await kill(tr)
        for group in (mains, sidecars):
            async with trio.open_nursery() as nursery:
                for tr in group:
                    nursery.start_soon(kill, tr)
        return {name: tr.task_state() for name, tr in ar.task_runners.items()}


def release_unstarted(ar: TeardownHost) -> None:
    """Stopping before the task runners started (prerun still waiting): end the prerun,
    and count the runners as finished, for there is nothing for them to stop."""
    if ar._runners_started:
        return
    ar._prerun_scope.cancel()
    for tr in ar.task_runners.values():
        tr.done.set()


async def destroy(ar: TeardownHost) -> None:
    """Nomad's `destroyImpl` under one deadline: kill (leader, main, sidecars), destroy what
    is left by force, then the tail: persist the final state, destroy hooks, delete the
    state. The deadline is the caller's, or the slowest task's kill bound plus the tail.

    Shielded, so a caller cancelled halfway (an agent shutting down) still gets the tail;
    bounded, so a driver that never reports an exit cannot stretch it: when the kills run
    out of time, the run loop is cancelled and the tail runs all the same.
    """
    default = max((tr.kill_bound() for tr in ar.task_runners.values()), default=0.0)
    kills_end, end = _deadlines(default + TAIL_BUDGET)
    try:
        with trio.CancelScope(shield=True, deadline=kills_end) as kills:
            if ar._shutdown_launched:
                await ar.shutdown_done.wait()
            release_unstarted(ar)
            if ar._run_launched:
                await kill_tasks(ar)
                # A runner cancelled from outside ended without stopping its task: a
                # destroy must not leave it behind.
                await force_destroy_tasks(ar)
                await ar.wait_done.wait()
        if kills.cancelled_caught:
            log.error("alloc %s: tasks did not stop within the destroy's deadline; "
                      "cancelling the runners", ar.id)
        with trio.CancelScope(shield=True, deadline=end):
            await _end_run(ar)
            # Kills cut by the deadline left their tasks running: SIGKILL what is left before
            # the hooks delete the alloc dir (and with it the record of every start).
            left = await force_destroy_tasks(ar) if kills.cancelled_caught else []
            await ar._publish()
            if left:
                # Deleting the state now would forget running processes; kept, the next
                # start re-attaches to them and finishes the stop.
                log.error("alloc %s: tasks %s could not be destroyed; its state is kept",
                          ar.id, ", ".join(left))
                return
            with trio.move_on_at(end - min(DB_RESERVE, (end - kills_end) / 2)):
                await ar._run_hooks(AllocDestroyHook, "destroy")
            await ar._db.delete_allocation_bucket(ar.id)
    finally:
        ar.broadcaster.close()
        ar.shutdown_done.set()
        ar.destroyed.set()


async def force_destroy_tasks(ar: TeardownHost) -> list[str]:
    """Destroy by force every task that still has a handle, and every ended run its runner
    had no time to hand back (cut while recording its end); the names of those whose driver
    failed (a task already gone counts as destroyed)."""
    failed = []
    for tr in ar.task_runners.values():
        for handle in (tr.handle, tr.ended_handle):
            if handle is None:
                continue
            try:
                await tr.driver.destroy_task(handle.task_id, force=True)
            except TaskNotFoundError:
                pass
            except YurtError as e:
                log.error("destroying task %s: %s", tr.name, e)
                failed.append(tr.name)
    return failed


async def _end_run(ar: TeardownHost) -> None:
    """Make sure the run loop and its state handler are over (cancelled if need be); a
    runner that never ran counts as over."""
    if ar._run_launched:
        ar._run_scope.cancel()  # a no-op when it already finished
        await ar.wait_done.wait()
    else:
        for tr in ar.task_runners.values():
            tr.done.set()
        ar.wait_done.set()
        ar._handler_done.set()
    await ar._handler_done.wait()


async def shutdown(ar: TeardownHost) -> None:
    """Agent shutdown under one deadline (the caller's, or `SHUTDOWN_BUDGET`): the runners
    stop, the tasks keep running, then the shutdown hooks. Runners that do not stop in time
    are cancelled; shielded like `destroy`."""
    main_end, end = _deadlines(SHUTDOWN_BUDGET)
    try:
        with trio.CancelScope(shield=True, deadline=main_end) as main:
            release_unstarted(ar)
            for tr in ar.task_runners.values():
                tr.shutdown()
            if ar._run_launched:
                await ar.wait_done.wait()
        if main.cancelled_caught:
            log.error("alloc %s: runners did not stop within the shutdown's deadline; "
                      "cancelling them", ar.id)
        with trio.CancelScope(shield=True, deadline=end):
            if ar._run_launched:
                ar._run_scope.cancel()
                await ar.wait_done.wait()
            async with trio.open_nursery() as nursery:  # one commit for all of them
                for tr in ar.task_runners.values():
                    nursery.start_soon(_after_shutdown, ar, tr)
            await ar._run_hooks(AllocShutdownHook, "shutdown")
    finally:
        ar.shutdown_done.set()


async def _after_shutdown(ar: TeardownHost, tr: TaskRunner) -> None:
    try:
        await tr.after_shutdown()
    except Exception:  # one task's failure must not cost the others their state
        log.exception("shutting down task %s of alloc %s", tr.name, ar.id)

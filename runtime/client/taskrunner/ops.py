"""The task runner's lifecycle operations: what the alloc runner and the API ask of a task.

`kill`, `restart`, `signal`, `shutdown` and `update` are called from other tasks than the
runner's own loop (`runner.py`); they only set flags, cancel the loop's scopes and wait, so
the loop stays the one place that decides what happens next. `TaskRunner`'s
methods of the same names delegate here; the functions work on the runner's private state
(same package, same invariants) and live apart only so the loop reads on its own.

Callers' waits: `kill()` and `restart()` wait on the runner's own completion (`done`) or the
driver's wait, *inside the caller's cancel scope*: a driver that never reports the exit
cannot hang a caller that set a deadline.

The import cycle `runner.py` → `ops.py` → `runner.py` (type-only, under `TYPE_CHECKING`, and
inside this package) is kept on purpose: `TaskRunner` is one class split across files, as
Nomad splits its task runner's lifecycle operations (`client/allocrunner/taskrunner/
lifecycle.go`: `Restart`, `Signal`, `Kill`) from its main loop (`task_runner.go`: `Run`). A
protocol here would only restate the runner's private state, member by member.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from yurt.hooks.base import TaskPrekillHook, TaskShutdownHook, TaskUpdateHook
from yurt.runtime.client.taskrunner import events, stopping
from yurt.runtime.errors import TaskNotRunningError
from yurt.runtime.structs import (
    TASK_STATE_DEAD,
    TASK_STATE_PENDING,
    TASK_STATE_RUNNING,
    Allocation,
    TaskEvent,
    TaskHandle,
)

if TYPE_CHECKING:
    from yurt.runtime.client.taskrunner.runner import TaskRunner

log = logging.getLogger("yurt.taskrunner")


async def kill(tr: TaskRunner, event: TaskEvent | None = None) -> str:
    """Kill the task and wait until this runner has finished, stop hooks included.

    Bounded by the caller's cancel scope: with a deadline, returns (by cancellation) at
    the deadline even if the driver never reports the exit. Returns the kill error
    ("" if none).
    """
    tr._request_kill()
    if event is not None:
        await tr.emit_event(event)
    await tr.done.wait()
    return tr._kill_error


async def restart(tr: TaskRunner, event: TaskEvent, *, failure: bool = False) -> None:
    """Restart a running task: stop it and wait for the exit (the main loop starts it
    again). `failure=False` (a user restart) is immediate and not counted."""
    if tr.state.state != TASK_STATE_RUNNING:
        raise TaskNotRunningError
    await restart_with(tr, event, failure)


async def force_restart(tr: TaskRunner, event: TaskEvent, *, failure: bool = False) -> None:
    """Like `restart`, but also reruns a dead task that has not been released yet."""
    if tr.state.state == TASK_STATE_PENDING or tr.done.is_set():
        raise TaskNotRunningError
    await restart_with(tr, event, failure)


async def restart_with(tr: TaskRunner, event: TaskEvent, failure: bool) -> None:
    """Stop the current run so the main loop starts the task again.

    The request is recorded on the tracker in the same step as the check that a run is
    there to take it (no await between): a run that is over already, or that ends while
    this waits, either consumes the request in its own decision or never sees it, so it
    never lingers into a later failure. A user restart is persisted before the stop, so a
    restarted agent resumes it instead of applying the policy's delay to the exit.
    """
    if tr.state.state == TASK_STATE_DEAD:
        tr.tracker.set_restart_triggered(failure=failure)
        tr._restart_wake.set()
        await tr.emit_event(event)
        return
    handle = tr._handle
    if handle is None:  # between runs: the main loop is deciding, or starting, already
        await tr.emit_event(event)
        return
    tr.tracker.set_restart_triggered(failure=failure)
    if failure:
        await tr.emit_event(event)
    else:
        # The event is appended at once (before the exit can be seen); the intent is
        # durable before the stop is sent.
        tr.local_state.restart_requested = True
        tr._append(event)
        tr._on_state_updated()
        await tr._persist_local()
        await tr._persist_state()
    await stop_for_restart(tr, handle)


async def stop_for_restart(tr: TaskRunner, handle: TaskHandle) -> None:
    """Stop a run for a restart and wait for its exit (the main loop decides the rest)."""
    await tr._run_hooks(TaskPrekillHook, "prekill")
    await stopping.stop_task(tr, handle)
    await tr._wait_driver(handle)


async def driver_event(tr: TaskRunner, message: str, timestamp: int,
                       annotations: dict[str, str]) -> None:
    """Something the driver said about this task: a `Driver` task event."""
    event = events.new_event(events.DRIVER_MESSAGE, timestamp, driver_message=message)
    event.details.update(annotations)
    await tr.emit_event(event)


async def signal(tr: TaskRunner, event: TaskEvent, signal: str) -> None:
    handle = tr._handle
    if handle is None:
        raise TaskNotRunningError
    await tr.emit_event(event)
    await tr.driver.signal_task(handle.task_id, signal)


def shutdown(tr: TaskRunner) -> None:
    """Agent shutdown: stop running this task's loop, leave the task itself alone."""
    tr._shutdown_requested = True
    for scope in list(tr._shutdown_scopes):
        scope.cancel()


async def shutdown_and_wait(tr: TaskRunner) -> None:
    tr.shutdown()
    await tr.done.wait()
    await after_shutdown(tr)


async def after_shutdown(tr: TaskRunner) -> None:
    """The runner stopped for an agent shutdown: shutdown hooks, then the local state
    persisted for the next start."""
    await tr._run_hooks(TaskShutdownHook, "shutdown")
    await tr._persist_local()


async def mark_failed_kill(tr: TaskRunner, reason: str) -> None:
    """The alloc could not be set up: fail the task and send it down the kill path."""
    tr._request_kill()
    await tr.emit_event(events.new_event(
        events.SETUP_FAILURE, tr._unix_clock(), display=reason, setup_error=reason,
        kill_reason=events.FAILED_RESTORING, fails_task=True))


async def update(tr: TaskRunner, alloc: Allocation) -> TaskEvent | None:
    """A new server copy of the allocation: run update hooks. If the update no longer
    has this task, return the event to kill it with (the caller starts the kill in the
    background, so one task's kill never holds up the next update)."""
    tr.alloc = alloc
    if alloc.is_terminal():
        await trio.lowlevel.checkpoint()
        return None
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    if group is not None and all(t.name != tr.name for t in group.tasks):
        await trio.lowlevel.checkpoint()
        return events.new_event(events.KILLED, tr._unix_clock(),
                                kill_reason="update missing task", fails_task=True)
    ctx = tr._ctx()
    for hook in tr._hooks(TaskUpdateHook):
        try:
            await hook.update(ctx, alloc)
        except Exception:
            log.exception('update hook "%s" failed for task %s', hook.name, tr.name)
    return None

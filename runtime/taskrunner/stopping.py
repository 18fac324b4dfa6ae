"""The task runner's kill path: how a running task is stopped (Nomad's `handleKill`).

Apart from the main loop (`runner.py`) so each can be read on its own: the main loop decides
*when* a task must die; this module is *how*: prekill hooks, the optional `shutdown_delay`
(task state `pending` meanwhile, as Nomad does), `SetKilled` on the tracker, `stop_task`
retried with Nomad's backoff (5 s, 20 s, 80 s, 120 s, 120 s), then the wait for the exit.

The functions take the runner and work on its private state: they belong to it as much as its
methods do (same package, same invariants); they only live in their own file.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from yurt.hooks.base import TaskPrekillHook
from yurt.runtime.durations import SECOND, format_duration
from yurt.runtime.errors import DriverError, TaskNotFoundError
from yurt.runtime.structs import TASK_STATE_PENDING, TaskHandle
from yurt.runtime.taskrunner import events
from yurt.runtime.taskrunner.restarts import ExitResult

if TYPE_CHECKING:
    from yurt.runtime.taskrunner.runner import TaskRunner

log = logging.getLogger("yurt.taskrunner")

KILL_FAILURE_LIMIT: Final = 5
KILL_BACKOFF_BASE: Final = 5 * SECOND
KILL_BACKOFF_LIMIT: Final = 120 * SECOND
DEFAULT_KILL_SIGNAL: Final = "SIGINT"
#: Upper bound on a task's kill_timeout, as the client's `max_kill_timeout` (Nomad: 30 s).
MAX_KILL_TIMEOUT: Final = 30 * SECOND


class TaskShutdown(Exception):
    """Internal: the agent is shutting down; leave the task as it is."""


def kill_backoff(attempt: int) -> int:
    """Nomad's stop-retry backoff after failed attempt `attempt` (0-based), in ns."""
    return int(min(4**attempt * KILL_BACKOFF_BASE, KILL_BACKOFF_LIMIT))


#: How long past its kill timeout a driver may take to stop a task, and to report its exit
#: once stopped, before the kill gives up on it.
STOP_GRACE: Final = 5 * SECOND

#: All of a stop's backoffs (5 s + 20 s + 80 s + 120 s), for callers that bound a kill.
STOP_RETRIES_TOTAL: Final = sum(kill_backoff(i) for i in range(KILL_FAILURE_LIMIT - 1))


async def handle_kill(tr: TaskRunner, handle: TaskHandle) -> ExitResult:
    """Kill the running task of `tr` and wait for its exit, within one bound: the shutdown
    delay, the stop (each attempt `kill_timeout` + `STOP_GRACE`, errors retried with
    backoff), then `STOP_GRACE` for the driver to report the exit. A driver that never
    reports it gets the exit `-1` with a kill error, so the task (and its allocation) still
    ends; the caller then destroys the task by force. An agent shutdown interrupts every
    step (`TaskShutdown`): the task is left as it is, and the next start resumes the kill.
    """
    await tr._run_hooks(TaskPrekillHook, "prekill")
    delay = tr.task.shutdown_delay
    if delay > 0:
        await tr.update_state(TASK_STATE_PENDING, events.new_event(
            events.WAITING_SHUTDOWN_DELAY, tr._unix_clock(),
            display=f"Waiting for shutdown_delay of {format_duration(delay)} before "
                    "killing the task."))
        with tr._interruptible(kill=False), trio.move_on_after(delay / 1e9):
            await tr._wait_driver(handle)
        tr._check_shutdown()
    tr.tracker.set_killed()
    with tr._interruptible(kill=False):
        tr._kill_error = await stop_task(tr, handle)
    tr._check_shutdown()
    with tr._interruptible(kill=False):
        with trio.move_on_after(STOP_GRACE / 1e9):
            return await tr._wait_driver(handle)
        error = f"task did not exit within {format_duration(STOP_GRACE)} of its stop"
        log.error("task %s of alloc %s: %s", tr.name, tr.alloc.id, error)
        tr._kill_error = "; ".join(e for e in (tr._kill_error, error) if e)
        return ExitResult(exit_code=-1, err=error)
    raise TaskShutdown  # only reached when shutdown cancelled the wait


async def stop_task(tr: TaskRunner, handle: TaskHandle) -> str:
    """`stop_task` with Nomad's retries; returns the last error, "" on success.

    An attempt that has not returned `STOP_GRACE` after the kill timeout is not retried: the
    driver does not answer, and waiting for it again would only push the stop's bound out.
    """
    signal = tr.task.kill_signal or DEFAULT_KILL_SIGNAL
    for attempt in range(KILL_FAILURE_LIMIT):
        try:
            with trio.move_on_after((tr.kill_timeout + STOP_GRACE) / 1e9) as scope:
                await tr.driver.stop_task(handle.task_id, tr.kill_timeout, signal)
            if scope.cancelled_caught:
                return (f"driver did not stop the task within "
                        f"{format_duration(tr.kill_timeout + STOP_GRACE)}")
            return ""
        except TaskNotFoundError:
            return ""
        except DriverError as e:
            if attempt == KILL_FAILURE_LIMIT - 1:
                return str(e)
            log.warning("stopping %s failed (attempt %d): %s", handle.task_id,
                        attempt + 1, e)
            await trio.sleep(kill_backoff(attempt) / 1e9)
    return ""  # pragma: no cover - the loop always returns


def kill_bound(shutdown_delay: int, kill_timeout: int) -> int:
    """The most a kill can take (ns): the shutdown delay, every stop attempt and backoff,
    and the wait for the exit. Callers that bound a kill add their own margin."""
    return (shutdown_delay + KILL_FAILURE_LIMIT * (kill_timeout + STOP_GRACE)
            + STOP_RETRIES_TOTAL + STOP_GRACE)

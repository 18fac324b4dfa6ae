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


#: All of a stop's backoffs (5 s + 20 s + 80 s + 120 s), for callers that bound a kill.
STOP_RETRIES_TOTAL: Final = sum(kill_backoff(i) for i in range(KILL_FAILURE_LIMIT - 1))


async def handle_kill(tr: TaskRunner, handle: TaskHandle) -> ExitResult:
    """Kill the running task of `tr` and wait for its exit."""
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
    tr._kill_error = await stop_task(tr, handle)
    with tr._interruptible(kill=False):
        return await tr._wait_driver(handle)
    raise TaskShutdown  # only reached when shutdown cancelled the wait


async def stop_task(tr: TaskRunner, handle: TaskHandle) -> str:
    """`stop_task` with Nomad's retries; returns the last error, "" on success."""
    signal = tr.task.kill_signal or DEFAULT_KILL_SIGNAL
    for attempt in range(KILL_FAILURE_LIMIT):
        try:
            await tr.driver.stop_task(handle.task_id, tr.kill_timeout, signal)
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

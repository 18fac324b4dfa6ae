"""The task runner's kill path: how a running task is stopped (Nomad's `handleKill`).

Apart from the main loop (`runner.py`) so each can be read on its own: the main loop decides
*when* a task must die; this module is *how*: prekill hooks, the optional `shutdown_delay`
(task state `pending` meanwhile, as Nomad does), `SetKilled` on the tracker, `stop_task`
retried with Nomad's backoff (5 s, 20 s, 80 s, 120 s, 120 s), then the wait for the exit.

A kill can also begin outside the runner's own task (`stop_at_once`): an allocation told to
stop signals its tasks in the very step that saw the stop persisted, so a job stop sends every
task's signal in one scheduler pass. Before, each signal waited for the kill request to travel
(the Killing event persisted, the runner woken, its kill path entered) while the first tasks'
exits were already being processed: at 500 tasks the signals went out over a second, the agent
short of CPU against hundreds of shims doing their exit work. The step that signals also marks
the runner killed (tracker, kill request, the Killing event appended), so however its task then
sees the exit, the answer is `Killed`, the events keep Nomad's order, and the runner's kill path
only waits: the driver sends a run's stop signal once (`StopsAtOnce`). Tasks that want something
done before their signal (prekill hooks, `shutdown_delay`) take the runner's path, as do drivers
that cannot signal without a checkpoint.

The functions take the runner and work on its private state: they belong to it as much as its
methods do (same package, same invariants); they only live in their own file. So the import
cycle `runner.py` → `stopping.py` → `runner.py` (type-only, under `TYPE_CHECKING`, and inside
this package) is kept on purpose: one class split across files, as Nomad splits its task
runner (`client/allocrunner/taskrunner/task_runner.go`, where `handleKill` and `killTask` live
beside `Run`, and `lifecycle.go`, which `ops.py` mirrors).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

import trio

from yurt.hooks.base import TaskPrekillHook
from yurt.runtime.client.drivers.protocol import ExitResult
from yurt.runtime.client.taskrunner import events
from yurt.runtime.errors import DriverError, TaskNotFoundError
from yurt.runtime.lib.durations import SECOND, format_duration
from yurt.runtime.structs import TASK_STATE_PENDING, TaskEvent, TaskHandle

if TYPE_CHECKING:
    from yurt.runtime.client.taskrunner.runner import TaskRunner

log = logging.getLogger("yurt.taskrunner")

KILL_FAILURE_LIMIT: Final = 5
KILL_BACKOFF_BASE: Final = 5 * SECOND
KILL_BACKOFF_LIMIT: Final = 120 * SECOND
DEFAULT_KILL_SIGNAL: Final = "SIGINT"
#: Upper bound on a task's kill_timeout, as the client's `max_kill_timeout` (Nomad: 30 s).
MAX_KILL_TIMEOUT: Final = 30 * SECOND


class TaskShutdown(Exception):
    """Internal: the agent is shutting down; leave the task as it is."""


def default_kill_signal(driver: object) -> str:
    """The signal a task without `kill_signal` is stopped with: the driver's
    `default_kill_signal` where it has one ("" for docker: Docker's own stop, the image's
    stop signal, as Nomad's drivers/docker/handle.go `Kill` does for an empty signal), else
    SIGINT (Nomad's executor default)."""
    return str(getattr(driver, "default_kill_signal", DEFAULT_KILL_SIGNAL))


def kill_backoff(attempt: int) -> int:
    """Nomad's stop-retry backoff after failed attempt `attempt` (0-based), in ns."""
    return int(min(4**attempt * KILL_BACKOFF_BASE, KILL_BACKOFF_LIMIT))


#: How long past its kill timeout a driver may take to stop a task, and to report its exit
#: once stopped, before the kill gives up on it.
STOP_GRACE: Final = 5 * SECOND

#: All of a stop's backoffs (5 s + 20 s + 80 s + 120 s), for callers that bound a kill.
STOP_RETRIES_TOTAL: Final = sum(kill_backoff(i) for i in range(KILL_FAILURE_LIMIT - 1))


@runtime_checkable
class StopsAtOnce(Protocol):
    """A driver that can send a stop's signal without a checkpoint (raw_exec)."""

    def begin_stop(self, task_id: str, kill_timeout: int, signal: str) -> bool:
        """Send the stop signal now; the run's next `stop_task` does not send it again and
        force-kills `kill_timeout` after it. False: no running task (nothing sent)."""
        ...


def stop_at_once(tr: TaskRunner, killing: Callable[[], TaskEvent | None]) -> bool:
    """Begin the kill of `tr`'s running task in the caller's step, without a checkpoint:
    the signal, then the runner marked killed and `killing()`'s event appended (persisted by
    the runner's next write). False, with nothing done, where the runner's own kill path must
    do it all: no running task, a kill or shutdown under way already, prekill hooks or a
    shutdown delay to honour first, a driver without `begin_stop`, or a driver error (the
    runner's path reports it)."""
    handle = tr._handle
    if (handle is None or tr._kill_requested or tr._shutdown_requested
            or tr.task.shutdown_delay > 0 or tr._hooks(TaskPrekillHook)):
        return False
    driver = tr.driver
    if not isinstance(driver, StopsAtOnce):
        return False
    try:
        if not driver.begin_stop(handle.task_id, tr.kill_timeout,
                                 tr.task.kill_signal or default_kill_signal(driver)):
            return False
    except DriverError as e:
        log.debug("stopping %s at once: %s", handle.task_id, e)
        return False
    event = killing()
    tr._stop_begun = True
    tr.tracker.set_killed()  # an exit seen before the kill path runs is a kill's exit
    tr._request_kill()
    if event is not None:
        tr._append(event)
        tr._on_state_updated()
    return True


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
    if delay > 0 and (tr._skip_shutdown_delay
                      or tr.alloc.desired_transition.should_ignore_shutdown_delay()):
        # Asked for no delay (`alloc stop -no-shutdown-delay`): Nomad says so in an event.
        await tr.update_state(TASK_STATE_PENDING, events.new_event(
            events.SKIPPING_SHUTDOWN_DELAY, tr._unix_clock(),
            display=f"Skipping shutdown_delay of {format_duration(delay)} before "
                    "killing the task."))
    elif delay > 0:
        await tr.update_state(TASK_STATE_PENDING, events.new_event(
            events.WAITING_SHUTDOWN_DELAY, tr._unix_clock(),
            display=f"Waiting for shutdown_delay of {format_duration(delay)} before "
                    "killing the task."))
        with tr._interruptible(kill=False), trio.move_on_after(delay / 1e9) as scope:
            tr._shutdown_delay_scope = scope  # cancelled by `skip_shutdown_delay`
            try:
                await tr._wait_driver(handle)
            finally:
                tr._shutdown_delay_scope = None
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
    signal = tr.task.kill_signal or default_kill_signal(tr.driver)
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

"""Task events: Nomad's event types, details and display messages, exactly.

Users, dashboards and tests read these strings, so they are Nomad's byte for byte
(`nomad/structs/structs.go` `TaskEvent`, `PopulateEventDisplayMessage`): `Sent interrupt.
Waiting 10ms before force killing`, `Task restarting in 15.5s`, `Exit Code: 1, Signal: 9`. Each
constructor fills `Details` (the string map Nomad's API carries) *and* the deprecated flat
fields, then derives `DisplayMessage` with `display_message`, a table from event type to message
rule, so no caller formats a display string by hand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from yurt.runtime.client.drivers.protocol import ExitResult
from yurt.runtime.client.taskrunner.restarts import REASON_WITHIN_POLICY
from yurt.runtime.lib.durations import format_duration
from yurt.runtime.structs import TaskEvent, TaskState

MAX_EVENTS: Final = 10  # a task keeps its last 10 events, as Nomad does

RECEIVED: Final = "Received"
SETUP: Final = "Task Setup"
STARTED: Final = "Started"
TERMINATED: Final = "Terminated"
RESTARTING: Final = "Restarting"
NOT_RESTARTING: Final = "Not Restarting"
RESTART_SIGNALED: Final = "Restart Signaled"
KILLING: Final = "Killing"
KILLED: Final = "Killed"
DRIVER_FAILURE: Final = "Driver Failure"
SETUP_FAILURE: Final = "Setup Failure"
FAILED_VALIDATION: Final = "Failed Validation"
SIBLING_FAILED: Final = "Sibling Task Failed"
LEADER_DEAD: Final = "Leader Task Dead"
MAIN_DEAD: Final = "Main Tasks Dead"
SIGNALING: Final = "Signaling"
DRIVER_MESSAGE: Final = "Driver"
HOOK_FAILED: Final = "Task hook failed"
WAITING_SHUTDOWN_DELAY: Final = "Waiting for shutdown delay"
SKIPPING_SHUTDOWN_DELAY: Final = "Skipping shutdown delay"
FAILED_RESTORING: Final = "Failed Restoring Task"

# Nomad's fixed user-restart reasons (`client/client.go` `RestartAllocation`).
USER_RESTART_TASK: Final = "User requested task to restart"
USER_RESTART_RUNNING: Final = "User requested running tasks to restart"
USER_RESTART_ALL: Final = "User requested all tasks to restart"


def _terminated(e: TaskEvent) -> str:
    parts = [f"Exit Code: {e.exit_code}"]
    if e.signal:
        parts.append(f"Signal: {e.signal}")
    if e.message:
        parts.append(f"Exit Message: {json.dumps(e.message, ensure_ascii=False)}")
    return ", ".join(parts)


def _restarting(e: TaskEvent) -> str:
    waiting = f"Task restarting in {format_duration(e.start_delay)}"
    if e.restart_reason and e.restart_reason != REASON_WITHIN_POLICY:
        return f"{e.restart_reason} - {waiting}"
    return waiting


def _killing(e: TaskEvent) -> str:
    if e.kill_reason:
        return e.kill_reason
    if e.kill_timeout:
        return f"Sent interrupt. Waiting {format_duration(e.kill_timeout)} before force killing"
    return "Sent interrupt"


def _signaling(e: TaskEvent) -> str:
    sig, reason = e.task_signal, e.task_signal_reason
    if not sig and not reason:
        return "Task being sent a signal"
    if not sig:
        return reason
    if not reason:
        return f"Task being sent signal {sig}"
    return f"Task being sent signal {sig}: {reason}"


_DISPLAY: Final[dict[str, Callable[[TaskEvent], str]]] = {
    SETUP: lambda e: e.message,
    STARTED: lambda e: "Task started by client",
    RECEIVED: lambda e: "Task received by client",
    FAILED_VALIDATION: lambda e: e.validation_error or "Validation of task failed",
    SETUP_FAILURE: lambda e: e.setup_error or "Task setup failed",
    DRIVER_FAILURE: lambda e: e.driver_error or "Failed to start task",
    KILLING: _killing,
    KILLED: lambda e: e.kill_error or "Task successfully killed",
    TERMINATED: _terminated,
    RESTARTING: _restarting,
    NOT_RESTARTING: lambda e: e.restart_reason or "Task exceeded restart policy",
    SIBLING_FAILED: lambda e: (f"Task's sibling {json.dumps(e.failed_sibling)} failed"
                               if e.failed_sibling else "Task's sibling failed"),
    SIGNALING: _signaling,
    RESTART_SIGNALED: lambda e: e.restart_reason or "Task signaled to restart",
    DRIVER_MESSAGE: lambda e: e.driver_message,
    LEADER_DEAD: lambda e: "Leader Task in Group dead",
    MAIN_DEAD: lambda e: "Main tasks in the group died",
    "Reconnected": lambda e: "Client reconnected",
}


def display_message(event: TaskEvent) -> str:
    """Nomad's `PopulateEventDisplayMessage` for `event`."""
    rule = _DISPLAY.get(event.type)
    return rule(event) if rule is not None else event.message


def new_event(type_: str, time: int, *, display: str = "", **fields: object) -> TaskEvent:
    """An event of `type_` at unix time `time` (ns); `fields` are TaskEvent attributes.

    Details are derived from the fields the way Nomad's setters fill them, then the display
    message (unless `display` overrides it).
    """
    event = TaskEvent(type=type_, time=time, **fields)  # type: ignore[arg-type]
    details = event.details
    for attr, key in _DETAIL_KEYS:
        value = getattr(event, attr)
        if value:
            details[key] = "true" if value is True else str(value)
    event.display_message = display or display_message(event)
    return event


#: TaskEvent attribute → Details key, as Nomad's `TaskEvent.Set*` methods write them.
_DETAIL_KEYS: Final = (
    ("fails_task", "fails_task"), ("restart_reason", "restart_reason"),
    ("setup_error", "setup_error"), ("driver_error", "driver_error"),
    ("exit_code", "exit_code"), ("signal", "signal"), ("kill_reason", "kill_reason"),
    ("kill_timeout", "kill_timeout"), ("kill_error", "kill_error"),
    ("start_delay", "start_delay"), ("validation_error", "validation_error"),
    ("failed_sibling", "failed_sibling"), ("task_signal_reason", "task_signal_reason"),
    ("task_signal", "task_signal"), ("driver_message", "driver_message"),
)


def terminated(time: int, result: ExitResult) -> TaskEvent:
    """`Terminated`, with the details Nomad always sets (exit code, signal, OOM flag)."""
    ev = new_event(TERMINATED, time, exit_code=result.exit_code, signal=result.signal,
                   message=result.err)
    ev.details["exit_code"] = str(result.exit_code)
    ev.details["signal"] = str(result.signal)
    ev.details["oom_killed"] = "true" if result.oom_killed else "false"
    if result.err:
        ev.details["exit_message"] = result.err
    return ev


def datetime_of(unix_ns: int) -> datetime:
    return datetime.fromtimestamp(unix_ns / 1e9, tz=UTC)


def append_event(state: TaskState, event: TaskEvent) -> None:
    """Add `event` to `state` as Nomad's `appendEvent` does: fail the task for a failing
    event, count restarts, keep only the last `MAX_EVENTS`."""
    if event.fails_task:
        state.failed = True
    if event.type == RESTARTING:
        state.restarts += 1
        state.last_restart = datetime_of(event.time)
    state.events.append(event)
    if len(state.events) > MAX_EVENTS:
        del state.events[: len(state.events) - MAX_EVENTS]

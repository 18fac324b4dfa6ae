"""The agent's log: what `yurt agent --log-level L [--log-json]` writes, one line per event.

What an operator wants from a daemon's log is one line per thing that happened to the work it
runs — an allocation started, stopped, failed; a task restarted; an allocation re-attached after
an agent restart; a driver became unhealthy — each carrying the IDs to search by. Nomad's agent
writes exactly that through hclog, so the format here is hclog's:

    2026-12-01T10:30:00.123Z [INFO]  alloc: task started: alloc_id=… job=web group=g task=t
    {"@timestamp": "2026-12-01T10:30:00.123Z", "@level": "info", "@module": "alloc",
     "@message": "task started", "alloc_id": "…", "job": "web", "group": "g", "task": "t"}

(the second on one line). The stdlib `logging` carries it: every module already logs to a
`yurt.*` logger, so `configure` puts one handler on `yurt` and nothing else changes for them.
Structured fields ride on a record as `extra=fields(...)` (`lib/logfields.py`); a record
without them (the existing `%`-formatted calls) is just a message.

`AllocEvents` decides which lines an allocation update deserves. It is a pure state machine
(no clock, no I/O, no logger): fed each client view of an allocation, it returns the lines for
what changed since the last view — a client-status transition, and each task event newer than
the newest one already seen (task events are a ring of ten, so counting them would miss events
once the ring is full; their times only grow). A restored allocation is first `known`, so a
restart of the agent does not repeat an allocation's history.

The formats live in lib/logformat.py, shared with `/v1/agent/monitor`, which follows this log
live through lib/logmonitor.py's fan-out (a slow follower loses lines, never slows the agent).

Rejected: deriving lines from the event broker (the server publishes allocation updates as it
commits them, after batching, and drops them for slow subscribers by design); a logging
library (structlog and the like): the stdlib does this in a page.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import IO, Any, Final, final

from yurt.runtime.lib.logformat import LEVELS, HumanFormatter, JsonFormatter, level_number
from yurt.runtime.structs import Allocation, TaskEvent

__all__ = ["LEVELS", "AllocEvents", "HumanFormatter", "JsonFormatter", "configure"]

def configure(level: str, json_lines: bool, stream: IO[str], *,
              include_location: bool = False) -> logging.Handler:
    """Send every `yurt.*` logger's records at `level` or above to `stream`, one line each.

    Args:
        level: one of `LEVELS` (any case).
        json_lines: hclog's JSON format instead of its text format.
        stream: where the lines go (the agent's stdout, as Nomad's agent logs).
        include_location: each line names its caller, `file:line` (Nomad's agent
            `log_include_location`, hclog's `IncludeLocation`).

    Returns:
        The handler installed (tests remove it again).

    Raises:
        ValueError: `level` is not one of `LEVELS`.
    """
    threshold = level_number(level)
    handler = logging.StreamHandler(stream)
    # Its own level too: `yurt monitor -log-level=debug` lowers the logger's while it follows
    # (lib/logmonitor.py), and this stream must not grow with it.
    handler.setLevel(threshold)
    handler.setFormatter(JsonFormatter(include_location) if json_lines
                         else HumanFormatter(include_location))
    root = logging.getLogger("yurt")
    for old in [h for h in root.handlers if getattr(h, "yurt_agent_log", False)]:
        root.removeHandler(old)
    handler.yurt_agent_log = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(threshold)
    root.propagate = False  # the last-resort handler would print warnings twice
    return handler


# --------------------------------------------------------------------------- what to log

#: A line to log: level, message, fields.
Line = tuple[int, str, dict[str, Any]]

#: Task events that fail a task, whatever their `fails_task` says.
_FAILURES: Final = frozenset({"Driver Failure", "Setup Failure", "Failed Validation",
                              "Task hook failed", "Failed Restoring Task"})


#: Events after which a task's exit was asked for: its signal is no warning.
_ASKED_TO_EXIT: Final = frozenset({"Killing", "Restart Signaled"})


def _event_line(event: TaskEvent, previous: str = "") -> tuple[int, str, dict[str, Any]]:
    """The level, message and event-specific fields for one task event; `previous`: the type
    of the task's event before it."""
    kind = event.type
    if kind == "Started":
        return logging.INFO, "task started", {}
    if kind == "Restarting":
        return logging.INFO, "task restarting", {"reason": event.restart_reason,
                                                 "delay_ms": event.start_delay // 1_000_000}
    if kind == "Restart Signaled":
        return logging.INFO, "task restart requested", {"reason": event.restart_reason}
    if kind == "Terminated":
        unasked = (event.exit_code or event.signal) and previous not in _ASKED_TO_EXIT
        level = logging.WARNING if unasked else logging.INFO
        return level, "task exited", {"exit_code": event.exit_code,
                                             "signal": event.signal,
                                             **({"message": event.message}
                                                if event.message else {})}
    if kind == "Killed":
        return logging.INFO, "task killed", {}
    if kind == "Not Restarting":
        return logging.WARNING, "task not restarting", {"reason": event.restart_reason}
    if kind in _FAILURES or event.fails_task:
        error = (event.driver_error or event.setup_error or event.validation_error
                 or event.display_message or event.message)
        return logging.ERROR, "task failed", {"type": kind, "error": error}
    return logging.DEBUG, "task event", {"type": kind, "message": event.display_message}


def _status_line(alloc: Allocation, before: str, started: bool) -> tuple[int, str] | None:
    """The line for the allocation's client status moving from `before` to what it is;
    `started`: it was running before (a task restart passes through pending)."""
    now = alloc.client_status
    if now == before:
        return None
    if now == "running":
        return (logging.DEBUG, "allocation running") if started else (
            logging.INFO, "allocation started")
    if now == "complete":
        stopped = alloc.desired_status in ("stop", "evict")
        return logging.INFO, "allocation stopped" if stopped else "allocation complete"
    if now == "failed":
        return logging.ERROR, "allocation failed"
    if now == "lost":
        return logging.WARNING, "allocation lost"
    return logging.DEBUG, f"allocation {now}"


@dataclass
class _Seen:
    client_status: str
    started: bool = False  # it has been running: "allocation started" is said once
    #: Task name → time (unix ns) of the newest event already logged.
    newest: dict[str, int] = field(default_factory=dict)


@final
class AllocEvents:
    """Which log lines each client view of an allocation deserves (see the module header)."""

    def __init__(self) -> None:
        self._seen: dict[str, _Seen] = {}

    def known(self, alloc: Allocation) -> None:
        """Take `alloc` as already logged: what it holds now is history, not news."""
        self._seen[alloc.id] = _Seen(alloc.client_status, alloc.client_status != "pending", {
            name: max((e.time for e in state.events), default=0)
            for name, state in alloc.task_states.items()})

    def forget(self, alloc_id: str) -> None:
        self._seen.pop(alloc_id, None)

    def observe(self, alloc: Allocation) -> list[Line]:
        """The lines for what changed in `alloc` since it was last observed, in order: the
        tasks' new events by time, then the allocation's status change."""
        seen = self._seen.setdefault(alloc.id, _Seen("pending"))
        base = {"alloc_id": alloc.id, "job": alloc.job_id, "group": alloc.task_group}
        events: list[tuple[int, str, TaskEvent, str]] = []
        for name, state in alloc.task_states.items():
            newest = seen.newest.get(name, 0)
            for i, e in enumerate(state.events):
                if e.time > newest:
                    events.append((e.time, name, e, state.events[i - 1].type if i else ""))
                    seen.newest[name] = max(seen.newest.get(name, 0), e.time)
        lines: list[Line] = []
        for _, name, event, previous in sorted(events, key=lambda x: (x[0], x[1])):
            level, message, extra = _event_line(event, previous)
            lines.append((level, message, {**base, "task": name, **extra}))
        status = _status_line(alloc, seen.client_status, seen.started)
        seen.client_status = alloc.client_status
        seen.started = seen.started or alloc.client_status == "running"
        if status is not None:
            lines.append((status[0], status[1], {**base, "client_status": alloc.client_status}))
        return lines

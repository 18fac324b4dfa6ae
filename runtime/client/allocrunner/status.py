"""Client status rules: from task states to the allocation's client status.

Nomad's `getClientStatus` (`client/allocrunner/alloc_runner.go`), as a table of rules tried in
order. Failed beats running: a failed task with others still running reports `failed`, because
the allocation cannot become healthy any more. `lost` and `unknown` are server-side; the client
never computes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from yurt.runtime.structs import (
    ALLOC_CLIENT_COMPLETE,
    ALLOC_CLIENT_FAILED,
    ALLOC_CLIENT_PENDING,
    ALLOC_CLIENT_RUNNING,
    TASK_STATE_DEAD,
    TASK_STATE_PENDING,
    TASK_STATE_RUNNING,
    TaskState,
)

_RULES: Final[tuple[tuple[Callable[[TaskState], bool], str, str], ...]] = (
    (lambda t: t.state == TASK_STATE_DEAD and t.failed, ALLOC_CLIENT_FAILED, "Failed tasks"),
    (lambda t: t.state == TASK_STATE_RUNNING, ALLOC_CLIENT_RUNNING, "Tasks are running"),
    (lambda t: t.state == TASK_STATE_PENDING, ALLOC_CLIENT_PENDING, "No tasks have started"),
    (lambda t: t.state == TASK_STATE_DEAD, ALLOC_CLIENT_COMPLETE, "All tasks have completed"),
)


def client_status(states: Iterable[TaskState]) -> tuple[str, str]:
    """(status, description) for an allocation whose tasks are in `states`."""
    states = list(states)
    for matches, status, description in _RULES:
        if any(matches(t) for t in states):
            return status, description
    return "", ""

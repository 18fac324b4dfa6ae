"""The base of every struct (Nomad's PascalCase JSON names, untracked by the cyclic GC), the
`Duration` type, Go's zero time and the status constants everything shares.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Final

import msgspec

#: Integer nanoseconds. The metadata tells the jobspec layer to accept `"15s"`-style strings.
Duration = Annotated[int, msgspec.Meta(extra={"yurt_kind": "duration"})]

#: Go's zero `time.Time`, which Nomad's JSON carries for "never".
ZERO_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)

JOB_TYPES: Final = ("service", "batch", "system", "sysbatch")
LIFECYCLE_HOOKS: Final = ("prestart", "poststart", "poststop")
RESTART_MODES: Final = ("delay", "fail")

# Task states (TaskState.State) and allocation client statuses, as Nomad spells them.
TASK_STATE_PENDING: Final = "pending"
TASK_STATE_RUNNING: Final = "running"
TASK_STATE_DEAD: Final = "dead"

ALLOC_CLIENT_PENDING: Final = "pending"
ALLOC_CLIENT_RUNNING: Final = "running"
ALLOC_CLIENT_COMPLETE: Final = "complete"
ALLOC_CLIENT_FAILED: Final = "failed"
ALLOC_CLIENT_LOST: Final = "lost"
#: On a disconnected node, within its group's disconnect window
#: (runtime/server/scheduler/disconnect.py).
ALLOC_CLIENT_UNKNOWN: Final = "unknown"

ALLOC_DESIRED_RUN: Final = "run"
ALLOC_DESIRED_STOP: Final = "stop"
ALLOC_DESIRED_EVICT: Final = "evict"


class Base(msgspec.Struct, kw_only=True, rename="pascal", gc=False):
    """Common options: PascalCase JSON names unless a field says otherwise, and instances
    untracked by Python's cyclic garbage collector (`gc=False`): the data model is a tree,
    never a cycle, and an agent holds tens of thousands of these, which a tracked collector
    would rescan on every full collection."""

"""A group's `max_run_duration` (Nomad 1.10, batch and sysbatch jobs): an allocation still
running that long after it was created is stopped by its client (Nomad's
client/allocrunner/max_run_duration_hook.go and alloc_runner.go
`EnforceMaxRunDurationTimeout`).

`deadline` is Nomad's `currentDeadline`: the allocation's `CreateTime` plus the duration, for
an allocation that is not terminal and whose desired status is run; none otherwise (so a stop
or an update that removes the field disarms it). `watch_max_run_duration` runs in the alloc
runner's service nursery, re-reading the deadline whenever the server's copy changes; when it
passes it marks the runner (`max_run_exceeded`) and kills its tasks in the usual order. Their
`Killing` events then say `MAX_RUN_EXCEEDED`, and the allocation ends `complete` with that
description, as in Nomad.

Invariants: the deadline is anchored to `CreateTime`, so it survives agent restarts and task
restarts; nothing happens during an agent shutdown or a destroy.
"""

from __future__ import annotations

from typing import Final, Protocol

import trio

from yurt.runtime.structs import Allocation

#: nomad/structs/alloc.go `AllocTimeoutReasonMaxRunDuration`.
MAX_RUN_EXCEEDED: Final = "allocation exceeded max_run_duration"


def deadline(alloc: Allocation) -> int | None:
    """Unix ns when `alloc` must stop, or None (Nomad's `currentDeadline`)."""
    if alloc.is_terminal() or alloc.desired_status not in ("", "run"):
        return None
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    if group is None or not group.max_run_duration or not alloc.create_time:
        return None
    return alloc.create_time + group.max_run_duration


class MaxRunHost(Protocol):
    """The alloc runner as the watch sees it."""

    @property
    def alloc(self) -> Allocation: ...
    @property
    def alloc_changed(self) -> trio.Event: ...
    @property
    def stopping(self) -> bool: ...

    def unix_now(self) -> int: ...
    async def enforce_max_run_duration(self) -> None: ...


async def watch_max_run_duration(host: MaxRunHost) -> None:
    """Until the deadline passes (then enforce it) or the runner stops."""
    while True:
        changed = host.alloc_changed
        due = deadline(host.alloc)
        if due is None:
            await changed.wait()
            continue
        with trio.move_on_after(max(due - host.unix_now(), 0) / 1e9):
            await changed.wait()
            continue
        if host.stopping or deadline(host.alloc) is None:
            return
        await host.enforce_max_run_duration()
        return

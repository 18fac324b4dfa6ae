"""Allocations whose node is down, disconnected or back: what the generic scheduler does with
them. Pure: no I/O; time is a parameter.

Nomad's reconciler (scheduler/reconciler/filters.go `classifyAllocs`, reconcile_cluster.go
`reconcileReconnecting`, reconnecting_picker.go) sorts a job's live allocations by the state
of their node; yurt keeps the cases it has:

- **lost**: the node is down or gone; or it is disconnected and the group allows no
  disconnect window (`max_client_disconnect`, or `disconnect { lost_after }`, which wins);
  or the allocation was still pending there; or it has been unknown longer than the window.
  A lost allocation is stopped (ClientStatus lost) and replaced at once, unless a
  replacement already runs under its name (one placed when it went unknown).
- **disconnecting**: on a disconnected node, within the window, not yet unknown. It becomes
  ClientStatus unknown (ClientDescription in Nomad's words, still desired to run), a
  replacement is placed at once, and a follow-up evaluation at the end of the window marks
  it lost if its node is still away.
- **waiting**: unknown on a node still disconnected, within the window: left as it is; it
  holds no name (its replacement does).
- **reconnecting**: on a ready node again while a replacement it got runs too (its
  direct replacement, or the replacement of one that failed or was lost meanwhile). Nomad's
  picker (reconnecting_picker.go `pickReconnectingAlloc`) decides: the replacement of a
  newer job version wins; else the group's `disconnect { reconcile }`: `keep_original`,
  `keep_replacement`, `longest_running` (the one whose leader, or oldest main task, started
  first; with neither started, as best_score), or `best_score`, the default (yurt keeps no
  scores, and with none Nomad keeps the original). The loser is stopped, so exactly one runs.

`disconnect { replace = false }` (`replaces_disconnected`): an allocation that goes unknown
is not replaced while it waits; only once it is lost.

When an allocation went unknown is its `ModifyTime` as the scheduler set it (Nomad reads
the last `unknown` entry of `AllocStates`, which yurt does not keep): the client of a
disconnected node cannot update it, and the scheduler leaves a waiting allocation alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from yurt.runtime.structs import (
    ALLOC_CLIENT_PENDING,
    ALLOC_CLIENT_UNKNOWN,
    NODE_STATUS_DISCONNECTED,
    NODE_STATUS_DOWN,
    ZERO_TIME,
    Allocation,
    Job,
    Node,
    TaskGroup,
)

#: Nomad's StatusAllocLost, StatusAllocUnknown, StatusAllocReconnected, StatusAllocNotNeeded.
ALLOC_LOST: Final = "alloc is lost since its node is down"
ALLOC_UNKNOWN: Final = "alloc is unknown since its node is disconnected"
ALLOC_RECONNECTED: Final = "alloc not needed due to disconnected client reconnect"
ALLOC_NOT_NEEDED: Final = "alloc not needed due to job update"
#: Nomad's EvalTriggerMaxDisconnectTimeout and DescDisconnectTimeoutFollowupEval.
TRIGGER_DISCONNECT_TIMEOUT: Final = "max-disconnect-timeout"
DISCONNECT_FOLLOW_UP: Final = "created for delayed disconnect timeout"


def replaces_disconnected(alloc: Allocation) -> bool:
    """Whether an unknown allocation gets a replacement at once (`disconnect.replace`,
    Nomad's default true)."""
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    return group is None or group.disconnect is None or group.disconnect.replace is not False


def lost_after(alloc: Allocation) -> int:
    """The group's disconnect window in ns (0: none), as the allocation's job version says."""
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    if group is None:
        return 0
    if group.disconnect is not None and group.disconnect.lost_after:
        return group.disconnect.lost_after
    return group.max_client_disconnect or 0


@dataclass
class NodeStates:
    """A job's live allocations sorted by the state of their node."""

    lost: set[str] = field(default_factory=set)
    disconnecting: list[Allocation] = field(default_factory=list)
    #: Left out of this pass: waiting ones, and reconnect losers (stopped, in `stop`).
    aside: set[str] = field(default_factory=set)
    #: Reconnect losers to stop, with Nomad's description.
    stop: list[tuple[Allocation, str]] = field(default_factory=list)


def classify(live: Iterable[Allocation], nodes: dict[str, Node], now: int,
             history: Iterable[Allocation] = ()) -> NodeStates:
    """Sort `live` (a job's allocations that are not terminal) by their node's state.
    `history`: every allocation of the job, terminal ones too, through which a replacement
    is traced back to the original it replaces (`_replaces`)."""
    allocs = list(live)
    by_id = {a.id: a for a in history}
    by_id.update((a.id, a) for a in allocs)
    out = NodeStates()
    for alloc in allocs:
        node = nodes.get(alloc.node_id)
        window = lost_after(alloc)
        if node is None or node.status == NODE_STATUS_DOWN:
            out.lost.add(alloc.id)
        elif alloc.client_status == ALLOC_CLIENT_UNKNOWN and (
                window == 0 or alloc.modify_time + window <= now):
            out.lost.add(alloc.id)  # expired (Nomad's Expired)
        elif node.status == NODE_STATUS_DISCONNECTED:
            if alloc.client_status == ALLOC_CLIENT_UNKNOWN:
                out.aside.add(alloc.id)
            elif alloc.client_status == ALLOC_CLIENT_PENDING or window == 0:
                out.lost.add(alloc.id)
            else:
                out.disconnecting.append(alloc)
    # Reconnecting: an original back on a ready node beside the replacement it got.
    for original in allocs:
        if original.id in out.lost or original.id in out.aside or original.id in {
                a.id for a in out.disconnecting}:
            continue
        replacement = next((a for a in allocs if a.name == original.name
                            and a.id not in out.aside and _replaces(a, original, by_id)),
                           None)
        if replacement is None or replacement.id in out.lost:
            continue
        if _newer(replacement.job, original.job):
            out.stop.append((original, ALLOC_NOT_NEEDED))
            out.aside.add(original.id)
        elif _keeps_replacement(original, replacement):
            out.stop.append((original, ALLOC_RECONNECTED))
            out.aside.add(original.id)
        else:
            out.stop.append((replacement, ALLOC_RECONNECTED))
            out.aside.add(replacement.id)
    return out


def _replaces(alloc: Allocation, original: Allocation, by_id: dict[str, Allocation]) -> bool:
    """Whether `alloc` descends from `original` through `previous_allocation`: its direct
    replacement, or the replacement of a replacement that failed or was lost meanwhile
    (Nomad's reconciler takes any later allocation of the same name for a reconnecting
    one's replacement; following the chain keeps a canary, which replaces nothing, out)."""
    seen: set[str] = set()
    previous = alloc.previous_allocation
    while previous and previous not in seen:
        if previous == original.id:
            return True
        seen.add(previous)
        before = by_id.get(previous)
        previous = before.previous_allocation if before is not None else ""
    return False


def _newer(replacement: Job | None, original: Job | None) -> bool:
    """Nomad's `replacementIsNewer`."""
    if replacement is None or original is None:
        return False
    return (replacement.version > original.version
            or replacement.create_index > original.create_index)


def _keeps_replacement(original: Allocation, replacement: Allocation) -> bool:
    """The group's `reconcile` strategy between an original and its replacement of the same
    job version (reconnecting_picker.go)."""
    group = original.job.lookup_group(original.task_group) if original.job else None
    strategy = group.disconnect.reconcile if group and group.disconnect else ""
    if strategy == "keep_replacement":
        return True
    if strategy == "longest_running" and group is not None:
        first, second = _started(original, group), _started(replacement, group)
        if first is None or second is None:
            return first is None and second is not None
        return second < first
    return False  # keep_original; best_score without scores keeps the original


def _started(alloc: Allocation, group: TaskGroup) -> datetime | None:
    """Nomad's `startOfLeaderOrOldestTaskInMain`: the leader's last start, else the oldest
    last start of the group's tasks; None when none started."""
    starts: list[datetime] = []
    for task in group.tasks:
        state = alloc.task_states.get(task.name)
        start = None
        if state is not None:
            start = state.last_restart if state.last_restart != ZERO_TIME else state.started_at
        if task.leader:
            return start if start is not None and start != ZERO_TIME else None
        if start is not None and start != ZERO_TIME:
            starts.append(start)
    return min(starts, default=None)

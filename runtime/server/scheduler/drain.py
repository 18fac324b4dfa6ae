"""Node drain and eligibility, sans-io: which allocations a draining node stops, and when.

Nomad's drainer (nomad/drainer) moves a node's allocations elsewhere in waves: per task group,
at most `migrate { max_parallel }` of them are on their way at once; batch allocations are left
to finish; system allocations go last, once everything else is done (or stay, with
`IgnoreSystemJobs`); and once the drain's deadline passes, everything left is stopped at once
and the drain is over. The node stays ineligible afterwards, until an operator says otherwise.

Nomad releases the next wave once the previous wave's replacements are healthy (their
`DeploymentStatus.Healthy`, which the client's health tracker sets with the group's `migrate`
strategy): an allocation on its way out stops counting against `max_parallel` once its
replacement (`NextAllocation`, looked up in `known`) is healthy. On one node there is nowhere
to move to: a stopped allocation's replacement cannot be placed (the node is ineligible) and
waits as a blocked evaluation until the node is eligible again, so the next wave also goes once
the previous wave's allocations are dead (client-terminal). Without that, a drain without a
deadline could never finish on one node.

Everything here is a pure function of the drain strategy, the node's allocations and the time
(unix ns, a parameter, never read here), so tests assert each decision without a clock;
runtime/server/nodestate.py runs it against the live server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from yurt.runtime.server.scheduler.deployments import is_healthy
from yurt.runtime.structs import (
    NODE_ELIGIBLE,
    ZERO_TIME,
    Allocation,
    DrainStrategy,
    Node,
    is_client_terminal,
)

#: What a placement on a node that takes no new allocations reports (Nomad's eval message
#: when every node was filtered out).
NODE_INELIGIBLE_REASON: Final = "No nodes were eligible for evaluation (node is {})"


def node_refusal(node: Node) -> str:
    """Why `node` takes no new allocations (ineligible or draining), or "" if it does."""
    if node.drain_strategy is not None:
        return NODE_INELIGIBLE_REASON.format("draining")
    if node.scheduling_eligibility != NODE_ELIGIBLE:
        return NODE_INELIGIBLE_REASON.format("ineligible")
    return ""


def unix_ns(moment: datetime) -> int:
    """A drain strategy's time as unix ns (0 for Go's zero time)."""
    if moment == ZERO_TIME:
        return 0
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def from_unix_ns(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // 1000 / 1e6, tz=UTC)


def start_strategy(deadline: int, ignore_system_jobs: bool, now: int,
                   previous: DrainStrategy | None) -> DrainStrategy:
    """The strategy a drain request sets at `now` (Nomad's Node.UpdateDrain): an update keeps
    the first drain's `StartedAt`; a positive deadline is forced `deadline` ns from now."""
    started = previous.started_at if previous is not None else from_unix_ns(now)
    force = from_unix_ns(now + deadline) if deadline > 0 else ZERO_TIME
    return DrainStrategy(deadline=deadline, ignore_system_jobs=ignore_system_jobs,
                         force_deadline=force, started_at=started)


@dataclass(frozen=True)
class DrainPlan:
    """One decision of the drainer."""

    #: Allocations to stop now.
    stop: list[Allocation] = field(default_factory=list)
    #: The drain is over: unset the strategy, keep the node ineligible.
    complete: bool = False
    #: Over because the deadline passed (Nomad's event detail `deadline_reached`).
    deadlined: bool = False
    #: When to decide again even if nothing changes (the deadline), unix ns; None: never.
    wake_at: int | None = None


def _is_system(alloc: Allocation) -> bool:
    return alloc.job is not None and alloc.job.type == "system"


def _is_batch(alloc: Allocation) -> bool:
    return alloc.job is not None and alloc.job.type == "batch"


def _max_parallel(alloc: Allocation) -> int:
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    if group is None or group.migrate is None:
        return 1  # Nomad's DefaultMigrateStrategy
    return max(group.migrate.max_parallel, 1)


def _replaced(alloc: Allocation, known: Mapping[str, Allocation]) -> bool:
    """Its replacement runs healthy: it no longer counts as on its way."""
    new = known.get(alloc.next_allocation) if alloc.next_allocation else None
    return new is not None and is_healthy(new)


def plan_drain(strategy: DrainStrategy, allocs: Iterable[Allocation], now: int,
               known: Mapping[str, Allocation] | None = None) -> DrainPlan:
    """What to do for a node draining with `strategy`, whose allocations are `allocs`, at
    `now` (unix ns); `known`: allocations by ID where replacements are looked up (default:
    `allocs`)."""
    allocs = list(allocs)
    known = known if known is not None else {a.id: a for a in allocs}
    live = [a for a in allocs if not a.is_terminal()]
    deadline = unix_ns(strategy.force_deadline) if strategy.deadline > 0 else 0
    if strategy.deadline < 0 or (deadline and now >= deadline):
        # Forced (Nomad: `-force`, or the deadline passed): everything left, at once.
        return DrainPlan(stop=[a for a in live
                               if not (_is_system(a) and strategy.ignore_system_jobs)],
                         complete=True, deadlined=True)
    stop: list[Allocation] = []
    groups: dict[tuple[str, str, str], list[Allocation]] = {}
    for alloc in allocs:
        if not _is_system(alloc) and not _is_batch(alloc):
            groups.setdefault((alloc.namespace, alloc.job_id, alloc.task_group),
                              []).append(alloc)
    for members in groups.values():
        stopping = sum(1 for a in members
                       if a.is_desired_stopped() and not is_client_terminal(a.client_status)
                       and not _replaced(a, known))
        drainable = sorted((a for a in members if not a.is_terminal()),
                           key=lambda a: (a.create_index, a.name))
        room = _max_parallel(members[0]) - stopping
        if room > 0:
            stop.extend(drainable[:room])
    # Done once everything but system allocations has really ended (client-terminal: an
    # allocation told to stop still counts until its tasks are dead).
    done = not stop and all(is_client_terminal(a.client_status) or _is_system(a)
                            for a in allocs)
    if done:
        if not strategy.ignore_system_jobs:
            stop = [a for a in live if _is_system(a)]
        return DrainPlan(stop=stop, complete=True)
    return DrainPlan(stop=stop, wake_at=deadline or None)

"""The server's book of deployments, apart from how the scheduler decides them: the counts each
written allocation changes (`account`, `settle`), a job's latest deployment, and which terminal
ones Nomad's GC would forget. Pure.

`account` keeps a deployment's per-group counts as Nomad's state store does on every written
allocation (`updateDeploymentWithAlloc`): a placement counts in PlacedAllocs (a canary in
PlacedCanaries too), a health change in Healthy/UnhealthyAllocs, and RequireProgressBy moves to
the latest healthy time plus the progress deadline (the first placement starts it).

Invariant: `settle` never changes the deployments it is given; it returns new ones, numbered
with the change's index where their counts moved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from yurt.runtime.server.scheduler.deployments import is_canary, is_healthy, is_unhealthy
from yurt.runtime.server.scheduler.reschedule import as_time
from yurt.runtime.structs import Allocation
from yurt.runtime.structs.base import ZERO_TIME
from yurt.runtime.structs.update import Deployment


def account(d: Deployment, before: Allocation | None, after: Allocation) -> bool:
    """Count `after` (written over `before`, None for a placement) in `d`, in place, as
    Nomad's `updateDeploymentWithAlloc`; whether anything changed."""
    if after.deployment_id != d.id:
        return False
    state = d.task_groups.get(after.task_group)
    if state is None:
        return False
    placed = healthy = unhealthy = 0
    had = before is not None and before.deployment_status is not None \
        and before.deployment_status.healthy is not None
    has = after.deployment_status is not None and after.deployment_status.healthy is not None
    if before is None or before.deployment_id != after.deployment_id:
        placed = 1
    elif not had and has:
        healthy, unhealthy = (1, 0) if is_healthy(after) else (0, 1)
    elif had and has and is_healthy(before) and is_unhealthy(after):
        healthy, unhealthy = -1, 1
    changed = bool(placed or healthy or unhealthy)
    state.placed_allocs += placed
    state.healthy_allocs += healthy
    state.unhealthy_allocs += unhealthy
    if is_canary(after) and after.id not in state.placed_canaries:
        state.placed_canaries.append(after.id)
        changed = True
    if state.progress_deadline:
        if placed and state.require_progress_by == ZERO_TIME:
            state.require_progress_by = as_time(after.modify_time
                                                     + state.progress_deadline)
            changed = True
        elif healthy > 0 and after.deployment_status is not None:
            by = after.deployment_status.timestamp.timestamp() * 1e9 + state.progress_deadline
            if by > state.require_progress_by.timestamp() * 1e9:
                state.require_progress_by = as_time(round(by))
                changed = True
    return changed


def latest_deployment(known: Iterable[Deployment], job_id: str) -> Deployment | None:
    """Nomad's `LatestDeploymentByJobID`: the job's deployment created last."""
    return max((d for d in known if d.job_id == job_id), key=lambda d: d.create_index,
               default=None)


def settle(known: Mapping[str, Deployment], written: list[Deployment],
           before: Mapping[str, Allocation], allocs: list[Allocation], index: int, now: int
           ) -> list[Deployment]:
    """The deployments one change writes: `written`, and every deployment whose counts the
    written `allocs` change (`account`), each numbered `index` where it changed."""
    out = {d.id: d for d in written}
    for alloc in allocs:
        if not alloc.deployment_id:
            continue
        d = out.get(alloc.deployment_id) or known.get(alloc.deployment_id)
        if d is None:
            continue
        copy = msgspec.structs.replace(d, task_groups={
            n: msgspec.structs.replace(s, placed_canaries=list(s.placed_canaries))
            for n, s in d.task_groups.items()})
        if account(copy, before.get(alloc.id), alloc):
            copy.modify_index, copy.modify_time = index, now
            out[d.id] = copy
    return list(out.values())


#: Nomad's `deployment_gc_threshold`: a terminal deployment is kept this long after its last
#: change, then collected (with the evaluations' GC).
DEPLOYMENT_GC_THRESHOLD = 3600 * 10**9


def collectable_deployments(known: Mapping[str, Deployment],
                            allocs: Mapping[str, Allocation], now: int) -> list[str]:
    """Nomad's `deploymentGC`: terminal deployments unchanged for DEPLOYMENT_GC_THRESHOLD
    whose allocations are all terminal."""
    live = {a.deployment_id for a in allocs.values() if a.deployment_id and not a.is_terminal()}
    return [d.id for d in known.values() if not d.active() and d.id not in live
            and now - d.modify_time > DEPLOYMENT_GC_THRESHOLD]

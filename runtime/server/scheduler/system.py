"""The system and sysbatch schedulers: one allocation of each group on every eligible node.
Pure: no I/O, no clock, no storage.

Nomad's SystemScheduler (and SysBatchScheduler) with its node reconciler
(scheduler/reconciler/reconcile_node.go), reduced to what yurt has:

- **Desired**: for every candidate node (binpack.py: ready, eligible, not draining, in the
  job's datacenters and pool) and every group, one allocation named `<job>.<group>[0]`, as
  Nomad names them (the index is always 0: the node, not the name, tells them apart). A
  node that joins later gets its allocation when the job is evaluated again.
- **Existing** allocations are matched by node and group. One of an unchanged group is kept
  (updated in place to a new job version while the node still meets the constraints); one of
  a changed group is replaced on its node; one whose group is gone, or whose node fell out of
  the job's datacenters or constraints, is stopped. One on a node that is known but not a
  candidate (ineligible, draining) is left alone: the drainer moves what must move. One on a
  node that is down or gone is lost (ClientStatus lost) and, unlike the generic scheduler's,
  not replaced elsewhere: it belongs to its node. On a disconnected node it is lost, or
  unknown within its group's disconnect window (disconnect.py), and never replaced; back on
  a ready node within the window it simply runs on.
- **Ended**: a sysbatch allocation that completed for this job version is done on its node;
  an allocation that ended on its own (failed) is placed again only by a register or a forced
  evaluation, as in the generic scheduler (system jobs are not rescheduled).
- **Feasibility**: a node that fails the constraints is filtered and skipped silently (Nomad
  reports it only when the group is placed nowhere and runs nowhere); a node that passes
  but lacks room may preempt lower-priority allocations there, else the group is reported in
  `FailedTGAllocs` and the evaluation blocks, as Nomad's `addBlocked`.

No deployments and no canaries: Nomad's system deployments are not modelled here.

Where it sits: `schedule` (__init__.py) hands it a running system or sysbatch job, once it has
read the job's allocations and the state of their nodes (and stopped everything of a stopped
job). It places through placement.py's `Placer`, one given node at a time, and finishes the
plan with plan.py's steps, as the generic scheduler (generic.py) does.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from yurt.runtime.server.scheduler import binpack
from yurt.runtime.server.scheduler.disconnect import NodeStates
from yurt.runtime.server.scheduler.feasible import filter_reason
from yurt.runtime.server.scheduler.placement import Choice, Placer
from yurt.runtime.server.scheduler.plan import (
    DesiredUpdates,
    Plan,
    SchedulerState,
    finish,
    group_spec,
    mark_lost,
    mark_unknown,
    replaced_by,
    same_version,
    stopped,
)
from yurt.runtime.structs import (
    ALLOC_CLIENT_COMPLETE,
    ALLOC_DESIRED_EVICT,
    ALLOC_DESIRED_STOP,
    TRIGGER_JOB_REGISTER,
    Allocation,
    AllocMetric,
    Evaluation,
    Job,
    Node,
    TaskGroup,
    is_client_terminal,
)

SYSTEM_TYPES = ("system", "sysbatch")


def alloc_name(job: Job, group: TaskGroup) -> str:
    """Nomad's name for a system allocation: index 0 on every node."""
    return f"{job.id}.{group.name}[0]"


def schedule_system(state: SchedulerState, plan: Plan, job: Job, nodes: list[Node],
                    states: NodeStates, *, index: int, now: int,
                    new_id: Callable[[], str], can_preempt: bool, algorithm: str) -> Plan:
    """The plan for a system or sysbatch `job` (running, not stopped) over `nodes`;
    `states`: its live allocations by the state of their node (disconnect.py)."""
    lost_ids = states.lost
    ev: Evaluation = plan.eval
    allocs = state.job_allocs(ev.job_id)
    live = [a for a in allocs if not a.is_terminal()]
    cands = binpack.candidates(nodes, job)
    known = {n.id: n for n in nodes}
    user_asked = ev.triggered_by == TRIGGER_JOB_REGISTER
    groups = {g.name: g for g in job.task_groups}
    # The latest allocation of each (node, group), live or not.
    latest: dict[tuple[str, str], Allocation] = {}
    for alloc in allocs:
        key = (alloc.node_id, alloc.task_group)
        if key not in latest or alloc.create_index >= latest[key].create_index:
            latest[key] = alloc
    stop: list[tuple[Allocation, str]] = []
    for alloc in live:
        group = groups.get(alloc.task_group)
        node = known.get(alloc.node_id)
        if alloc.id in lost_ids:
            stop.append((alloc, "alloc is being stopped"))  # mark_lost words it
        elif group is None or (node is not None and not (
                binpack.in_datacenters(node, job.datacenters)
                and binpack.is_in_pool(node, job.node_pool))):
            stop.append((alloc, "alloc not needed due to job update"))
        else:
            continue
        plan.desired.setdefault(alloc.task_group, DesiredUpdates()).stop += 1
    stopping = {a.id for a, _ in stop}
    placer = Placer(job, cands, (a for a in state.live_allocs() if a.id not in stopping),
                    (a for a in live if a.id not in stopping), algorithm, known,
                    state.host_volume)
    protected = {a.id for a in live}
    evicted: dict[str, Allocation] = {}
    metrics: dict[str, AllocMetric] = {}
    placed_somewhere: set[str] = set()
    for group in job.task_groups:
        desired = plan.desired.setdefault(group.name, DesiredUpdates())
        name = alloc_name(job, group)
        for node in cands.ready:
            current = latest.get((node.id, group.name))
            prev: Allocation | None = None
            failed: Allocation | None = None
            if current is not None and current.id in stopping:
                current = None
            if current is not None and not current.is_terminal():
                old = current.job.lookup_group(group.name) if current.job else None
                mine = [a for a in live if a.node_id == node.id and a.id != current.id
                        and a.id not in stopping]
                if filter_reason(job, group, node, mine, known.get, name,
                                 state.host_volume) is not None:
                    stop.append((current, "alloc not needed due to job update"))
                    desired.stop += 1
                    continue
                if current.desired_transition.migrate:
                    stop.append((current, "alloc is being migrated"))
                    prev = current
                elif old is not None and group_spec(old) == group_spec(group):
                    placed_somewhere.add(group.name)
                    if current.job is not None and (
                            current.job.job_modify_index != job.job_modify_index):
                        desired.in_place_update += 1
                        plan.update.append(msgspec.structs.replace(
                            current, job=job, modify_index=index, alloc_modify_index=index))
                    else:
                        desired.ignore += 1
                    continue
                else:
                    prev = current  # a changed group: replaced on its node
            elif current is not None and current.desired_status not in (
                    ALLOC_DESIRED_STOP, ALLOC_DESIRED_EVICT) and is_client_terminal(
                    current.client_status):
                # Ended on its own: a completed sysbatch run of this version is done; any
                # other ending is placed again by a register only.
                if (current.client_status == ALLOC_CLIENT_COMPLETE and job.type == "sysbatch"
                        and same_version(current, job)) or not user_asked:
                    desired.ignore += 1
                    placed_somewhere.add(group.name)
                    continue
                failed = current if not current.next_allocation else None
            choice = _select(placer, node, group, prev, can_preempt,
                             protected | set(evicted), metrics, plan.failed)
            if choice is None:
                if prev is not None and prev.desired_transition.migrate:
                    desired.migrate += 1  # stopped all the same
                continue
            for victim in choice.victims:
                evicted[victim.id] = victim
            desired.preemptions += len(choice.victims)
            if prev is not None and prev.desired_transition.migrate:
                desired.migrate += 1
            elif prev is not None:
                desired.destructive_update += 1
            else:
                desired.place += 1
            new = msgspec.structs.replace(
                _allocation(job, ev, name, group, choice, index, now, new_id),
                preempted_allocations=[v.id for v in choice.victims],
                previous_allocation=prev.id if prev is not None
                else failed.id if failed is not None else "")
            placer.commit(choice, new, prev)
            plan.place.append(new)
            placed_somewhere.add(group.name)
            if prev is not None and not prev.desired_transition.migrate:
                replaced = stopped(prev, index, now, "alloc is being updated")
                replaced.next_allocation = new.id
                plan.stop.append(replaced)
            if failed is not None:
                plan.update.append(replaced_by(failed, new, index, now))
            for victim in choice.victims:
                plan.stop.append(msgspec.structs.replace(
                    stopped(victim, index, now, f"Preempted by allocation {new.id} of job "
                            f"{job.id!r} (priority {job.priority})", ALLOC_DESIRED_EVICT),
                    preempted_by_allocation=new.id))
    plan.stop += [stopped(alloc, index, now, why) for alloc, why in stop]
    # A group filtered on every node and running nowhere is reported (Nomad's
    # mergeNodeFiltered); one merely filtered on some nodes is not.
    plan.eval = msgspec.structs.replace(
        ev, failed_tg_allocs={g: m for g, m in metrics.items()
                              if m.nodes_exhausted or g not in placed_somewhere} or None)
    mark_lost(plan, lost_ids)
    mark_unknown(plan, states.disconnecting, ev, index, now, new_id)
    finish(state, plan, index, now, new_id)
    return plan


def _select(placer: Placer, node: Node, group: TaskGroup, prev: Allocation | None,
            can_preempt: bool,
            protected: set[str], metrics: dict[str, AllocMetric], failed: dict[str, str]
            ) -> Choice | None:
    """One allocation of `group` on `node`, or None (recorded in `metrics`: filtered nodes
    are merged, an exhausted one makes the group fail, its reason in `failed`)."""
    selection = placer.select(group, prev, preempt=can_preempt, protected=protected,
                              only=node, name=alloc_name(placer.job, group))
    if selection.choice is not None:
        return selection.choice
    got = selection.metric
    if got is None:
        return None
    if got.nodes_exhausted:
        failed.setdefault(group.name, selection.why)
    metric = metrics.get(group.name)
    if metric is None:
        metrics[group.name] = got
    elif got.nodes_exhausted and metric.nodes_exhausted:
        metric.coalesced_failures += 1
    else:
        metric.nodes_evaluated += got.nodes_evaluated
        metric.nodes_filtered += got.nodes_filtered
        metric.nodes_exhausted += got.nodes_exhausted
        for field in ("constraint_filtered", "dimension_exhausted"):
            merged = dict(getattr(metric, field) or {})
            for key, count in (getattr(got, field) or {}).items():
                merged[key] = merged.get(key, 0) + count
            setattr(metric, field, merged or None)
    return None


def _allocation(job: Job, ev: Evaluation, name: str, group: TaskGroup, choice: Choice,
                index: int, now: int, new_id: Callable[[], str]) -> Allocation:
    return Allocation(
        id=new_id(), namespace=job.namespace, eval_id=ev.id, name=name,
        node_id=choice.node.id, node_name=choice.node.name, job_id=job.id, job=job,
        task_group=group.name, task_resources=choice.task_resources,
        allocated_shared=choice.shared, create_index=index, modify_index=index,
        alloc_modify_index=index, create_time=now, modify_time=now)

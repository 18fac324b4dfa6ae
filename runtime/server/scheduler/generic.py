"""The generic scheduler, for service and batch jobs: one evaluation in, one plan out. Pure:
no I/O, no clock, no storage.

`schedule` (__init__.py) reads what every pass needs, stops everything of a stopped job, and
hands a running service or batch job to `schedule_generic` here (system and sysbatch jobs go
to system.py). A pass reads through `SchedulerState` (the job's allocations, the live
allocations that hold resources, every node the server knows, the job's blocked evaluations)
and returns a `Plan` (plan.py): the allocations to place, to stop (evictions included), to
update in place, the evaluation's own outcome, and evaluations to create or cancel. The server
applies a plan in one commit; the embedded agent's state has one node, a cluster's many, and
this module is the same for both.

What it does, as Nomad's generic scheduler does (`scheduler/generic_sched.go`):

- **Reconcile** (here) desired (`count` allocations per group, named `<job>.<group>[<i>]`)
  against the job's live allocations: a live one whose group spec is unchanged is kept
  (updated in place when the job changed), a changed group's is replaced (the new one names it
  in `PreviousAllocation`), one no longer wanted is stopped. A batch allocation that completed
  is done; one that ended on its own is not placed again by a retry (only a register or a
  forced evaluation places it again). Failed allocations are replaced as their reschedule
  policy says (reschedule.py), changed groups at the pace of their update (deployments.py).
- **Nodes gone wrong** (disconnect.py): an allocation on a down node, or on one the server
  no longer knows, is lost (stopped, ClientStatus lost) and replaced at once elsewhere; on a
  disconnected node within the group's disconnect window it is unknown and replaced, and
  reconciled when it returns.
- **Place** (placement.py) on the best candidate node (binpack.py: ready, eligible, not
  draining, in the job's datacenters; ranked by Nomad's binpack or spread fitness, job
  anti-affinity, rescheduling penalty, affinities and spreads): one that meets the
  constraints (feasible.py) and whose CPU and memory, less what live allocations on it hold,
  fit the group, with enough healthy unused device instances and the host ports its network
  asks for (ports.py).
- **Preempt** (placement.py): where no node fits, allocations of jobs at least 10 priority
  lower may be evicted (lowest first, as few as possible) on the first node where that makes
  room; the job's own are never evicted.
- **Block** (plan.py `finish`): a group that still does not fit is reported in
  `FailedTGAllocs` (Nomad's `AllocMetric` summed over the nodes: evaluated, filtered by which
  constraint, exhausted in which dimension, available per datacenter) and leaves one blocked
  evaluation per job (an older one is canceled), retried when capacity changes. A blocked
  evaluation that is retried and still does not fit stays blocked; once everything is placed
  it is complete. With one node every message reads as it always has ("Resources exhausted:
  cpu …", `Constraint "…" filtered 1 nodes`).

Invariant: allocations being replaced keep their resources until their replacement is placed,
so a replacement that does not fit leaves the old allocation running as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from yurt.runtime.server.scheduler import binpack, deployments
from yurt.runtime.server.scheduler.deployments import Rollout
from yurt.runtime.server.scheduler.disconnect import NodeStates, replaces_disconnected
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
from yurt.runtime.server.scheduler.reschedule import Decision, as_time, decide, needs_reschedule
from yurt.runtime.structs import (
    ALLOC_CLIENT_COMPLETE,
    ALLOC_CLIENT_FAILED,
    ALLOC_CLIENT_UNKNOWN,
    ALLOC_DESIRED_EVICT,
    ALLOC_DESIRED_RUN,
    EVAL_STATUS_PENDING,
    TRIGGER_FAILED_FOLLOW_UP,
    TRIGGER_JOB_REGISTER,
    Allocation,
    AllocDeploymentStatus,
    AllocMetric,
    Evaluation,
    Job,
    Node,
    TaskGroup,
    is_client_terminal,
)


def schedule_generic(state: SchedulerState, plan: Plan, job: Job, rollout: Rollout,
                     allocs: list[Allocation], nodes: list[Node], states: NodeStates, *,
                     index: int, now: int, new_id: Callable[[], str], can_preempt: bool,
                     algorithm: str) -> Plan:
    """The plan for a service or batch `job` (running, not stopped): `allocs` are all its
    allocations, `states` its live ones by the state of their node (disconnect.py), `rollout`
    its update (deployments.py), as `schedule` (__init__.py) found them.

    `index` numbers what the plan writes, `now` (unix ns) times it. A live allocation's
    group, as the job version it runs has it, is compared with the job's: the same, it is
    kept (updated in place to the new version); changed, it is replaced, at the pace of the
    group's `update` strategy. `algorithm` is the scheduler configuration's
    `SchedulerAlgorithm` (binpack.py).

    Placements go to the best candidate node (binpack.py); a live allocation whose node is
    down or gone is lost: stopped (ClientStatus lost) and replaced on another node at once.
    """
    ev = plan.eval
    live = [a for a in allocs if not a.is_terminal()]
    nodes_by_id = {n.id: n for n in nodes}
    lost_ids = states.lost
    cands = binpack.candidates(nodes, job)
    # Waiting unknown allocations and reconnect losers take no part (disconnect.py). A
    # waiting one's name placed in this pass (its replacement could not be placed when it
    # went unknown: no node was free) names it as the allocation it replaces, as the
    # replacement placed at once does: when its node comes back, the reconnect finds the
    # two and keeps one (disconnect.classify follows `previous_allocation`).
    waiting_unknown = {a.name: a.id for a in live
                       if a.id in states.aside and a.client_status == ALLOC_CLIENT_UNKNOWN}
    # `disconnect { replace = false }`: an unknown allocation keeps its name until it is
    # lost (disconnect.py `replaces_disconnected`); nothing is placed for it meanwhile.
    unreplaced = {a.name for a in live if not replaces_disconnected(a) and (
        a.id in {d.id for d in states.disconnecting}
        or (a.id in states.aside and a.client_status == ALLOC_CLIENT_UNKNOWN))}
    live = [a for a in live if a.id not in states.aside]
    for alloc, why in states.stop:
        plan.stop.append(stopped(alloc, index, now, why))
        plan.desired.setdefault(alloc.task_group, DesiredUpdates()).stop += 1
    disconnecting = {a.id for a in states.disconnecting}
    # Names a replacement already holds: a lost allocation of such a name is not replaced.
    held = {a.name for a in live if a.id not in lost_ids and a.id not in disconnecting}
    wanted = {f"{job.id}.{g.name}[{i}]": g for g in job.task_groups for i in range(g.count)}
    # What ended on its own is not placed again by a retry: a completed batch allocation is
    # done; any other is for a register or a forced evaluation to place again.
    user_asked = ev.triggered_by == TRIGGER_JOB_REGISTER
    # One already replaced is not (its `next_allocation` holds the name: Nomad's reconciler
    # ignores a rescheduled allocation), or a replacement that was lost would leave the
    # name empty for good: its own replacement, blocked for want of a node, would find the
    # name "done" once unblocked.
    done: set[str] = set()
    for alloc in allocs:
        if alloc.next_allocation:
            continue
        if alloc.desired_status == "run" and is_client_terminal(alloc.client_status) and (
                (job.type != "service" and alloc.client_status == ALLOC_CLIENT_COMPLETE
                 and same_version(alloc, job))
                or not user_asked):
            done.add(alloc.name)
    # A failed allocation is replaced as its reschedule policy says (reschedule.py).
    failures = decide(job, allocs, now, user_asked=user_asked)
    if rollout.failed and rollout.current is not None:
        # Nomad's `partOfFailedDeployment`: a failed deployment's own failed allocations are
        # not replaced (the rollout failed; a rollback or a new version replaces them).
        for name, (gone, _) in list(failures.now.items()):
            if gone.deployment_id == rollout.current.id:
                del failures.now[name]
                failures.never.add(name)
    respec = _outdated_failures(failures, allocs, wanted)
    done = (done - set(failures.now) - set(failures.later)) | failures.never
    _follow_up(plan, ev, failures, index, now, new_id)
    kept: list[Allocation] = []
    previous: dict[str, Allocation] = {}
    #: Stopped whether or not a replacement is placed (one that is not is blocked).
    migrating: dict[str, Allocation] = {}
    unneeded = rollout.canaries_to_stop(live)
    # A waiting canary asked to move (an alloc stop, a drain) is stopped and counts no more
    # among the canaries, so a fresh one is placed (Nomad's `cancelUnneededCanaries`).
    moving_canaries = [a for a in live if rollout.is_waiting_canary(a)
                       and a.desired_transition.migrate and a not in unneeded]
    waiting = [a for a in live if rollout.is_waiting_canary(a) and a not in unneeded
               and a not in moving_canaries]
    # A failed canary still holds its place among the deployment's canaries (Nomad counts
    # every placed canary): it is rescheduled as a canary by its policy, not replaced by a
    # fresh one at once. One already replaced counts through its replacement.
    failed_canaries = {a.id: a for a in allocs if a.desired_status == ALLOC_DESIRED_RUN
                       and a.client_status == ALLOC_CLIENT_FAILED and not a.next_allocation
                       and rollout.is_waiting_canary(a)}
    canary_retries = {name: failures.now.pop(name) for name, (failed, _) in
                      list(failures.now.items()) if failed.id in failed_canaries}
    for alloc in live:
        if alloc.id in disconnecting and alloc.name in unreplaced:
            continue  # marked unknown below, and not replaced
        if (alloc.id in lost_ids or alloc.id in disconnecting) and alloc not in unneeded:
            # Its node is down, gone or disconnected: lost (stopped) or unknown, and
            # replaced at once elsewhere (Nomad's reconciler: not paced by the rollout nor
            # the reschedule policy).
            if alloc.name in wanted and alloc.name not in migrating and alloc.name not in held:
                migrating[alloc.name] = previous[alloc.name] = alloc
            else:
                unneeded.append(alloc)
            continue
        if alloc in unneeded or alloc in waiting or alloc in moving_canaries:
            continue  # stopped, or a canary beside the allocation it is to replace
        group = wanted.get(alloc.name)
        old = alloc.job.lookup_group(group.name) if alloc.job and group else None
        if group is None:
            unneeded.append(alloc)
        elif alloc.desired_transition.migrate:  # an alloc stop, a drain: Nomad's migrate
            migrating[alloc.name] = previous[alloc.name] = alloc
        elif old is None or group_spec(old) == group_spec(group):
            kept.append(alloc)
        else:
            previous[alloc.name] = alloc
    # A promoted canary took its name over: the allocation it replaces is no longer needed.
    unneeded += [previous.pop(a.name) for a in kept if a.name in previous
                 and a.name not in migrating]
    unneeded_ids = {a.id for a in unneeded + moving_canaries}
    placer = Placer(job, cands, (a for a in state.live_allocs() if a.id not in unneeded_ids),
                    (a for a in live if a.id not in unneeded_ids and a.id not in lost_ids
                     and a.id not in disconnecting), algorithm, nodes_by_id, state.host_volume)
    evicted: dict[str, Allocation] = {}
    outdated = [a for a in kept if a.job is not None
                and a.job.job_modify_index != job.job_modify_index]
    # Updated in place only where its node is still in the job's pool (Nomad's
    # inplaceUpdate: `IsInPool`) and fits the new job; else replaced (feasible.py).
    unfit = {a.id for a in outdated if (node := nodes_by_id.get(a.node_id)) is None
             or not binpack.is_in_pool(node, job.node_pool)
             or filter_reason(job, wanted[a.name], node, (
                 b for b in live if b.id not in unneeded_ids and b.id != a.id),
                 nodes_by_id.get, a.name, state.host_volume) is not None}
    previous.update({a.name: a for a in outdated if a.id in unfit})
    kept = [a for a in kept if a.id not in unfit]
    outdated = [a for a in outdated if a.id not in unfit]
    outdated_names = {a.name for a in outdated}
    kept_names = {a.name for a in kept}
    hopeless: set[str] = set()  # groups for which no eviction helps: don't search again
    protected = {a.id for a in live}  # the job's own allocations are never evicted
    metrics: dict[str, AllocMetric] = {}
    rolling = deployments.plan_groups(
        rollout, job, wanted, live, waiting + list(failed_canaries.values()), kept, outdated,
        previous, migrating,
        {n for n in wanted if n in done and n not in previous} | set(failures.later),
        held=[a for a in allocs if needs_reschedule(a) and a.name not in failures.now])
    current = rollout.create({g.name: [a for a in allocs if a.task_group == g.name]
                              for g in job.task_groups}, rolling.updating, ev, new_id)
    # The deployment this pass's placements join (none once it is over).
    joining = current.id if current is not None and current.active() else ""

    def placement(name: str, group_name: str, choice: Choice, **fields: Any) -> Allocation:
        """A new allocation of this pass on the chosen node, numbered and timed by the plan."""
        return Allocation(
            id=new_id(), namespace=job.namespace, eval_id=ev.id, name=name,
            node_id=choice.node.id, node_name=choice.node.name, job_id=job.id, job=job,
            task_group=group_name, task_resources=choice.task_resources,
            allocated_shared=choice.shared, create_index=index, modify_index=index,
            alloc_modify_index=index, create_time=now, modify_time=now,
            deployment_id=joining, **fields)

    for name, group in wanted.items():
        desired = plan.desired.setdefault(group.name, DesiredUpdates())
        if name in kept_names:
            if name in outdated_names:
                desired.in_place_update += 1
            else:
                desired.ignore += 1
            continue
        prev = previous.get(name)
        if (prev is None and name in done) or name in failures.later or name in unreplaced:
            desired.ignore += 1
            continue
        if not deployments.admit(rollout, rolling, group.name, destructive=prev is not None,
                                 forced=name in migrating
                                 or (name in failures.now and name not in respec)):
            desired.ignore += 1  # held by the rollout: a later pass makes it
            continue
        failed, tracker = failures.now.get(name, (None, None))
        selection = placer.select(
            group, prev,
            penalized=frozenset({failed.node_id}) if failed is not None else frozenset(),
            preempt=can_preempt and group.name not in hopeless,
            protected=protected | set(evicted), name=name)
        if selection.preemption_failed:
            hopeless.add(group.name)
        choice = selection.choice
        # Counted as Nomad's reconciler counts, before placement: a plan whose placement
        # fails still says what it meant to do, beside why it could not.
        if prev is not None and (prev.id in lost_ids or prev.id in disconnecting):
            desired.place += 1
        elif name in migrating:
            desired.migrate += 1
        elif prev is not None:
            desired.destructive_update += 1
        else:
            desired.place += 1
        if choice is None:
            plan.failed.setdefault(group.name, selection.why)
            if group.name in metrics:
                metrics[group.name].coalesced_failures += 1
            elif selection.metric is not None:
                metrics[group.name] = selection.metric
            continue  # the previous allocation, if any, keeps running as it is
        for victim in choice.victims:
            evicted[victim.id] = victim
        desired.preemptions += len(choice.victims)
        placed = placement(
            name, group.name, choice,
            preempted_allocations=[v.id for v in choice.victims], reschedule_tracker=tracker,
            previous_allocation=(prev.id if prev is not None else failed.id if failed
                                 else waiting_unknown.get(name, "")),
            deployment_status=AllocDeploymentStatus(canary=True) if prev is not None
            and name in migrating and deployments.is_canary(prev) else None)
        placer.commit(choice, placed, prev)
        plan.place.append(placed)
        if failed is not None:
            plan.update.append(replaced_by(failed, placed, index, now))
    for new in plan.place:
        for victim_id in new.preempted_allocations:
            victim = evicted[victim_id]
            plan.stop.append(msgspec.structs.replace(
                stopped(victim, index, now, f"Preempted by allocation {new.id} of job "
                        f"{job.id!r} (priority {job.priority})", ALLOC_DESIRED_EVICT),
                preempted_by_allocation=new.id))
        if new.name in previous and new.name not in migrating:  # a destructive update
            replaced = stopped(previous[new.name], index, now, "alloc is being updated")
            replaced.next_allocation = new.id
            plan.stop.append(replaced)
    replacements = {new.name: new.id for new in plan.place}
    retried = [(a.task_group, name) for name, (a, _) in canary_retries.items()]
    fresh = [(g, n) for g, names in rolling.canaries.items() for n in names]
    for group_name, name in fresh + retried:
        group = wanted[name]
        selection = placer.select(group, name=name)
        if selection.choice is None:
            plan.failed.setdefault(group.name, selection.why)
            continue
        failed, tracker = canary_retries.get(name, (None, None))
        canary = placement(
            name, group_name, selection.choice, reschedule_tracker=tracker,
            previous_allocation=failed.id if failed is not None else "",
            deployment_status=AllocDeploymentStatus(canary=True))
        placer.commit(selection.choice, canary, None)
        plan.place.append(canary)
        if failed is None:
            plan.desired.setdefault(group_name, DesiredUpdates()).canary += 1
            continue
        plan.desired.setdefault(group_name, DesiredUpdates()).place += 1
        plan.update.append(replaced_by(failed, canary, index, now))
    fresh_canaries = {a.name: a.id for a in plan.place if a.name not in replacements}
    for alloc in moving_canaries:
        moved = stopped(alloc, index, now, "alloc is being migrated")
        moved.next_allocation = fresh_canaries.get(alloc.name, "")
        plan.stop.append(moved)
    for name, alloc in migrating.items():
        moved = stopped(alloc, index, now, "alloc is being migrated")
        moved.next_allocation = replacements.get(name, "")
        plan.stop.append(moved)
    for alloc in unneeded:
        plan.stop.append(stopped(alloc, index, now, "alloc not needed due to job update"))
        plan.desired.setdefault(alloc.task_group, DesiredUpdates()).stop += 1
    plan.update += [deployments.joined(msgspec.structs.replace(
        a, job=job, modify_index=index, alloc_modify_index=index), current) for a in outdated]
    for group_name, desired in plan.desired.items():
        if (desired.place + desired.destructive_update + desired.in_place_update
                + desired.migrate + desired.canary or group_name in plan.failed
                or any(a.task_group == group_name for a, _ in failures.later.values())):
            rolling.left[group_name] = True
    rollout.finish(rolling.left)
    plan.deployments += rollout.writes
    # scheduler/util.go `setStatus`: the evaluation names the deployment it worked within
    # (what `job run`'s monitor follows), while that deployment is still under way.
    within = rollout.current if rollout.current is not None and rollout.current.active() \
        else None
    plan.eval = msgspec.structs.replace(ev, failed_tg_allocs=metrics or None,
                                        deployment_id=within.id if within
                                        else ev.deployment_id)
    mark_lost(plan, lost_ids)
    mark_unknown(plan, states.disconnecting, ev, index, now, new_id)
    finish(state, plan, index, now, new_id)
    return plan


def _outdated_failures(failures: Decision, allocs: list[Allocation],
                       wanted: dict[str, TaskGroup]) -> set[str]:
    """Moves to `failures.now` the failed allocations left for later (or never) whose group
    spec is not the job's, and returns their names: Nomad's reconciler keeps such an
    allocation among the untainted ones and updates it destructively like any allocation of
    an older spec, so a new version, or a rollback, replaces a crashed allocation of the
    version before at once rather than at its reschedule time. Their replacements are paced
    by the rollout (not forced) and start a new reschedule tracker."""
    failed = {a.name: a for a in allocs if needs_reschedule(a)}
    names = set()
    for name in [*failures.later, *failures.never]:
        alloc, group = failed.get(name), wanted.get(name)
        old = alloc.job.lookup_group(group.name) if alloc and alloc.job and group else None
        if alloc is None or group is None or old is None or group_spec(old) == group_spec(group):
            continue
        failures.later.pop(name, None)
        failures.never.discard(name)
        failures.now[name] = (alloc, None)
        names.add(name)
    return names


def _follow_up(plan: Plan, ev: Evaluation, failures: Decision, index: int, now: int,
               new_id: Callable[[], str]) -> None:
    """A follow-up evaluation (WaitUntil) for each failed allocation to replace later, named
    in its FollowupEvalID; none again for one that already waits on another."""
    for alloc, when in failures.later.values():
        if alloc.followup_eval_id and alloc.followup_eval_id != ev.id:
            continue
        follow = Evaluation(
            id=new_id(), namespace=ev.namespace, priority=ev.priority, type=ev.type,
            triggered_by=TRIGGER_FAILED_FOLLOW_UP, job_id=ev.job_id,
            job_modify_index=ev.job_modify_index, status=EVAL_STATUS_PENDING,
            previous_eval=ev.id, wait_until=as_time(when),
            wait=when - now, create_index=index, modify_index=index, create_time=now,
            modify_time=now)
        plan.evals.append(follow)
        plan.update.append(msgspec.structs.replace(
            alloc, followup_eval_id=follow.id, modify_index=index,
            alloc_modify_index=index, modify_time=now))

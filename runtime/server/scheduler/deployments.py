"""Rolling updates, as Nomad's reconciler decides them (`reconcile_cluster.go`). Pure: no I/O,
no clock (time is a parameter), no storage.

A job version whose groups have an `update` strategy rolls out through a `Deployment`. The
scheduler asks this module, once per evaluation, through a `Rollout`:

- which deployment is current: an active one of an older version (or of a stopped job) is
  cancelled with Nomad's texts; a successful one is no longer current;
- per group (`GroupRollout`), how many destructive updates and new placements this pass may
  make: `max_parallel` less the allocations of the deployment not yet healthy (none while one
  is unhealthy, the deployment is paused or failed, or canaries wait for promotion; a group with
  nothing to replace places its whole count), and how many canaries to place beside the old
  allocations;
- whether to create a deployment: the group has a strategy, something to place or update, and
  either its spec changed or no allocation of this job version ran yet (so re-registering an
  unchanged job makes none);
- whether the deployment is complete: nothing left to place or update, every group has
  max(DesiredTotal, DesiredCanaries) healthy allocations and is promoted if it had canaries.
  Then it is `successful` (the server marks the job version stable).

The counts allocations change and the GC of deployments live in server/deploymentbook.py.

Invariant: a deployment's Status/StatusDescription only change through this module, the
watcher core (server/deploymentwatcher.py) and the user's endpoints; the texts are Nomad's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgspec

from yurt.runtime.structs import Allocation, Evaluation, Job, TaskGroup
from yurt.runtime.structs.update import (
    DEPLOYMENT_DESC_NEWER_JOB,
    DEPLOYMENT_DESC_RUNNING_AUTO_PROMOTION,
    DEPLOYMENT_DESC_RUNNING_NEEDS_PROMOTION,
    DEPLOYMENT_DESC_STOPPED_JOB,
    DEPLOYMENT_DESC_SUCCESSFUL,
    DEPLOYMENT_STATUS_CANCELLED,
    DEPLOYMENT_STATUS_FAILED,
    DEPLOYMENT_STATUS_INITIALIZING,
    DEPLOYMENT_STATUS_PAUSED,
    DEPLOYMENT_STATUS_PENDING,
    DEPLOYMENT_STATUS_SUCCESSFUL,
    Deployment,
    DeploymentState,
)


def with_status(d: Deployment, status: str, description: str, index: int, now: int
                ) -> Deployment:
    return msgspec.structs.replace(d, status=status, status_description=description,
                                   modify_index=index, modify_time=now)


def is_healthy(alloc: Allocation) -> bool:
    return alloc.deployment_status is not None and alloc.deployment_status.healthy is True


def is_unhealthy(alloc: Allocation) -> bool:
    return alloc.deployment_status is not None and alloc.deployment_status.healthy is False


def is_canary(alloc: Allocation) -> bool:
    return alloc.deployment_status is not None and alloc.deployment_status.canary


def requires_promotion(d: Deployment) -> bool:
    """Nomad's `Deployment.RequiresPromotion`: a group with canaries not promoted yet."""
    return any(s.desired_canaries > 0 and not s.promoted for s in d.task_groups.values())


def cancel_unneeded(job: Job | None, d: Deployment | None, index: int, now: int
                    ) -> tuple[Deployment | None, Deployment | None, Deployment | None]:
    """Nomad's `cancelUnneededServiceDeployments`: (old, current, cancelled). An active
    deployment of a stopped job or of another version is cancelled; a successful one is no
    longer current."""
    if d is None:
        return None, None, None
    if job is None or job.stop:
        cancelled = (with_status(d, DEPLOYMENT_STATUS_CANCELLED, DEPLOYMENT_DESC_STOPPED_JOB,
                                 index, now) if d.active() else None)
        return d, None, cancelled
    if d.job_create_index != job.create_index or d.job_version != job.version:
        cancelled = (with_status(d, DEPLOYMENT_STATUS_CANCELLED, DEPLOYMENT_DESC_NEWER_JOB,
                                 index, now) if d.active() else None)
        return d, None, cancelled
    if d.status == DEPLOYMENT_STATUS_SUCCESSFUL:
        return d, None, None
    return None, d, None


def new_deployment(job: Job, ev: Evaluation, index: int, now: int,
                   new_id: Callable[[], str]) -> Deployment:
    """Nomad's `NewDeployment`, numbered and timed by the plan that creates it."""
    return Deployment(id=new_id(), namespace=job.namespace, job_id=job.id,
                      job_version=job.version, job_modify_index=job.job_modify_index,
                      job_spec_modify_index=job.job_modify_index,
                      job_create_index=job.create_index, eval_priority=ev.priority,
                      create_index=index, modify_index=index, create_time=now, modify_time=now)


@dataclass
class GroupRollout:
    """One group's decisions for this pass."""

    state: DeploymentState
    existing: bool  # the group already has a state in the current deployment
    #: Destructive updates and new placements this pass may still make.
    allowance: int
    #: Placements (new ones, replacements of destructively updated ones) are held.
    hold: bool
    #: Canaries to place now, beside the allocations they will replace.
    canaries: int = 0
    requires_canaries: bool = False
    canary_allocs: list[Allocation] = field(default_factory=list)

    def take(self) -> bool:
        """One destructive update or placement: whether this pass may make it."""
        if self.hold or self.allowance <= 0:
            return False
        self.allowance -= 1
        return True


@dataclass
class Rollout:
    """The deployment side of one evaluation of a job that is not stopped."""

    job: Job
    current: Deployment | None
    old: Deployment | None
    index: int
    now: int
    groups: dict[str, GroupRollout] = field(default_factory=dict)
    #: Deployments to write with the plan: created, cancelled, completed.
    writes: list[Deployment] = field(default_factory=list)
    created: Deployment | None = None
    _before: Deployment | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._before = self.current

    @property
    def paused(self) -> bool:
        return self.current is not None and self.current.status in (
            DEPLOYMENT_STATUS_PAUSED, DEPLOYMENT_STATUS_PENDING, DEPLOYMENT_STATUS_INITIALIZING)

    @property
    def failed(self) -> bool:
        return self.current is not None and self.current.status == DEPLOYMENT_STATUS_FAILED

    def canaries_to_stop(self, live: Iterable[Allocation]) -> list[Allocation]:
        """Nomad's `cancelUnneededCanaries`: the unpromoted canaries of an older deployment
        or of a failed current one."""
        ids: set[str] = set()
        for d in (self.old, self.current if self.failed else None):
            if d is not None:
                for s in d.task_groups.values():
                    if not s.promoted:
                        ids.update(s.placed_canaries)
        return [a for a in live if a.id in ids]

    def is_waiting_canary(self, alloc: Allocation) -> bool:
        """A canary of the current deployment whose group is not promoted: it runs beside
        the allocations it will replace and takes no part in matching names."""
        if self.current is None or alloc.deployment_id != self.current.id:
            return False
        state = self.current.task_groups.get(alloc.task_group)
        return (state is not None and alloc.id in state.placed_canaries
                and not state.promoted)

    def plan_group(self, group: TaskGroup, live: list[Allocation], destructive: int,
                   inplace: int, migrate: int, canaries: list[Allocation]) -> GroupRollout:
        """Nomad's computeGroup for the deployment: state, canaries, allowance. `live`: the
        group's live allocations apart from waiting canaries; `canaries`: those."""
        strategy = group.update
        state = self.current.task_groups.get(group.name) if self.current else None
        existing = state is not None
        if state is None:
            state = DeploymentState()
            if strategy is not None and not strategy.is_empty():
                state.auto_revert = strategy.auto_revert
                state.auto_promote = strategy.auto_promote
                state.progress_deadline = strategy.progress_deadline
        else:
            state = msgspec.structs.replace(state)
        if not existing:
            state.desired_total += destructive + inplace
        requires = (strategy is not None and destructive > 0
                    and len(canaries) < strategy.canary and not state.promoted)
        place_canaries = 0
        if requires and strategy is not None:
            state.desired_canaries = strategy.canary
            if not self.paused and not self.failed:
                place_canaries = strategy.canary - len(canaries)
        canarying = state.desired_canaries != 0 and not state.promoted
        allowance = self._under_provisioned(group, live, destructive, migrate, canarying)
        hold = self.paused or self.failed or canarying
        out = GroupRollout(state=state, existing=existing, allowance=allowance, hold=hold,
                           canaries=place_canaries, requires_canaries=requires,
                           canary_allocs=canaries)
        self.groups[group.name] = out
        return out

    def _under_provisioned(self, group: TaskGroup, live: list[Allocation], destructive: int,
                           migrate: int, canarying: bool) -> int:
        """Nomad's `computeUnderProvisionedBy`."""
        strategy = group.update
        if strategy is None or strategy.is_empty() or destructive + migrate == 0:
            return group.count
        if self.current is None:
            return strategy.max_parallel
        if self.paused or self.failed or canarying:
            return 0
        left = strategy.max_parallel
        for alloc in live:
            if alloc.deployment_id != self.current.id:
                continue
            if is_unhealthy(alloc):
                return 0
            if not is_healthy(alloc):
                left -= 1
        return max(left, 0)

    def count_placements(self, group_name: str, placements: int) -> None:
        """New placements (not replacements of updated allocations) the group wants: part of
        a new deployment's DesiredTotal."""
        g = self.groups[group_name]
        if not g.existing:
            g.state.desired_total += placements

    def create(self, group_allocs: dict[str, list[Allocation]], updating: dict[str, bool],
               ev: Evaluation, new_id: Callable[[], str]) -> Deployment | None:
        """Create the deployment where a group needs one (Nomad's `createDeployment`): the
        group has a strategy and something to place or update, and either its spec changed
        (`updating`) or no allocation of this job version ran yet (`group_allocs`: every
        allocation of each group). The deployment placements join, if any."""
        deployment = self.current
        if deployment is not None:  # a copy: the server's stays as it is until committed
            deployment = msgspec.structs.replace(deployment,
                                                 task_groups=dict(deployment.task_groups))
        for name, g in self.groups.items():
            group = self.job.lookup_group(name)
            if g.existing or group is None or group.update is None or group.update.is_empty():
                continue
            if g.state.desired_total == 0:
                continue
            had_running = any(a.job is not None and a.job.version == self.job.version
                              and a.job.create_index == self.job.create_index
                              for a in group_allocs.get(name, []))
            if had_running and not updating.get(name, False):
                continue
            if deployment is None:
                deployment = new_deployment(self.job, ev, self.index, self.now, new_id)
                self.created = deployment
            g.existing = True
            deployment.task_groups[name] = g.state
        if deployment is not None and self.created is None:
            deployment.task_groups = {n: self.groups[n].state if n in self.groups else s
                                      for n, s in deployment.task_groups.items()}
        self.current = deployment
        return deployment

    def finish(self, left: dict[str, bool]) -> None:
        """Mark the deployment complete if it is (Nomad's `isDeploymentComplete`; `left`: the
        group still has something to place, update or replace), else describe a new one that
        waits for promotion; queue what changed for writing."""
        deployment = self.current
        if deployment is None:
            return
        complete = self.created is None and all(
            not left.get(n, False) and not g.requires_canaries for n, g in self.groups.items())
        if complete:
            for state in deployment.task_groups.values():
                if (state.healthy_allocs < max(state.desired_total, state.desired_canaries)
                        or (state.desired_canaries > 0 and not state.promoted)):
                    complete = False
        if complete:
            deployment = with_status(deployment, DEPLOYMENT_STATUS_SUCCESSFUL,
                                     DEPLOYMENT_DESC_SUCCESSFUL, self.index, self.now)
        elif self.created is not None and requires_promotion(deployment):
            deployment.status_description = (
                DEPLOYMENT_DESC_RUNNING_AUTO_PROMOTION
                if any(s.auto_promote for s in deployment.task_groups.values())
                else DEPLOYMENT_DESC_RUNNING_NEEDS_PROMOTION)
        if self.created is not None or deployment != self._before:
            if self.created is None:
                deployment = msgspec.structs.replace(deployment, modify_index=self.index,
                                                     modify_time=self.now)
            self.current = deployment
            self.writes.append(deployment)


def start(job: Job | None, current: Deployment | None, index: int, now: int
          ) -> tuple[Rollout | None, list[Deployment]]:
    """The rollout of a job's evaluation (None for a stopped or missing job) and the
    deployments it cancels."""
    old, current, cancelled = cancel_unneeded(job, current, index, now)
    writes = [cancelled] if cancelled is not None else []
    if job is None or job.stop:
        return None, writes
    return Rollout(job=job, current=current, old=old, index=index, now=now), writes


# --------------------------------------------------------------------------- the scheduler's pass


@dataclass
class GroupsPlan:
    """What `plan_groups` found: which groups change spec, the canaries to place (names, by
    group) and, filled while placing, the groups with something left to do."""

    updating: dict[str, bool] = field(default_factory=dict)
    canaries: dict[str, list[str]] = field(default_factory=dict)
    left: dict[str, bool] = field(default_factory=dict)


def plan_groups(rollout: Rollout, job: Job, wanted: dict[str, TaskGroup],
                live: list[Allocation], waiting: list[Allocation], kept: list[Allocation],
                outdated: list[Allocation], previous: dict[str, Allocation],
                migrating: dict[str, Allocation], ignored: set[str],
                held: Iterable[Allocation] = ()) -> GroupsPlan:
    """Every group's rollout for this pass, from the scheduler's classification of the job's
    live allocations: `previous` (to replace; destructive unless `migrating`), `outdated`
    (in-place updates), `waiting` (canaries beside old allocations), `ignored` (names not to
    place now: done, or replaced later). `held`: the failed allocations this pass does not
    replace; Nomad's reconciler keeps them among the untainted ones, so a failed allocation of
    the deployment holds the rollout as an unhealthy running one does (without it, each
    crash of a new version freed the allowance for the next destructive update)."""
    out = GroupsPlan()
    live = live + list(held)
    taken = {a.name for a in kept} | set(previous)
    for group in job.task_groups:
        names = [n for n, g in wanted.items() if g is group]
        destructive = sorted(n for n in names if n in previous and n not in migrating)
        inplace = sum(1 for a in outdated if a.task_group == group.name)
        migrate = sum(1 for n in names if n in migrating)
        canaries = [a for a in waiting if a.task_group == group.name]
        g = rollout.plan_group(group, [a for a in live if a.task_group == group.name
                                       and a not in waiting], len(destructive), inplace,
                               migrate, canaries)
        missing = [n for n in names if n not in taken and n not in ignored]
        rollout.count_placements(group.name, len(missing))
        out.updating[group.name] = bool(destructive) or inplace > 0
        have = {a.name for a in canaries}
        out.canaries[group.name] = [n for n in destructive if n not in have][:g.canaries]
    return out


def admit(rollout: Rollout, plan: GroupsPlan, group: str, *, destructive: bool,
          forced: bool) -> bool:
    """Whether this pass makes one placement of `group`: a migration or a failed allocation's
    replacement always (`forced`); a destructive update within the allowance; a new placement
    unless placements are held. What is not made now is left for a later pass."""
    g = rollout.groups[group]
    if forced or not destructive:
        if not forced and g.hold:
            plan.left[group] = True
            return False
        g.allowance = max(g.allowance - 1, 0)
        return True
    if g.take():
        return True
    plan.left[group] = True
    return False


def joined(alloc: Allocation, d: Deployment | None) -> Allocation:
    """An allocation updated in place joins the current deployment, its health unknown again
    (Nomad's in-place update)."""
    if d is None or alloc.deployment_id == d.id:
        return alloc
    return msgspec.structs.replace(alloc, deployment_id=d.id, deployment_status=None)

"""The plan a scheduler pass returns, and what every pass does to finish it.

Shared by the generic scheduler (generic.py: service and batch jobs) and the system
scheduler (system.py: system and sysbatch jobs), and by the entry point in `__init__.py`,
which stops everything of a stopped or missing job:

- `SchedulerState`: what a pass reads, a consistent view of the server's state;
- `Plan` and `DesiredUpdates`: what a pass decides (Nomad's `structs.Plan` and its per-group
  annotations); the server applies a plan in one commit;
- the words and indexes of a plan's allocations: `stopped`, `replaced_by`, `same_version`,
  `group_spec` (what makes two versions of a group replace each other's allocations);
- the finishing steps, in the order a pass runs them: `mark_lost` (stops on lost nodes read
  lost), `mark_unknown` (allocations on disconnected nodes stay, unknown, with a follow-up
  evaluation), `finish` (the evaluation's outcome: complete, or blocked).

Pure: no I/O, no clock (`now` and `index` are parameters), nothing read but `SchedulerState`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from yurt.runtime.server.scheduler import disconnect
from yurt.runtime.server.scheduler.feasible import without_placement
from yurt.runtime.server.scheduler.reschedule import as_time
from yurt.runtime.structs import (
    ALLOC_CLIENT_LOST,
    ALLOC_CLIENT_UNKNOWN,
    ALLOC_DESIRED_STOP,
    EVAL_STATUS_BLOCKED,
    EVAL_STATUS_CANCELED,
    EVAL_STATUS_COMPLETE,
    EVAL_STATUS_PENDING,
    TRIGGER_QUEUED_ALLOCS,
    Allocation,
    Evaluation,
    Job,
    Node,
    TaskGroup,
)
from yurt.runtime.structs.hostvolume import HostVolume
from yurt.runtime.structs.identity import default_identity
from yurt.runtime.structs.update import Deployment


class SchedulerState(Protocol):
    """What the scheduler reads: a consistent view of the server's state."""

    def nodes(self) -> list[Node]:
        """Every node the server knows, whatever its status (binpack.py picks candidates)."""
        ...

    def job_allocs(self, job_id: str) -> list[Allocation]:
        """Every allocation of the job, oldest first."""
        ...

    def live_allocs(self) -> Iterable[Allocation]:
        """Every allocation that is not terminal (they hold the node's resources)."""
        ...

    def blocked_evals(self, job_id: str) -> list[Evaluation]:
        """The job's evaluations waiting for capacity."""
        ...

    def host_volume(self, vol_id: str) -> HostVolume | None:
        """The dynamic host volume of that ID (feasible.py `host_volume_reason`)."""
        ...


@dataclass
class DesiredUpdates:
    """Per group, what the plan does (Nomad's `DesiredUpdates`, for plan annotations)."""

    place: int = 0
    stop: int = 0
    ignore: int = 0
    in_place_update: int = 0
    destructive_update: int = 0
    migrate: int = 0
    preemptions: int = 0
    canary: int = 0


@dataclass
class Plan:
    eval: Evaluation  # the evaluation processed, with its outcome
    place: list[Allocation] = field(default_factory=list)
    stop: list[Allocation] = field(default_factory=list)
    update: list[Allocation] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # group → why, in words
    evals: list[Evaluation] = field(default_factory=list)  # to create or update
    desired: dict[str, DesiredUpdates] = field(default_factory=dict)
    #: Deployments to write: created, cancelled, completed (deployments.py).
    deployments: list[Deployment] = field(default_factory=list)

    @property
    def changes_nothing(self) -> bool:
        return not (self.place or self.stop or self.update)


def group_spec(group: TaskGroup) -> bytes:
    """What makes a group's allocations replaceable: everything but the count (a count
    change adds or stops allocations, it does not restart the others), the reschedule
    policy (it only says what happens after a failure: Nomad updates it in place) and the
    fields below."""
    group = without_placement(group)
    # The default identity gives the task nothing (no token) and jobs stored before it existed
    # lack it: the same job file run again after an upgrade must not replace allocations.
    tasks = [msgspec.structs.replace(t, default_identity=None)
             if t.default_identity == default_identity() else t for t in group.tasks]
    # Nor what the running allocation reads afresh from its job (scheduler/util.go
    # `tasksUpdated` compares none of them): the scaling policy, the shutdown delay and
    # max_run_duration, the tasks' actions and vertical scaling policies.
    tasks = [msgspec.structs.replace(t, actions=[], scaling_policies=[]) for t in tasks]
    return msgspec.json.encode(msgspec.structs.replace(
        group, count=0, tasks=tasks, reschedule_policy=None, scaling=None, shutdown_delay=None,
        max_run_duration=None))


def stopped(alloc: Allocation, index: int, now: int, why: str,
            status: str = ALLOC_DESIRED_STOP) -> Allocation:
    return msgspec.structs.replace(alloc, desired_status=status, desired_description=why,
                                   modify_index=index, alloc_modify_index=index,
                                   modify_time=now)


def same_version(alloc: Allocation, job: Job) -> bool:
    """Whether `alloc` ran this version of `job` (Nomad's filterOldTerminalAllocs: a batch
    allocation of an older version, or of a job since stopped and registered again, does not
    count as done; its slot runs again)."""
    return alloc.job is not None and (alloc.job.version, alloc.job.create_index) == (
        job.version, job.create_index)


def replaced_by(failed: Allocation, new: Allocation, index: int, now: int) -> Allocation:
    """`failed`, replaced by `new`: no other evaluation replaces it again."""
    return msgspec.structs.replace(failed, next_allocation=new.id, modify_index=index,
                                   alloc_modify_index=index, modify_time=now)


def mark_lost(plan: Plan, lost_ids: set[str]) -> None:
    """The plan's stops of allocations on lost nodes, in Nomad's words: lost, not stopped."""
    plan.stop = [msgspec.structs.replace(a, client_status=ALLOC_CLIENT_LOST,
                                         desired_status=ALLOC_DESIRED_STOP,
                                         desired_description=disconnect.ALLOC_LOST)
                 if a.id in lost_ids else a for a in plan.stop]


def mark_unknown(plan: Plan, allocs: list[Allocation], ev: Evaluation, index: int,
                 now: int, new_id: Callable[[], str]) -> None:
    """Allocations on a disconnected node within their window: not stopped (the plan moved
    them as it moves a lost one) but unknown, still desired to run, with a follow-up
    evaluation at the end of the window that finds them lost if the node is still away."""
    ids = {a.id for a in allocs}
    plan.stop = [a for a in plan.stop if a.id not in ids]
    for alloc in allocs:
        window = disconnect.lost_after(alloc)
        follow = Evaluation(
            id=new_id(), namespace=ev.namespace, priority=ev.priority, type=ev.type,
            triggered_by=disconnect.TRIGGER_DISCONNECT_TIMEOUT, job_id=ev.job_id,
            job_modify_index=ev.job_modify_index, status=EVAL_STATUS_PENDING,
            status_description=disconnect.DISCONNECT_FOLLOW_UP, previous_eval=ev.id,
            wait_until=as_time(_ceil_us(now + window)), wait=window, create_index=index,
            modify_index=index, create_time=now, modify_time=now)
        plan.evals.append(follow)
        plan.update.append(msgspec.structs.replace(
            alloc, client_status=ALLOC_CLIENT_UNKNOWN,
            client_description=disconnect.ALLOC_UNKNOWN, followup_eval_id=follow.id,
            modify_index=index, alloc_modify_index=index, modify_time=now))


def _ceil_us(ns: int) -> int:
    """`ns` rounded up to the microsecond, and one microsecond more. A follow-up's
    `wait_until` is a datetime (µs), made through float seconds (`as_time`, which rounds
    to the nearest µs; today's epoch in float ns is exact only to 256 ns): made from the
    window's end (ns) itself, it could fall before it, the evaluation run a few hundred ns
    early, find the allocation not yet expired and leave it unknown, and nothing would
    look at it again while its node stays away."""
    return (-(-ns // 1000) + 1) * 1000


def finish(state: SchedulerState, plan: Plan, index: int, now: int,
           new_id: Callable[[], str]) -> None:
    """The evaluation's outcome: complete, or blocked where groups could not be placed (one
    blocked evaluation per job; older ones are canceled)."""
    ev = plan.eval
    queued = {name: 0 for name in plan.desired}
    if ev.failed_tg_allocs:
        for name, metric in ev.failed_tg_allocs.items():
            queued[name] = 1 + metric.coalesced_failures
    others = [b for b in state.blocked_evals(ev.job_id) if b.id != ev.id]
    if ev.failed_tg_allocs and ev.status == EVAL_STATUS_BLOCKED:
        # A retried blocked evaluation that still does not fit: it stays blocked.
        plan.eval = msgspec.structs.replace(ev, queued_allocations=queued, modify_index=index,
                                            modify_time=now)
    elif ev.failed_tg_allocs:
        blocked = Evaluation(
            id=new_id(), namespace=ev.namespace, priority=ev.priority, type=ev.type,
            triggered_by=TRIGGER_QUEUED_ALLOCS, job_id=ev.job_id,
            job_modify_index=ev.job_modify_index, status=EVAL_STATUS_BLOCKED,
            status_description="created to place remaining allocations",
            previous_eval=ev.id, failed_tg_allocs=ev.failed_tg_allocs,
            queued_allocations=queued, create_index=index, modify_index=index,
            create_time=now, modify_time=now)
        plan.evals.append(blocked)
        plan.eval = msgspec.structs.replace(
            ev, status=EVAL_STATUS_COMPLETE, blocked_eval=blocked.id,
            queued_allocations=queued, modify_index=index, modify_time=now)
    else:
        plan.eval = msgspec.structs.replace(
            ev, status=EVAL_STATUS_COMPLETE, queued_allocations=queued,
            status_description="" if ev.status != EVAL_STATUS_BLOCKED
            else "placed once capacity was free", modify_index=index, modify_time=now)
    for other in others:
        plan.evals.append(msgspec.structs.replace(
            other, status=EVAL_STATUS_CANCELED,
            status_description=f"evaluation {plan.eval.id} replaced it",
            modify_index=index, modify_time=now))

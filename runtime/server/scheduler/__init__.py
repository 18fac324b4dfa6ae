"""The scheduler: pure functions from a snapshot of state to a plan (Nomad's `scheduler/`).

No trio, no I/O, no clock (the time is a parameter): tests/test_layers.py holds that. The
server loops (`server/local.py`, `server/cluster/server.py`) read a snapshot, call `schedule`
and commit the plan it returns.

What lives where (each module imports only `structs`, `lib` and the modules below it here):

- `schedule` (this module): one evaluation in, one plan out. It reads what every pass needs
  (the job's allocations, the nodes and their states, the job's rollout), stops everything of
  a stopped or missing job, and otherwise hands the pass to the scheduler of the job's type,
  as Nomad's `scheduler/scheduler.go` `BuiltinSchedulers` does: service and batch jobs to
  generic.py, system and sysbatch jobs to system.py.
- generic.py: the service and batch scheduler (reconcile, place, preempt, block);
  system.py: one allocation of each group on every eligible node.
- placement.py: usage, fit, ranking and preemption on a node (`Placer`), for both.
- plan.py: the `Plan` a pass returns, the `SchedulerState` it reads, and the finishing steps
  every pass runs (lost, unknown, complete or blocked).
- binpack.py (candidates and scores), feasible.py (constraints), ports.py (host ports),
  disconnect.py (allocations on nodes gone wrong), reschedule.py (failed allocations),
  deployments.py (rolling updates and canaries), drain.py (node drains), periodic.py (when a
  periodic job launches).
"""

from __future__ import annotations

from collections.abc import Callable

from yurt.runtime.server.scheduler import deployments, disconnect, generic, system
from yurt.runtime.server.scheduler.binpack import ALGORITHM_BINPACK
from yurt.runtime.server.scheduler.plan import (
    DesiredUpdates,
    Plan,
    SchedulerState,
    finish,
    mark_lost,
    stopped,
)
from yurt.runtime.structs import Evaluation, Job
from yurt.runtime.structs.update import Deployment


def schedule(state: SchedulerState, ev: Evaluation, job: Job | None, *, index: int,
             now: int, new_id: Callable[[], str], can_preempt: bool = True,
             deployment: Deployment | None = None, algorithm: str = ALGORITHM_BINPACK) -> Plan:
    """The plan for evaluation `ev` of `job` (None or stopped: stop everything).

    `index` numbers what the plan writes, `now` (unix ns) times it, `new_id` names what it
    creates. `deployment` is the job's latest (deployments.py: one of another version is
    cancelled); `can_preempt` and `algorithm` are the scheduler configuration's
    `PreemptionConfig` for the job's type and `SchedulerAlgorithm` (binpack.py).
    """
    plan = Plan(eval=ev)
    allocs = state.job_allocs(ev.job_id)
    live = [a for a in allocs if not a.is_terminal()]
    nodes = state.nodes()
    states = disconnect.classify(live, {n.id: n for n in nodes}, now, allocs)
    rollout, plan.deployments = deployments.start(job, deployment, index, now)
    if job is None or job.stop or rollout is None:
        for alloc in live:
            plan.stop.append(stopped(alloc, index, now, "alloc is being stopped"))
            plan.desired.setdefault(alloc.task_group, DesiredUpdates()).stop += 1
        mark_lost(plan, states.lost)
        finish(state, plan, index, now, new_id)
        return plan
    if job.type in system.SYSTEM_TYPES:
        return system.schedule_system(state, plan, job, nodes, states, index=index, now=now,
                                      new_id=new_id, can_preempt=can_preempt,
                                      algorithm=algorithm)
    return generic.schedule_generic(state, plan, job, rollout, allocs, nodes, states,
                                    index=index, now=now, new_id=new_id,
                                    can_preempt=can_preempt, algorithm=algorithm)

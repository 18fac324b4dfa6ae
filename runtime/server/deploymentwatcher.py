"""The deployment watcher: what Nomad's `deploymentwatcher` does for each active deployment,
as a sans-io core (the pure functions) and its wiring into `LocalServer`.

The core, fed with a deployment, its allocations and the time:
- `on_health`: an allocation newly healthy makes an evaluation (TriggeredBy
  `deployment-watcher`) that places the next batch; an unhealthy one fails the deployment at
  once when its group has no progress deadline or its reschedule policy is used up (Nomad's
  `shouldFailEarly`), else it is left to be replaced; auto-promotion once every canary of
  every canarying group is healthy.
- `progress_cutoff`: the earliest RequireProgressBy of the groups not done yet; when it passes,
  `deadline_failure` (Nomad's `shouldFail`) says whether the deployment fails ("Failed due to
  progress deadline") and whether it rolls back.
- `rollback_target`: the latest stable version to revert to, with Nomad's description
  variants (rolling back, not rolling back as the spec is the same, no stable version).
- `promote`: Nomad's promotion rules and error texts.

The wiring: `after_alloc_updates` runs under the server's lock right after a client update
is committed; `run_deadlines` is one task in `LocalServer.run`'s nursery that sleeps until the
next progress deadline (or until a deployment changes) and fails what is overdue, under the
lock. Every action is one commit (the deployment, its evaluation and a rollback's new job
version together), so a crash leaves either the old state or the new one; a deadline that
passed while the agent was down is acted on when it comes back, and so is health committed
just before a crash that no evaluation saw (`catch_up`, Nomad's ModifyIndex rule).

The user's actions (Nomad's Deployment.Fail, Pause, Promote, Unblock, SetAllocHealth: the
`/v1/deployment/...` routes) are the server's operations (`LocalServer.fail_deployment` and
its siblings), which run the functions at the end of this module under the server's lock; a
cluster server runs them again from the top after a write conflict, as its other writes
(runtime/server/cluster/server.py `_retrying`). A refusal is `DeploymentRefused`, with
Nomad's text.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NoReturn

import msgspec
import trio

from yurt.runtime.eventstream import job_event
from yurt.runtime.server.records import job_spec
from yurt.runtime.server.scheduler.deployments import (
    is_healthy,
    is_unhealthy,
    requires_promotion,
    with_status,
)
from yurt.runtime.server.scheduler.reschedule import as_time, eligible, policy_for, unix_ns
from yurt.runtime.structs import Allocation, AllocDeploymentStatus, Evaluation, Job
from yurt.runtime.structs.eval import EVAL_STATUS_CANCELED
from yurt.runtime.structs.update import (
    DEPLOYMENT_DESC_FAILED_ALLOCATIONS,
    DEPLOYMENT_DESC_FAILED_BY_USER,
    DEPLOYMENT_DESC_PAUSED,
    DEPLOYMENT_DESC_PROGRESS_DEADLINE,
    DEPLOYMENT_DESC_RUNNING,
    DEPLOYMENT_STATUS_FAILED,
    DEPLOYMENT_STATUS_PAUSED,
    DEPLOYMENT_STATUS_RUNNING,
    Deployment,
    desc_no_rollback_target,
    desc_rollback,
    desc_rollback_noop,
)

# A type-only cycle inside server/, kept on purpose: these are `LocalServer`'s deployment
# operations in a file of their own (Nomad's `nomad/deploymentwatcher` likewise works on the
# server's state store); they run under its lock and commit through it, and nothing here
# imports local.py at run time.
if TYPE_CHECKING:
    from yurt.runtime.server.local import LocalServer

log = logging.getLogger("yurt.server.deploymentwatcher")

#: Nomad's `EvalTriggerDeploymentWatcher`.
TRIGGER_DEPLOYMENT_WATCHER: Final = "deployment-watcher"


class DeploymentRefused(Exception):
    """A deployment action Nomad refuses; its text is Nomad's."""


class DeploymentNotFound(DeploymentRefused):
    """The action names no deployment the server has."""


class PromotionError(DeploymentRefused):
    """A promotion Nomad refuses; its text is Nomad's."""


@dataclass(frozen=True)
class HealthDecision:
    evaluate: bool = False
    fail: bool = False
    rollback: bool = False
    promote: bool = False


def _fails_early(d: Deployment, job: Job | None, alloc: Allocation, now: int) -> bool:
    """Nomad's `shouldFailEarly`."""
    state = d.task_groups.get(alloc.task_group)
    if state is None or not is_unhealthy(alloc):
        return False
    if state.progress_deadline == 0:
        return True
    if d.active() and job is not None:
        policy = policy_for(job, alloc.task_group)
        return policy is None or not eligible(policy, alloc, now)
    return False


def on_health(d: Deployment, job: Job | None, allocs: Iterable[Allocation],
              newly_healthy: bool, now: int) -> HealthDecision:
    """What the watcher does after allocations of `d` changed (`allocs`: the deployment's, as
    now; `newly_healthy`: one of them just became healthy)."""
    allocs = list(allocs)
    fail = rollback = False
    for alloc in allocs:
        if _fails_early(d, job, alloc, now):
            fail = True
            state = d.task_groups[alloc.task_group]
            rollback = rollback or state.auto_revert
    if fail:
        return HealthDecision(fail=True, rollback=rollback)
    return HealthDecision(evaluate=newly_healthy, promote=_auto_promotable(d, allocs))


def _auto_promotable(d: Deployment, allocs: list[Allocation]) -> bool:
    """Nomad's `autoPromoteDeployment`: every canarying group auto-promotes and has all its
    canaries placed and healthy."""
    if not requires_promotion(d) or not any(s.placed_canaries for s in d.task_groups.values()):
        return False
    # A healthy canary that has stopped since counts no more (`promote` would refuse).
    healthy = {a.id for a in allocs if is_healthy(a) and not a.is_terminal()}
    for state in d.task_groups.values():
        if state.desired_canaries < 1:
            continue
        if not state.auto_promote or len(state.placed_canaries) < state.desired_canaries:
            return False
        if sum(1 for c in state.placed_canaries if c in healthy) != state.desired_canaries:
            return False
    return True


def promote(d: Deployment, groups: list[str] | None, allocs: Iterable[Allocation], index: int,
            now: int) -> Deployment:
    """Nomad's `UpdateDeploymentPromotion` (`groups` None: all): every chosen group with
    canaries needs them all healthy, else PromotionError with Nomad's (multierror) text. The
    progress deadline starts again from now."""
    chosen = set(groups) if groups is not None else set(d.task_groups)
    canaries = {c for s in d.task_groups.values() for c in s.placed_canaries}
    healthy: dict[str, int] = {}
    for a in allocs:
        if a.id in canaries and a.task_group in chosen and not a.is_terminal() \
                and is_healthy(a):
            healthy[a.task_group] = healthy.get(a.task_group, 0) + 1
    problems = [f'Task group "{name}" has {healthy.get(name, 0)}/{s.desired_canaries} '
                "healthy allocations" for name, s in sorted(d.task_groups.items())
                if name in chosen and s.desired_canaries
                and healthy.get(name, 0) < s.desired_canaries]
    if problems:
        count = f"{len(problems)} error{'s' if len(problems) > 1 else ''} occurred"
        raise PromotionError(f"{count}:\n" + "".join(f"\t* {p}\n" for p in problems) + "\n")
    states = dict(d.task_groups)
    for name in chosen & set(states):
        state = states[name]
        by = state.require_progress_by
        if state.progress_deadline > 0 and by.year > 1:
            by = as_time(now + state.progress_deadline)
        states[name] = msgspec.structs.replace(state, promoted=True, require_progress_by=by)
    out = msgspec.structs.replace(d, task_groups=states, modify_index=index, modify_time=now)
    if not requires_promotion(out) and out.status == DEPLOYMENT_STATUS_RUNNING:
        out.status_description = DEPLOYMENT_DESC_RUNNING
    return out


def _done_groups(d: Deployment, allocs: list[Allocation]) -> dict[str, bool]:
    healthy: dict[str, int] = {}
    for a in allocs:
        if not a.is_terminal() and is_healthy(a):
            healthy[a.task_group] = healthy.get(a.task_group, 0) + 1
    return {name: not (s.desired_canaries != 0 and not s.promoted)
            and healthy.get(name, 0) >= s.desired_total
            for name, s in d.task_groups.items()}


def progress_cutoff(d: Deployment, allocs: Iterable[Allocation]) -> int | None:
    """Nomad's `getDeploymentProgressCutoff` (unix ns): the earliest RequireProgressBy of
    the groups not done; None if there is none."""
    done = _done_groups(d, list(allocs))
    cutoffs = [unix_ns(s.require_progress_by) for n, s in d.task_groups.items()
               if not done[n] and s.require_progress_by.year > 1]
    return min(cutoffs) if cutoffs else None


def deadline_failure(d: Deployment, job: Job | None) -> tuple[bool, bool]:
    """Nomad's `shouldFail` at the progress deadline: (fail, roll back)."""
    if d.status == DEPLOYMENT_STATUS_PAUSED:
        return False, False
    fail = False
    for name, state in d.task_groups.items():
        if state.desired_canaries > 0 and not state.promoted:
            if state.healthy_allocs >= state.desired_canaries:
                continue
        elif state.healthy_allocs >= state.desired_total:
            continue
        fail = True
        group = job.lookup_group(name) if job is not None else None
        if group is not None and group.update is not None and group.update.auto_revert:
            return True, True
    return fail, False


def rollback_target(job: Job, versions: Iterable[Job], base: str) -> tuple[Job | None, str]:
    """The version to revert to and the failure's description (Nomad's `latestStableJob` and
    `handleRollbackValidity`)."""
    stable = next((v for v in sorted(versions, key=lambda v: -v.version) if v.stable), None)
    if stable is None:
        return None, desc_no_rollback_target(base)
    if job_spec(stable) != job_spec(job):
        return stable, desc_rollback(base, stable.version)
    return None, desc_rollback_noop(base, stable.version)


# --------------------------------------------------------------------------- wiring


def deployment_allocs(server: LocalServer, d: Deployment) -> list[Allocation]:
    return [a for a in server.job_allocs(d.job_id) if a.deployment_id == d.id]


@dataclass
class Outcome:
    """What an action did: the evaluation it made and the version a rollback registered."""

    eval: Evaluation | None
    index: int
    reverted_version: int | None = None


async def evaluate(server: LocalServer, d: Deployment, changed: Deployment | None = None,
                   event: str = "DeploymentStatusUpdate",
                   allocs: list[Allocation] | None = None, revert_to: Job | None = None
                   ) -> Outcome:
    """Commit `changed` (if any) and `allocs` with a new evaluation of the job, then process
    it. With `revert_to`, that version is registered as the job's next one in the same
    commit (Nomad's deployment status update carrying the rollback job): a crash cannot
    leave the deployment failed without its rollback."""
    job = server.jobs.get(d.job_id)
    index = server.take_index()
    written = [msgspec.structs.replace(a, modify_index=index) for a in allocs or []]
    if job is None:
        await server._commit([], written, deployments=[changed] if changed else [],
                             deployment_type=event)
        return Outcome(None, index)
    reverted = server.candidate(revert_to, index) if revert_to is not None else None
    if reverted is not None:
        job = reverted
    ev = msgspec.structs.replace(server._new_eval(job, TRIGGER_DEPLOYMENT_WATCHER, index),
                                 deployment_id=d.id)
    await server._commit([reverted] if reverted else [], written,
                         [job_event("JobRegistered", reverted)] if reverted else [],
                         evals=[ev], deployments=[changed] if changed else [],
                         deployment_type=event, new_version=reverted is not None)
    await server._process(ev)
    return Outcome(ev, index, revert_to.version if revert_to is not None else None)


async def apply_promotion(server: LocalServer, d: Deployment, groups: list[str] | None
                          ) -> Outcome:
    """Promote `d` (`groups` None: all; raises PromotionError) in one change with an
    evaluation: its healthy canaries are canaries no more (Nomad's promotion clears their
    `DeploymentStatus.Canary`)."""
    allocs = deployment_allocs(server, d)
    index, now = server.index + 1, server._clock()
    promoted = promote(d, groups, allocs, index, now)
    chosen = set(groups) if groups is not None else set(d.task_groups)
    canaries = {c for name, s in d.task_groups.items() if name in chosen
                for c in s.placed_canaries}
    cleared = [msgspec.structs.replace(a, deployment_status=msgspec.structs.replace(
        a.deployment_status, canary=False, modify_index=index), alloc_modify_index=index,
        modify_time=now) for a in allocs
        if a.id in canaries and not a.is_terminal() and is_healthy(a)
        and a.deployment_status is not None]
    return await evaluate(server, d, promoted, "DeploymentPromotion", allocs=cleared)


async def fail(server: LocalServer, d: Deployment, base: str, rollback: bool,
               event: str = "DeploymentStatusUpdate",
               allocs: list[Allocation] | None = None) -> Outcome:
    """Fail `d` with `base` as its description, rolling back to the latest stable version
    when `rollback` (Nomad's description variants say which happened); `allocs` are
    written in the same change."""
    job = server.jobs.get(d.job_id)
    target, desc = None, base
    if rollback and job is not None:
        target, desc = rollback_target(job, server.versions.get(job.id, []), base)
    failed = with_status(d, DEPLOYMENT_STATUS_FAILED, desc, server.index + 1, server._clock())
    return await evaluate(server, d, failed, event, allocs=allocs, revert_to=target)


async def after_alloc_updates(server: LocalServer, updated: list[Allocation],
                              prior: dict[str, Allocation]) -> None:
    """React to the health the client reported for allocations of active deployments
    (under the server's lock, after the update is committed)."""
    for deployment_id in dict.fromkeys(a.deployment_id for a in updated if a.deployment_id):
        d = server.deployments.get(deployment_id)
        if d is None or not d.active():
            continue
        mine = [a for a in updated if a.deployment_id == deployment_id]
        if not any(a.deployment_status is not None for a in mine):
            continue
        newly = any(is_healthy(a) and not is_healthy(prior[a.id]) for a in mine
                    if a.id in prior)
        await _decide(server, d, deployment_allocs(server, d), newly)


def latest_eval_index(evals: Iterable[Evaluation]) -> int:
    """Nomad's `jobEvalStatus`: the newest state any evaluation of the job has seen (its
    snapshot index, else its create index); canceled ones saw nothing."""
    return max((e.snapshot_index or e.create_index for e in evals
                if e.status != EVAL_STATUS_CANCELED), default=0)


def health_unseen(allocs: Iterable[Allocation], latest_eval: int) -> bool:
    """Nomad's rule for `createEval`: some allocation turned healthy after the job's latest
    evaluation, so no evaluation has placed the batch its health allows yet."""
    return any(is_healthy(a) and a.deployment_status is not None
               and a.deployment_status.modify_index > latest_eval for a in allocs)


async def catch_up(server: LocalServer) -> None:
    """Decide for every active deployment as `after_alloc_updates` would have: an agent killed
    between committing a client's health and the watcher's evaluation comes back with health
    no evaluation has seen, which would stall the rollout (and later fail it)."""
    for d in [d for d in server.deployments.values() if d.active()]:
        allocs = deployment_allocs(server, d)
        unseen = health_unseen(allocs, latest_eval_index(server.job_evals(d.job_id)))
        await _decide(server, d, allocs, unseen)


async def _decide(server: LocalServer, d: Deployment, allocs: list[Allocation],
                  newly_healthy: bool) -> None:
    decision = on_health(d, server.jobs.get(d.job_id), allocs, newly_healthy, server._clock())
    if decision.fail:
        await fail(server, d, DEPLOYMENT_DESC_FAILED_ALLOCATIONS, decision.rollback)
    elif decision.promote:
        await _promote_all(server, d)
    elif decision.evaluate:
        await evaluate(server, d)


def prune_handled(handled: dict[str, int], deployments: dict[str, Deployment]) -> None:
    """Forget the deadlines handled for deployments that are no longer active (or gone): only
    an active one is watched again, and the agent runs for months."""
    for deployment_id in [i for i in handled if (d := deployments.get(i)) is None
                          or not d.active()]:
        del handled[deployment_id]


async def auto_promote(server: LocalServer, deployment_id: str) -> None:
    """Promote the deployment if its canaries now allow it (health set by hand through the
    API: Nomad's watcher sees those allocation updates like a client's)."""
    d = server.deployments.get(deployment_id)
    if d is not None and d.active() and _auto_promotable(d, deployment_allocs(server, d)):
        await _promote_all(server, d)


async def _promote_all(server: LocalServer, d: Deployment) -> None:
    """Nomad's auto-promotion: a refusal is logged, and the update that allowed it stays
    accepted (raising would fail an alloc sync whose update is already committed, forever)."""
    try:
        await apply_promotion(server, d, None)
    except PromotionError as err:
        log.error("failed to auto promote deployment %s: %s", d.id, err)


async def run_deadlines(server: LocalServer, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> None:
    """Act on what an earlier agent left undecided (`catch_up`), then fail deployments whose
    progress deadline passed. Until cancelled."""
    async with server._lock:
        await catch_up(server)
    task_status.started()
    handled: dict[str, int] = {}  # a cutoff that passed without failing (paused): not again
    while True:
        server.deployments_changed = trio.Event()
        prune_handled(handled, server.deployments)
        cutoffs = [c for d in server.deployments.values() if d.active()
                   and (c := progress_cutoff(d, deployment_allocs(server, d))) is not None
                   and handled.get(d.id) != c]
        wait = (max(min(cutoffs) - server._clock(), 0) / 1e9) if cutoffs else math.inf
        with trio.move_on_after(wait):
            await server.deployments_changed.wait()
            continue
        async with server._lock:
            now = server._clock()
            for d in list(server.deployments.values()):
                cutoff = progress_cutoff(d, deployment_allocs(server, d)) if d.active() else None
                if cutoff is None or cutoff > now:
                    continue
                handled[d.id] = cutoff
                failing, rollback = deadline_failure(d, server.jobs.get(d.job_id))
                if failing:
                    await fail(server, d, DEPLOYMENT_DESC_PROGRESS_DEADLINE, rollback)


# --------------------------------------------------------------------------- the user's actions
# Each runs under the server's lock (local.py `LocalServer.fail_deployment` and its siblings).


def active_deployment(server: LocalServer, deployment_id: str, terminal: str) -> Deployment:
    """The deployment, refused with `terminal` when it is no longer active."""
    d = server.deployments.get(deployment_id)
    if d is None:
        raise DeploymentNotFound("deployment not found")
    if not d.active():
        raise DeploymentRefused(terminal)
    return d


async def fail_by_user(server: LocalServer, deployment_id: str) -> Outcome:
    """Nomad's Deployment.Fail: failed by the user, rolled back when a group auto-reverts."""
    d = active_deployment(server, deployment_id, "can't fail terminal deployment")
    rollback = any(s.auto_revert for s in d.task_groups.values())
    return await fail(server, d, DEPLOYMENT_DESC_FAILED_BY_USER, rollback)


async def set_paused(server: LocalServer, deployment_id: str, pause: bool) -> Outcome:
    """Nomad's Deployment.Pause: paused (no evaluation), or resumed with an evaluation that
    places what the pause held back."""
    d = active_deployment(server, deployment_id, "can't pause terminal deployment" if pause
                          else "can't resume terminal deployment")
    now = server._clock()
    if pause:
        index = server.take_index()
        paused = with_status(d, DEPLOYMENT_STATUS_PAUSED, DEPLOYMENT_DESC_PAUSED, index, now)
        await server._commit([], [], deployments=[paused])
        return Outcome(None, index)
    resumed = with_status(d, DEPLOYMENT_STATUS_RUNNING, DEPLOYMENT_DESC_RUNNING,
                          server.index + 1, now)
    return await evaluate(server, d, resumed)


async def promote_by_user(server: LocalServer, deployment_id: str, groups: list[str] | None
                          ) -> Outcome:
    """Nomad's Deployment.Promote (`groups` None: all); PromotionError with Nomad's text."""
    d = active_deployment(server, deployment_id, "can't promote terminal deployment")
    return await apply_promotion(server, d, groups)


def unblock(server: LocalServer, deployment_id: str) -> NoReturn:
    """Nomad's Deployment.Unblock: only a multiregion deployment is ever blocked, and a yurt
    server has one region, so an active deployment is refused too."""
    active_deployment(server, deployment_id, "can't unblock terminal deployment")
    raise DeploymentRefused("can't unblock running deployment")


async def set_health(server: LocalServer, deployment_id: str, healthy_ids: list[str],
                     unhealthy_ids: list[str]) -> Outcome:
    """Nomad's Deployment.SetAllocHealth: the allocations' health as the user says, in one
    change with what it decides (an evaluation, or the deployment failed when one is
    unhealthy), then an auto-promotion if the canaries now allow it."""
    d = active_deployment(server, deployment_id,
                          "can't set health of allocations for a terminal deployment")
    if not healthy_ids and not unhealthy_ids:
        raise DeploymentRefused("must specify at least one healthy/unhealthy allocation ID")
    now = server._clock()
    stamp = as_time(now)
    changed: list[Allocation] = []
    for ids, healthy in ((healthy_ids, True), (unhealthy_ids, False)):
        for alloc_id in ids:
            alloc = server.allocs.get(alloc_id)
            if alloc is None:
                raise DeploymentRefused(f'unknown alloc "{alloc_id}"')
            if alloc.deployment_id != d.id:
                raise DeploymentRefused(f'alloc "{alloc_id}" is not part of deployment '
                                        f'"{d.id}"')
            status = alloc.deployment_status or AllocDeploymentStatus()
            changed.append(msgspec.structs.replace(
                alloc, modify_time=now, deployment_status=msgspec.structs.replace(
                    status, healthy=healthy, timestamp=stamp,
                    modify_index=server.index + 1)))
    if unhealthy_ids:
        groups = {a.task_group for a in changed if a.id in unhealthy_ids}
        rollback = any(d.task_groups[g].auto_revert for g in groups if g in d.task_groups)
        return await fail(server, d, DEPLOYMENT_DESC_FAILED_ALLOCATIONS, rollback,
                          "DeploymentAllocHealth", changed)
    outcome = await evaluate(server, d, None, "DeploymentAllocHealth", allocs=changed)
    await auto_promote(server, d.id)
    return outcome

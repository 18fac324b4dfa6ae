"""What the server records look like, apart from how it changes them: a job's spec (what a
version compares), its status (Nomad's `getJobStatus`), its version history and scaling
events (bounded as Nomad's), evaluation events, and what a register answers. Pure.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from yurt.runtime.eventstream import Event
from yurt.runtime.server.dispatch import is_template
from yurt.runtime.server.scheduler.plan import Plan
from yurt.runtime.server.scheduler.reschedule import eligible, needs_reschedule, policy_for
from yurt.runtime.structs import Allocation, Evaluation, Job, is_client_terminal

_SERVER_FIELDS = ("stop", "status", "status_description", "version", "submit_time",
                  "create_index", "modify_index", "job_modify_index", "stable")
#: Versions of a job kept for its history (Nomad's `JobTrackedVersions`).
JOB_TRACKED_VERSIONS = 6
#: Scaling events kept per group (Nomad's `JobTrackedScalingEvents`).
JOB_TRACKED_SCALING_EVENTS = 20


def job_spec(job: Job) -> bytes:
    """The job as the user wrote it: server bookkeeping left out."""
    blank = Job()
    return msgspec.json.encode(msgspec.structs.replace(
        job, **{f: getattr(blank, f) for f in _SERVER_FIELDS}))


def without_job(alloc: Allocation) -> Allocation:
    """An allocation as Nomad's events carry it: without its job (kept small)."""
    return msgspec.structs.replace(alloc, job=None)


def eval_event(ev: Evaluation) -> Event:
    return Event(topic="Evaluation", type="EvaluationUpdated", key=ev.id,
                 namespace=ev.namespace, filter_keys=[ev.job_id] if ev.job_id else [],
                 payload={"Evaluation": ev})


def job_status(job: Job, allocs: list[Allocation], open_evals: bool,
               rolling: bool = False) -> str:
    """Nomad's `getJobStatus`: running while a deployment is active (`rolling`) or an
    allocation is not terminal, pending while an evaluation is not (or nothing happened
    yet), dead once everything is terminal."""
    if job.type == "system" or is_template(job):  # a template: its children run
        return "dead" if job.stop else "running"
    if rolling or any(not a.is_terminal() for a in allocs):
        return "running"
    if open_evals:
        return "pending"
    # Every job here had an evaluation (register makes one), all terminal now.
    return "dead"


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass
class Registration:
    """What registering (or stopping) a job did: its evaluation's outcome, flattened."""

    eval_id: str
    index: int
    placed: list[Allocation] = field(default_factory=list)
    stopped: list[Allocation] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # group → why it was not placed
    unchanged: bool = False
    job_modify_index: int = 0
    plan: Plan | None = None


def history_after(job: Job, history: list[Job]) -> tuple[list[Job], list[int]]:
    """A job's history (newest first) once `job` is its newest version: the versions kept,
    and the version numbers dropped for being older than the JOB_TRACKED_VERSIONS newest."""
    versions = [job, *(v for v in history if v.version != job.version)]
    return versions[:JOB_TRACKED_VERSIONS], [v.version for v in versions[JOB_TRACKED_VERSIONS:]]


class ScalingEvents:
    """Scaling events per (job, group), newest first, in memory (as many as Nomad keeps)."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def record(self, job_id: str, group: str, event: dict[str, Any]) -> None:
        events = self._events.setdefault((job_id, group), [])
        events.insert(0, event)
        del events[JOB_TRACKED_SCALING_EVENTS:]

    def of(self, job_id: str, group: str) -> list[dict[str, Any]] | None:
        return self._events.get((job_id, group)) or None

    def forget(self, job_id: str) -> None:
        for key in [k for k in self._events if k[0] == job_id]:
            del self._events[key]


def with_status(current: Mapping[str, Job], allocs_now: Mapping[str, Allocation],
                open_evals: Mapping[str, set[str]], index: int, jobs: list[Job],
                allocs: list[Allocation], evals: list[Evaluation],
                rolling: set[str] | frozenset[str] = frozenset(),
                also: set[str] | frozenset[str] = frozenset()) -> list[Job]:
    """`jobs` (about to be written with `allocs` and `evals`), with every other job the
    change touches (`also`: jobs whose deployment it writes) whose status it changes, each
    with its status as Nomad's `getJobStatus` gives it once the change is made (another job's
    ModifyIndex becomes `index`). `rolling`: jobs with an active deployment after it."""
    touched = {j.id: j for j in jobs}
    for job_id in {a.job_id for a in allocs} | {e.job_id for e in evals} | set(also):
        if job_id not in touched and job_id in current:
            touched[job_id] = current[job_id]
    if not touched:
        return jobs
    written = {a.id: a for a in allocs}
    by_job: dict[str, list[Allocation]] = {job_id: [] for job_id in touched}
    for alloc in [*allocs_now.values(), *allocs]:
        if alloc.job_id in by_job and written.get(alloc.id, alloc) is alloc:
            by_job[alloc.job_id].append(alloc)
    opened = {e.job_id for e in evals if not e.is_terminal()}
    closed = {e.id for e in evals if e.is_terminal()}
    out = list(jobs)
    given = {j.id for j in jobs}
    for job_id, job in touched.items():
        has_open = job_id in opened or bool(open_evals.get(job_id, set()) - closed)
        status = job_status(job, by_job[job_id], has_open, job_id in rolling)
        if status == job.status:
            continue
        if job_id in given:
            out = [msgspec.structs.replace(j, status=status) if j.id == job_id else j
                   for j in out]
        else:
            out.append(msgspec.structs.replace(job, status=status, modify_index=index))
    return out


#: Nomad's `eval_gc_threshold`: a terminal evaluation is kept this long after its last change
#: (a batch job's, `batch_eval_gc_threshold`, a day), then collected.
EVAL_GC_THRESHOLD = 3600 * 10**9
BATCH_EVAL_GC_THRESHOLD = 24 * 3600 * 10**9
#: Nomad's `eval_gc_interval`: how often the server looks for evaluations to collect.
EVAL_GC_INTERVAL = 300.0


def awaiting_reschedule(alloc: Allocation, jobs: Mapping[str, Job], now: int) -> bool:
    """A failed allocation its live job's policy will still replace: kept (with the
    evaluation that placed it) until it is, as Nomad's allocGCEligible keeps it, since its
    replacement takes over its reschedule record."""
    job = jobs.get(alloc.job_id)
    if job is None or job.stop or not needs_reschedule(alloc):
        return False
    policy = policy_for(job, alloc.task_group)
    return policy is not None and eligible(policy, alloc, now)


def collectable_evals(evals: Mapping[str, Evaluation], allocs: Mapping[str, Allocation],
                      now: int, jobs: Mapping[str, Job] | None = None) -> list[str]:
    """Evaluations to forget at `now` (unix ns), as Nomad's core GC picks them: terminal for
    longer than the threshold of their job type, none of their allocations still live or
    awaiting its replacement."""
    live_evals = {a.eval_id for a in allocs.values()
                  if not a.is_terminal() or awaiting_reschedule(a, jobs or {}, now)}
    return [e.id for e in evals.values()
            if e.is_terminal() and e.id not in live_evals
            and now - e.modify_time > (BATCH_EVAL_GC_THRESHOLD if e.type == "batch"
                                       else EVAL_GC_THRESHOLD)]


def collectable_allocs(eval_ids: set[str], allocs: Mapping[str, Allocation],
                       jobs: Mapping[str, Job], now: int) -> list[str]:
    """The allocations Nomad's GC reaps with the evaluations `eval_ids` that placed them:
    done on the client for longer than the threshold, not the previous allocation of a live
    one, not awaiting its replacement; of a batch or sysbatch job still registered and
    running, none (a completed one is what says the work is done)."""
    named = {a.previous_allocation for a in allocs.values() if not a.is_terminal()}
    out = []
    for alloc in allocs.values():
        if (alloc.eval_id not in eval_ids or not alloc.is_terminal() or alloc.id in named
                or not is_client_terminal(alloc.client_status)
                or now - alloc.modify_time <= EVAL_GC_THRESHOLD
                or awaiting_reschedule(alloc, jobs, now)):
            continue
        job = jobs.get(alloc.job_id)
        if job is not None and not job.stop and job.type in ("batch", "sysbatch"):
            continue
        out.append(alloc.id)
    return out

"""A job's lifecycle beyond register and stop, as Nomad's HTTP API has it: versions (with
diffs), revert, stable, summary, plan (a dry run), scale (GET status, POST count, within the
group's scaling policy), the tasks' actions, and `/v1/validate/job`.

A plan runs the pure scheduler (server/scheduler/) over the server's state as it is (the
job's latest deployment included, so a rollout in progress limits it as it limits the server),
without the lock and without committing anything: it has no await between reading and
deciding, so it sees one consistent state and changes nothing. Revert and scale register a
job through the server like a register does (a new version, an evaluation); their checks run
under the server's lock, so they judge the job as it is when the change is made.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.authz import require_namespace
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import (
    admit_node_pool,
    job_in,
    namespace_for_body,
    require_register,
)
from yurt.runtime.api.request import (
    ApiError,
    body_field,
    body_json,
    json_response,
    parse_job_off_loop,
    query_bool,
)
from yurt.runtime.jobspec.limits import job_count_problem
from yurt.runtime.server.deploymentbook import latest_deployment
from yurt.runtime.server.dispatch import is_template
from yurt.runtime.server.jobdiff import annotate_plan, job_diff
from yurt.runtime.server.namespaces import DEFAULT_NAMESPACE
from yurt.runtime.server.scheduler import schedule
from yurt.runtime.server.scheduler.plan import DesiredUpdates
from yurt.runtime.structs import (
    ALLOC_CLIENT_COMPLETE,
    ALLOC_CLIENT_FAILED,
    ALLOC_CLIENT_LOST,
    ALLOC_CLIENT_PENDING,
    ALLOC_CLIENT_RUNNING,
    EVAL_STATUS_BLOCKED,
    TRIGGER_JOB_REGISTER,
    TRIGGER_JOB_SCALING,
    Allocation,
    Evaluation,
    Job,
)

_meta = {"LastContact": 0, "KnownLeader": True}


def _register_answer(ctx: Context, eval_id: str, index: int, job_modify_index: int,
                     warnings: str = "") -> Response:
    return json_response({"EvalID": eval_id, "EvalCreateIndex": index,
                          "JobModifyIndex": job_modify_index, "Warnings": warnings,
                          "Index": ctx.server.visible_index, **_meta})


def _int_field(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, f'"{name}" must be an integer')
    return value


async def versions(ctx: Context, request: Request) -> Response:
    job_id = request.path_params["job_id"]
    job_in(ctx, request, job_id)
    history = ctx.server.versions.get(job_id, [])
    diffs = None
    if query_bool(request, "diffs"):
        reference = _diff_reference(request, history)
        if reference is not None:  # each version's diff from the one asked for
            diffs = [job_diff(reference, newer) for newer in history]
        else:  # each version's diff from the one before it; the oldest has none
            diffs = [job_diff(older, newer) for newer, older in itertools.pairwise(history)]
    return json_response({"Versions": history, "Diffs": diffs,
                          "Index": ctx.server.visible_index, **_meta})


def _diff_reference(request: Request, history: list[Job]) -> Job | None:
    """The version `?diff_tag=NAME` or `?diff_version=N` names (nomad/job_endpoint.go
    `GetJobVersions`, with its texts), or None when neither is given."""
    tag = request.query_params.get("diff_tag", "")
    text = request.query_params.get("diff_version", "")
    if text and not (text.isascii() and text.isdigit()):
        raise ApiError(400, f'Failed to parse value of "diff_version" ({text}) as a uint64')
    if tag:
        found = next((v for v in history
                      if (v.version_tag or {}).get("Name") == tag), None)
        if found is None:
            raise ApiError(400, f'tag "{tag}" not found')
        return found
    if text:
        found = next((v for v in history if v.version == int(text)), None)
        if found is None:
            raise ApiError(400, f"version {text} not found")
        return found
    return None


async def _version_request(request: Request) -> tuple[str, dict[str, Any], int]:
    """A revert's or a stable's request: the job ID, its body, its `JobVersion`."""
    job_id = request.path_params["job_id"]
    body = await body_json(request)
    if body_field(body, "JobID", str, job_id) != job_id:
        raise ApiError(400, "Job ID does not match")
    version = _int_field(body, "JobVersion")
    if version is None:
        raise ApiError(400, '"JobVersion" is required')
    return job_id, body, version


async def revert(ctx: Context, request: Request) -> Response:
    job_id, body, version = await _version_request(request)
    enforce = _int_field(body, "EnforcePriorVersion")
    job_in(ctx, request, job_id)
    target = next((v for v in ctx.server.versions.get(job_id, [])
                   if v.version == version), None)
    if target is None:
        raise ApiError(400, f"job {job_id!r} at version {version} not found")

    def check(current: Job | None) -> None:
        if current is None:
            raise ApiError(404, "job not found")
        if enforce is not None and enforce != current.version:
            raise ApiError(400, f"enforcing version {enforce} does not match current "
                                f"version {current.version}")
        if current.version == version:
            raise ApiError(400, "can't revert to current version")

    result = await ctx.server.register_as(target, TRIGGER_JOB_REGISTER, check)
    return _register_answer(ctx, result.eval_id, result.index, result.job_modify_index)


async def stable(ctx: Context, request: Request) -> Response:
    job_id, body, version = await _version_request(request)
    mark = body_field(body, "Stable", bool, False)
    job_in(ctx, request, job_id)
    try:
        index = await ctx.server.set_stable(job_id, version, mark)
    except LookupError as e:
        raise ApiError(404, str(e)) from None
    return json_response({"Index": index})


def _summary_counts() -> dict[str, int]:
    return {"Queued": 0, "Complete": 0, "Failed": 0, "Running": 0, "Starting": 0,
            "Lost": 0, "Unknown": 0}


async def summary(ctx: Context, request: Request) -> Response:
    return json_response(job_summary(ctx, job_in(ctx, request, request.path_params["job_id"])))


def job_summary(ctx: Context, job: Job, allocs: list[Allocation] | None = None
                ) -> dict[str, Any]:
    """Nomad's `JobSummary`: per group, allocations by client status, and what is queued
    (waiting in a blocked evaluation). `allocs`: the job's, when the caller has them."""
    job_id = job.id
    server = ctx.server
    groups = {g.name: _summary_counts() for g in job.task_groups}
    by_status = {ALLOC_CLIENT_PENDING: "Starting", ALLOC_CLIENT_RUNNING: "Running",
                 ALLOC_CLIENT_COMPLETE: "Complete", ALLOC_CLIENT_FAILED: "Failed",
                 ALLOC_CLIENT_LOST: "Lost"}
    for alloc in server.job_allocs(job_id) if allocs is None else allocs:
        counts = groups.setdefault(alloc.task_group, _summary_counts())
        counts[by_status.get(ctx.client_status(alloc), "Unknown")] += 1
    for ev in server.blocked_evals(job_id):
        for group, queued in (ev.queued_allocations or {}).items():
            groups.setdefault(group, _summary_counts())["Queued"] += queued
    children = {"Pending": 0, "Running": 0, "Dead": 0}
    if is_template(job):  # Nomad's summary of a periodic or parameterized parent
        for child in server.jobs.values():
            if child.parent_id == job_id:
                children[child.status.capitalize()] = children.get(
                    child.status.capitalize(), 0) + 1
    return {"JobID": job.id, "Namespace": job.namespace, "Summary": groups,
            "Children": children,
            "CreateIndex": job.create_index, "ModifyIndex": job.modify_index}


def _annotations(desired: dict[str, DesiredUpdates]) -> dict[str, dict[str, int]]:
    return {name: {"Ignore": d.ignore, "Place": d.place, "Migrate": d.migrate, "Stop": d.stop,
                   "InPlaceUpdate": d.in_place_update,
                   "DestructiveUpdate": d.destructive_update, "Canary": d.canary,
                   "Preemptions": d.preemptions}
            for name, d in desired.items()}


def _updates(desired: dict[str, DesiredUpdates]) -> dict[str, dict[str, int]]:
    """A plan diff's per-group `Updates`, with Nomad's names, the non-zero ones."""
    out = {}
    for name, d in desired.items():
        counts = {"ignore": d.ignore, "create": d.place, "destroy": d.stop,
                  "in-place update": d.in_place_update,
                  "create/destroy update": d.destructive_update, "canary": d.canary}
        out[name] = {k: v for k, v in counts.items() if v}
    return out


async def plan(ctx: Context, request: Request) -> Response:
    job_id = request.path_params["job_id"]
    body = await body_json(request)
    if not isinstance(body.get("Job"), dict):
        raise ApiError(400, 'request body must be {"Job": {...}}')
    want_diff = body_field(body, "Diff", bool, False)
    body_field(body, "PolicyOverride", bool, False)
    namespace_for_body(request, body)  # the namespace a register of it would land in
    job = await parse_job_off_loop(msgspec.json.encode({"Job": body["Job"]}).decode(),
                                   ctx.parse_limiter, filename="request", format="json")
    if job.id != job_id:
        raise ApiError(400, "Job ID does not match")
    require_register(request, job, body, "plan-job")  # nomad/job_endpoint.go `Plan`
    job = await admit_node_pool(ctx, job)  # `Plan` runs the admission hooks too
    server = ctx.server
    existing = server.jobs.get(job_id)
    index = server.index + 1
    candidate = server.candidate(job, index)
    ev = Evaluation(id=str(uuid.uuid4()), namespace=job.namespace, priority=job.priority,
                    type=job.type, triggered_by=TRIGGER_JOB_REGISTER, job_id=job.id,
                    job_modify_index=candidate.job_modify_index, annotate_plan=True)
    # The job's latest deployment, as the server's own pass sees it: a rollout in progress
    # limits what the plan would update now (Nomad's plan runs the real reconciler).
    result = schedule(server, ev, candidate, index=index, now=time.time_ns(),
                      new_id=lambda: str(uuid.uuid4()),
                      can_preempt=server.scheduler_config.preemption_enabled(job.type),
                      deployment=latest_deployment(server.deployments.values(), job.id),
                      algorithm=server.scheduler_config.scheduler_algorithm)
    return json_response({
        "Index": server.visible_index,
        "Diff": annotate_plan(job_diff(existing, candidate, _updates(result.desired)))
        if want_diff else None,
        "Annotations": {"DesiredTGUpdates": _annotations(result.desired),
                        "PreemptedAllocs": None},
        "FailedTGAllocs": result.eval.failed_tg_allocs,
        "JobModifyIndex": existing.job_modify_index if existing is not None else 0,
        "CreatedEvals": [e for e in result.evals if e.status == EVAL_STATUS_BLOCKED] or None,
        "Warnings": "", "NextPeriodicLaunch": "0001-01-01T00:00:00Z", **_meta})


async def validate(ctx: Context, request: Request) -> Response:
    body = await body_json(request)
    if not isinstance(body.get("Job"), dict):
        raise ApiError(400, 'request body must be {"Job": {...}}')
    # nomad/job_endpoint.go `Validate`: read-job in the job's own namespace (command/agent/
    # job_endpoint.go `ValidateJobRequest` takes it from the job, `default` when it has none),
    # checked before the job is, so that its errors are told only to a token that may read.
    namespace = body["Job"].get("Namespace")
    require_namespace(request, namespace if isinstance(namespace, str) and namespace
                      else DEFAULT_NAMESPACE, "read-job")
    try:
        await parse_job_off_loop(msgspec.json.encode({"Job": body["Job"]}).decode(),
                                 ctx.parse_limiter, filename="request", format="json")
    except ApiError as e:
        if e.status != 400:
            raise
        return json_response({"DriverConfigValidated": False, "ValidationErrors": [str(e)],
                              "Error": str(e), "Warnings": ""})
    return json_response({"DriverConfigValidated": True, "ValidationErrors": None,
                          "Error": "", "Warnings": ""})


async def scale(ctx: Context, request: Request) -> Response:
    job_id = request.path_params["job_id"]
    if request.method == "GET":
        return _scale_status(ctx, job_in(ctx, request, job_id))
    body = await body_json(request)
    target = body_field(body, "Target", dict, {})
    group = target.get("Group")
    if not isinstance(group, str) or not group:
        raise ApiError(400, "missing task group name")
    count = _int_field(body, "Count")
    if count is not None and count < 0:
        raise ApiError(400, "scaling action count can't be negative")
    message = body_field(body, "Message", str, "")
    failed = body_field(body, "Error", bool, False)
    meta = body_field(body, "Meta", dict, {})
    check_index = _int_field(body, "JobModifyIndex") or 0  # `job scale -check-index`
    job = job_in(ctx, request, job_id)
    previous = job.lookup_group(group)
    if previous is None:
        raise ApiError(400, f"task group {group!r} specified for scaling does not exist "
                            "in job")
    policy = previous.scaling
    if count is not None and policy is not None:  # nomad/job_endpoint.go `Scale`
        low, high = policy.min or 0, -1 if policy.max is None else policy.max
        if count < low:
            raise ApiError(400, f"group count was less than scaling policy minimum: "
                                f"{count} < {low}")
        if high < count:
            raise ApiError(400, f"group count was greater than scaling policy maximum: "
                                f"{count} > {high}")
    server = ctx.server
    if count is None:  # only a scaling event to record
        server.scaling.record(job_id, group, {
            "Time": time.time_ns(), "CreateIndex": server.visible_index, "Count": None,
            "PreviousCount": previous.count, "Message": message, "Error": failed,
            "Meta": meta, "EvalID": None})
        return _register_answer(ctx, "", 0, job.job_modify_index)

    def scaled(current: Job | None) -> Job:
        # The count set on the job as it is now: a register committed meanwhile stays.
        if current is None or current.lookup_group(group) is None:
            raise ApiError(404, "job not found")
        if check_index > 0 and check_index != current.job_modify_index:
            # nomad/job_endpoint.go `Scale`: checked against the job as it is.
            raise ApiError(400, f"Enforcing job modify index {check_index}: job exists with "
                                f"conflicting job modify index: {current.job_modify_index}")
        too_many = job_count_problem(  # as Nomad's Job.Scale
            sum(count if g.name == group else g.count for g in current.task_groups))
        if too_many:
            raise ApiError(400, too_many)
        return msgspec.structs.replace(current, task_groups=[
            msgspec.structs.replace(g, count=count) if g.name == group else g
            for g in current.task_groups])

    result = await server.register_as(job, TRIGGER_JOB_SCALING, scaled)
    server.scaling.record(job_id, group, {
        "Time": time.time_ns(), "CreateIndex": result.index, "Count": count,
        "PreviousCount": previous.count, "Message": message, "Error": failed, "Meta": meta,
        "EvalID": result.eval_id or None})
    return _register_answer(ctx, result.eval_id, result.index, result.job_modify_index)


def _scale_status(ctx: Context, job: Job) -> Response:
    server = ctx.server
    groups: dict[str, dict[str, Any]] = {}
    for group in job.task_groups:
        groups[group.name] = {"Desired": group.count, "Placed": 0, "Running": 0,
                              "Healthy": 0, "Unhealthy": 0,
                              "Events": server.scaling.of(job.id, group.name)}
    for alloc in server.job_allocs(job.id):
        entry = groups.get(alloc.task_group)
        if entry is None or alloc.is_terminal():
            continue
        view = ctx.alloc_view(alloc.id)
        entry["Placed"] += 1
        if view.client_status == ALLOC_CLIENT_RUNNING:
            entry["Running"] += 1
        health = view.deployment_status.healthy if view.deployment_status else None
        if health is True:
            entry["Healthy"] += 1
        elif health is False:
            entry["Unhealthy"] += 1
    return json_response({"JobID": job.id, "Namespace": job.namespace,
                          "JobCreateIndex": job.create_index,
                          "JobModifyIndex": job.job_modify_index, "JobStopped": job.stop,
                          "TaskGroups": groups, "Index": server.visible_index, **_meta})


async def actions(ctx: Context, request: Request) -> Response:
    """/v1/job/:id/actions (nomad/job_endpoint.go `GetActions`): every task's actions, with
    the task and group they belong to."""
    job = job_in(ctx, request, request.path_params["job_id"])
    return json_response([
        {"Name": a.name, "Command": a.command, "Args": a.args or None, "TaskName": t.name,
         "TaskGroupName": g.name}
        for g in job.task_groups for t in g.tasks for a in t.actions])

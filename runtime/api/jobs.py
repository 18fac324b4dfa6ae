"""/v1/jobs, /v1/jobs/parse, /v1/job/<id>, its allocations and its submission: register, read,
parse, stop.

Job bodies are parsed by the jobspec in a worker thread behind the context's limiter
(request.py `parse_job_off_loop`), so a large job never stalls the event loop; a job the jobspec
refuses is a 400 naming the field. Lists are Nomad's stubs, sorted by ID.

A register's `Submission` (the job file it came from, command/job_run.go sends it) is kept with
the version it stores (server/local.py `register_job`); one over Nomad's size limit is dropped
with Nomad's warning. `GET /v1/job/<id>/submission?version=N` answers it, or 404 "job source
not found" (command/agent/job_endpoint.go `jobSubmissionQuery`).

A register's `EnforceIndex` with `JobModifyIndex` (`nomad job run -check-index`) is checked
against the job as it is under the server's lock, with Nomad's texts (nomad/structs/job.go
`Job.EnforceIndex`, prefixed "Enforcing job modify index"), answered 400 (Nomad's agent
answers every RPC error 500; routes here keep a user's mistake below 500). `PreserveCounts`
keeps the current count of every group the job already has (nomad/job_endpoint.go
`Register`), `PreserveResources` each existing task's resources. `EvalPriority` is checked
(1-100) and otherwise has no effect: one node runs one evaluation at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.allocations import alloc_stub
from yurt.runtime.api.context import Context
from yurt.runtime.api.job_lifecycle import job_summary
from yurt.runtime.api.namespaces import (
    check_register,
    in_namespace,
    job_in,
    namespace_for_body,
    request_namespace,
    require_register,
)
from yurt.runtime.api.paging import by_namespace_id, paged_response
from yurt.runtime.api.request import (
    MAX_HCL,
    ApiError,
    body_json,
    json_response,
    parse_job_off_loop,
    query_bool,
)
from yurt.runtime.jobspec import VarInputs
from yurt.runtime.jobspec.rules_volume import job_warnings
from yurt.runtime.server.dispatch import is_parameterized
from yurt.runtime.structs import Allocation, Job
from yurt.runtime.structs.submission import oversize_warning, submission_from_body


def job_stub(job: Job) -> dict[str, Any]:
    return {"ID": job.id, "ParentID": job.parent_id, "Name": job.name,
            "Namespace": job.namespace, "Datacenters": job.datacenters, "Type": job.type,
            "Priority": job.priority, "NodePool": job.node_pool,
            "Periodic": job.periodic is not None,
            "ParameterizedJob": is_parameterized(job), "Stop": job.stop,
            "Status": job.status, "StatusDescription": job.status_description,
            "CreateIndex": job.create_index, "ModifyIndex": job.modify_index,
            "JobModifyIndex": job.job_modify_index, "SubmitTime": job.submit_time,
            "Meta": job.meta or None}


async def jobs(ctx: Context, request: Request) -> Response:
    if request.method == "GET":
        prefix = request.query_params.get("prefix", "")
        # nomad/job_endpoint.go `List`: by namespace and ID, "<namespace>.<id>" tokens.
        listed = sorted((j for j in ctx.server.jobs.values()
                         if j.id.startswith(prefix)
                         and in_namespace(request, j.namespace, "list-jobs")),
                        key=lambda j: (j.namespace, j.id))

        def shown(jobs_page: list[Job]) -> list[dict[str, object]]:
            by_job: dict[str, list[Allocation]] = {j.id: [] for j in jobs_page}
            for alloc in ctx.server.allocs.values():  # one pass, not one per job
                if alloc.job_id in by_job:
                    by_job[alloc.job_id].append(alloc)
            return [{**job_stub(j), "JobSummary": job_summary(ctx, j, by_job[j.id])}
                    for j in jobs_page]
        return paged_response(request, listed, by_namespace_id(lambda j: j.namespace,
                                                               lambda j: j.id), shown=shown)
    return await register(ctx, request, None)


async def register(ctx: Context, request: Request, job_id: str | None) -> Response:
    body = await body_json(request)
    if not isinstance(body.get("Job"), dict):
        raise ApiError(400, 'request body must be {"Job": {...}}')
    namespace_for_body(request, body)
    try:
        submission = submission_from_body(body.get("Submission"))
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    job = await parse_job_off_loop(msgspec.json.encode({"Job": body["Job"]}).decode(),
                                   ctx.parse_limiter, filename="request", format="json")
    if job_id is not None and job.id != job_id:
        raise ApiError(400, "Job ID does not match name")
    # The job's namespace is the body's (command/agent/job_endpoint.go `jobUpdate` sets the
    # request's namespace from it): nomad/job_endpoint.go `Register` checks it there.
    require_register(request, job, body, "register-job")
    job = await check_register(ctx, job)
    result = await ctx.server.register_job(job, submission, _register_check(body, job))
    dropped = oversize_warning(submission) if submission is not None else None
    warnings = "; ".join([*job_warnings(body["Job"]), *([dropped] if dropped else []),
                          *(f"group {g!r} not placed: {why}" for g, why in
                            result.failed.items())])
    return json_response({"EvalID": result.eval_id, "EvalCreateIndex": result.index,
                          "JobModifyIndex": result.job_modify_index,
                          "Warnings": warnings, "Index": result.index, "LastContact": 0,
                          "KnownLeader": True})


#: api/jobs.go `RegisterEnforceIndexErrPrefix`: `nomad job run` recognises the refusal by it.
ENFORCE_INDEX_PREFIX: Final = "Enforcing job modify index"


def enforce_index(current: Job | None, index: int) -> None:
    """nomad/structs/job.go `Job.EnforceIndex`: a 400 unless the job's modify index is
    `index` (0: unless the job does not exist)."""
    if current is not None:
        if index == 0:
            raise ApiError(400, f"{ENFORCE_INDEX_PREFIX} 0: job already exists")
        if index != current.job_modify_index:
            raise ApiError(400, f"{ENFORCE_INDEX_PREFIX} {index}: job exists with "
                                f"conflicting job modify index: {current.job_modify_index}")
    elif index != 0:
        raise ApiError(400, f"{ENFORCE_INDEX_PREFIX} {index}: job does not exist")


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(400, f'"{name}" must be a boolean')
    return value


def _register_check(body: dict[str, Any], job: Job
                    ) -> Callable[[Job | None], Job | None] | None:
    """What a register asks to be checked under the server's lock: `EnforceIndex`
    (`JobModifyIndex`), `PreserveCounts` and `PreserveResources`; None when it asks none."""
    enforce, preserve = _flag(body, "EnforceIndex"), _flag(body, "PreserveCounts")
    keep_resources = _flag(body, "PreserveResources")
    index = body.get("JobModifyIndex") or 0
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ApiError(400, '"JobModifyIndex" must be a non-negative integer')
    priority = body.get("EvalPriority") or 0
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 100:
        raise ApiError(400, "eval priority must be between 1 and 100 inclusively")
    if not (enforce or preserve or keep_resources):
        return None

    def check(current: Job | None) -> Job | None:
        if enforce:
            enforce_index(current, index)
        if current is None or not (preserve or keep_resources):
            return None
        before = {g.name: g for g in current.task_groups}
        groups = []
        for g in job.task_groups:
            old = before.get(g.name)
            if old is not None and preserve:
                g = msgspec.structs.replace(g, count=old.count)
            if old is not None and keep_resources:
                kept = {t.name: t.resources for t in old.tasks}
                g = msgspec.structs.replace(g, tasks=[
                    msgspec.structs.replace(t, resources=kept[t.name]) if t.name in kept else t
                    for t in g.tasks])
            groups.append(g)
        return msgspec.structs.replace(job, task_groups=groups)

    return check


async def parse(ctx: Context, request: Request) -> Response:
    body = await body_json(request)
    text = body.get("JobHCL")
    if not isinstance(text, str):
        raise ApiError(400, 'request body must be {"JobHCL": "..."}')
    if len(text) > MAX_HCL:
        raise ApiError(413, f"JobHCL is larger than {MAX_HCL} characters")
    variables = body.get("Variables") or ""
    if not isinstance(variables, str):
        raise ApiError(400, '"Variables" must be a string of HCL variable values')
    if len(variables) > MAX_HCL:
        raise ApiError(413, f"Variables is larger than {MAX_HCL} characters")
    # command/agent/job_endpoint.go `JobsParseRequest`: the values are one var file, read
    # without the file functions and without refusing undeclared names (not Strict).
    inputs = VarInputs(var_files=(("input.hcl", variables),) if variables.strip() else (),
                       strict=False, allow_fs=False)
    return json_response(await parse_job_off_loop(text, ctx.parse_limiter, filename="JobHCL",
                                                  variables=inputs))


#: A job's sub-resources, each with a route of its own (app.py). A job ID may hold a `/`, so a
#: method one of them does not take reaches the job's route instead: answered 405 there.
_SUB_RESOURCES: Final = tuple(f"/{name}" for name in (
    "allocations", "deployments", "deployment", "periodic/force", "dispatch", "evaluations",
    "evaluate", "versions", "revert", "stable", "summary", "plan", "scale", "actions",
    "action", "submission"))


async def job_item(ctx: Context, request: Request) -> Response:
    job_id = request.path_params["job_id"]
    if job_id.endswith(_SUB_RESOURCES):  # as Nomad, by the suffix alone
        raise ApiError(405, "Method Not Allowed")
    if request.method == "GET":
        return json_response(job_in(ctx, request, job_id))
    if request.method == "DELETE":
        # command/agent/job_endpoint.go `jobDelete`: purge, global (one region here: nothing
        # to stop elsewhere, as Nomad for a single-region job), eval_priority (1-100),
        # no_shutdown_delay.
        purge, no_delay = query_bool(request, "purge"), query_bool(request, "no_shutdown_delay")
        query_bool(request, "global")
        priority = _eval_priority(request)
        job_in(ctx, request, job_id)
        result = await ctx.server.deregister_job(job_id, purge=purge, eval_priority=priority,
                                                 no_shutdown_delay=no_delay)
        return json_response({"EvalID": result.eval_id, "EvalCreateIndex": result.index,
                              "JobModifyIndex": result.job_modify_index,
                              "Index": ctx.server.visible_index})
    return await register(ctx, request, job_id)


def _eval_priority(request: Request) -> int:
    """`?eval_priority=N` (0 when absent), Nomad's `validateEvalPriorityOpt` range."""
    text = request.query_params.get("eval_priority", "")
    if not text:
        return 0
    try:
        priority = int(text)
    except ValueError:
        raise ApiError(400, f'failed to parse value of "eval_priority" as an integer: '
                            f"{text!r}") from None
    if priority > 100:  # Nomad validates only a positive one
        raise ApiError(400, "Eval priority must be between 1 and 100 inclusively")
    return max(priority, 0)


async def job_allocations(ctx: Context, request: Request) -> Response:
    """The job's allocations in the request's namespace: `[]` for a job nobody registered, as
    Nomad's nomad/job_endpoint.go `Allocations` answers (AllocsByJob, never "not found")."""
    job_id = request.path_params["job_id"]
    namespace = request_namespace(request)
    return json_response([alloc_stub(ctx.alloc_view(a.id))
                          for a in ctx.server.job_allocs(job_id) if a.namespace == namespace])


async def job_submission(ctx: Context, request: Request) -> Response:
    """The source `version` of the job was registered from (nomad/job_endpoint.go
    `GetJobSubmission`, looked up by namespace, job and version): 404 when none is kept."""
    job_id = request.path_params["job_id"]
    text = request.query_params.get("version", "")
    if not (text.isascii() and text.isdigit()):  # Go's strconv.ParseUint: digits only
        raise ApiError(400, "Unable to parse job submission version parameter")
    sub = await ctx.server.job_submission(job_id, int(text))
    if sub is None or sub.namespace != request_namespace(request):
        raise ApiError(404, "job source not found")
    return json_response(sub)

"""/v1/evaluations, /v1/evaluation/<id> (and its allocations), /v1/job/<id>/evaluations and
/v1/job/<id>/evaluate: the server's evaluations, as Nomad lists and answers them.

Evaluations are whole objects in lists too (Nomad has no evaluation stub), oldest first, those
of `?namespace=` (`*`: of every namespace the token may read jobs in). An evaluation ID may be a
unique prefix, as with allocations; an unknown one is a 404. One of a namespace the token may
not read jobs in is refused (403), as Nomad's `GetEval` refuses it.

DELETE /v1/evaluations is Nomad's operator delete (command/agent/eval_endpoint.go
`evalsDeleteRequest`, nomad/eval_endpoint.go `Delete`): a management token (authz_table.py),
`EvalIDs` or `Filter` but not both (400), at most `MAX_UUIDS_PER_WRITE` IDs (400), only while
the scheduler configuration's `PauseEvalBroker` is set, each ID known and safe to delete
(`delete_safe`, Nomad's `isEvalDeleteSafe`): else the RPC's error as Nomad's agent answers it,
500 with Nomad's text, and nothing is deleted. `Filter` (a go-bexpr expression) is refused
with 400: yurt has no bexpr evaluator; IDs are the way.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.allocations import alloc_stub
from yurt.runtime.api.authz import require_namespace
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import in_namespace, job_in, request_namespace
from yurt.runtime.api.paging import by_create_index, by_id, nomad_json, paged_response
from yurt.runtime.api.request import ApiError, body_field, body_json, json_response
from yurt.runtime.lib.bexpr import BexprError
from yurt.runtime.lib.bexpr_eval import BexprEvalError, compile_filter
from yurt.runtime.server.scheduler.reschedule import policy_for
from yurt.runtime.structs import TRIGGER_JOB_REGISTER, Allocation, Evaluation, Job

#: nomad/structs/uuid.go `MaxUUIDsPerWriteRequest`.
MAX_UUIDS_PER_WRITE = 7281
#: nomad/structs/errors.go `errIncompatibleFiltering`.
ERR_INCOMPATIBLE_FILTERING = "Filter expression cannot be used with other filter parameters"


def _sorted(evals: list[Evaluation]) -> list[Evaluation]:
    return sorted(evals, key=lambda e: (e.create_index, e.id))


def find_eval(ctx: Context, prefix: str) -> Evaluation:
    evals = ctx.server.evals
    if prefix in evals:
        return evals[prefix]
    matches = [e for i, e in evals.items() if i.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ApiError(404, "eval not found")
    raise ApiError(400, f"eval ID prefix {prefix!r} is ambiguous")


async def evaluations(ctx: Context, request: Request) -> Response:
    if request.method == "DELETE":
        return await delete_evaluations(ctx, request)
    prefix = request.query_params.get("prefix", "")
    job = request.query_params.get("job", "")
    status = request.query_params.get("status", "")
    if request.query_params.get("filter") and (job or status):
        raise ApiError(400, ERR_INCOMPATIBLE_FILTERING)
    # nomad/eval_endpoint.go `List`: the request's namespace (`*`: those the token may read),
    # by create index and ID ("<CreateIndex>.<ID>" tokens), by ID with a prefix.
    found = [e for e in _sorted(list(ctx.server.evals.values()))
             if e.id.startswith(prefix) and (not job or e.job_id == job)
             and (not status or e.status == status) and in_namespace(request, e.namespace)]
    if prefix:
        found.sort(key=lambda e: e.id)
    tokens = (by_id(lambda e: e.id) if prefix
              else by_create_index(lambda e: e.create_index, lambda e: e.id))
    return paged_response(request, found, tokens, reversible=True)


async def evaluation(ctx: Context, request: Request) -> Response:
    ev = find_eval(ctx, request.path_params["id"])
    # nomad/eval_endpoint.go `GetEval`: read-job in the request's namespace (authz_table.py),
    # then in the evaluation's, which may be another.
    require_namespace(request, ev.namespace, "read-job")
    return json_response(ev)


async def evaluation_allocations(ctx: Context, request: Request) -> Response:
    ev = find_eval(ctx, request.path_params["id"])
    allocs = sorted((a for a in ctx.server.allocs.values() if a.eval_id == ev.id),
                    key=lambda a: (a.create_index, a.name))
    if allocs:  # nomad/eval_endpoint.go `Allocations`: read-job in theirs too
        require_namespace(request, allocs[0].namespace, "read-job")
    return json_response([alloc_stub(ctx.alloc_view(a.id)) for a in allocs])


async def job_evaluations(ctx: Context, request: Request) -> Response:
    """The job's evaluations in the request's namespace: `[]` for an unknown job, as Nomad's
    nomad/job_endpoint.go `Evaluations` answers (EvalsByJob, never "not found")."""
    job_id = request.path_params["job_id"]
    namespace = request_namespace(request)
    return json_response([e for e in ctx.server.job_evals(job_id) if e.namespace == namespace])


async def job_evaluate(ctx: Context, request: Request) -> Response:
    """Nomad's forced evaluation: a new evaluation of the job as it is (`job-register`);
    `EvalOptions.ForceReschedule` marks its failed allocations to be replaced now
    (server/local.py `evaluate`)."""
    job_id = request.path_params["job_id"]
    body = await body_json(request)
    named = body_field(body, "JobID", str, job_id)
    if named != job_id:
        raise ApiError(400, "JobID parameter does not match")
    options = body_field(body, "EvalOptions", dict, {})
    force = options.get("ForceReschedule") or False
    if not isinstance(force, bool):
        raise ApiError(400, '"EvalOptions.ForceReschedule" must be a boolean')
    job_in(ctx, request, job_id)
    try:
        result = await ctx.server.evaluate(job_id, TRIGGER_JOB_REGISTER,
                                           force_reschedule=force)
    except ValueError as e:  # a periodic or parameterized parent
        raise ApiError(400, str(e)) from None
    return json_response({"EvalID": result.eval_id, "EvalCreateIndex": result.index,
                          "JobModifyIndex": result.job_modify_index, "Warnings": "",
                          "Index": result.index, "LastContact": 0, "KnownLeader": True})


def delete_safe(allocs: list[Allocation], job: Job | None) -> bool:
    """nomad/state/state_store.go `isEvalDeleteSafe`: an evaluation may go unless one of its
    allocations may still run, or failed and still awaits the replacement its policy owes."""
    if job is None or job.stop or job.status == "dead":
        return True
    for alloc in allocs:
        if alloc.client_status in ("running", "unknown"):
            return False
        if alloc.client_status != "failed":
            continue
        policy = policy_for(job, alloc.task_group)
        if policy is None or (not policy.unlimited and not policy.attempts):
            continue
        if not alloc.next_allocation or policy.unlimited:
            return False
        if alloc.reschedule_tracker is None or not alloc.reschedule_tracker.events:
            return False
    return True


def _ids_by_filter(ctx: Context, expression: str) -> list[str]:
    """nomad/eval_endpoint.go `deleteEvalsByFilter`: every evaluation, in create order, that
    is safe to delete and that the filter matches (one it cannot be evaluated against is
    passed over, as Nomad's is)."""
    try:
        matches = compile_filter(expression)
    except BexprError as e:
        raise ApiError(400, f"failed to read filter expression: {e}") from None
    server = ctx.server
    by_eval: dict[str, list[Allocation]] = {}
    for alloc in server.allocs.values():  # one pass, not one per evaluation
        by_eval.setdefault(alloc.eval_id, []).append(ctx.alloc_view(alloc.id))
    chosen: list[str] = []
    for ev in _sorted(list(server.evals.values())):
        if not delete_safe(by_eval.get(ev.id, []), server.jobs.get(ev.job_id)):
            continue
        try:
            if matches(nomad_json(ev)):
                chosen.append(ev.id)
        except BexprEvalError:
            continue
    return chosen


async def delete_evaluations(ctx: Context, request: Request) -> Response:
    body = await body_json(request)
    ids = body_field(body, "EvalIDs", list, [])
    expression = body_field(body, "Filter", str, "")
    if expression and ids:
        raise ApiError(400, "evals cannot be deleted by both ID and filter")
    if not expression and not ids:
        raise ApiError(400, "evals must be deleted by either ID or filter")
    if len(ids) > MAX_UUIDS_PER_WRITE:
        raise ApiError(400, f"request includes {len(ids)} evaluation IDs, must be "
                            f"{MAX_UUIDS_PER_WRITE} or fewer")
    if any(not isinstance(i, str) for i in ids):
        raise ApiError(400, '"EvalIDs" must be a list of strings')
    server = ctx.server
    if not server.scheduler_config.pause_eval_broker:
        raise ApiError(500, "eval broker is enabled; eval broker must be paused to delete "
                            "evals")
    if expression:
        ids = _ids_by_filter(ctx, expression)
        if not ids:
            return json_response({"Count": 0, "Index": 0})
    for eval_id in ids:
        ev = server.evals.get(eval_id)
        if ev is None:
            raise ApiError(500, "eval not found")
        # The client's live view: the server's copy trails it until the next alloc sync.
        allocs = [ctx.alloc_view(a.id) for a in server.allocs.values()
                  if a.eval_id == eval_id]
        if not delete_safe(allocs, server.jobs.get(ev.job_id)):
            raise ApiError(500, f"eval {eval_id} is not safe to delete")
    index = await server.delete_evals(list(dict.fromkeys(ids)))
    return json_response({"Count": len(ids), "Index": index})

"""/v1/allocations and /v1/allocation/<id>: the server's allocations, as the client sees them.
A list answers Nomad's `AllocListStub` (`alloc_stub`, shared by every list of allocations).

Every allocation answered is `Context.alloc_view`: the server's copy with the client's live
status and task states laid over it, so a read never lags the runner. An ID may be a unique
prefix, as with Nomad.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import in_namespace
from yurt.runtime.api.paging import NEXT_TOKEN_HEADER, by_create_index, by_id, nomad_json, page
from yurt.runtime.api.request import ApiError, json_response, query_bool
from yurt.runtime.structs import Allocation
from yurt.runtime.structs.allocresources import alloc_json, allocated_resources


def alloc_stub(alloc: Allocation) -> dict[str, Any]:
    job = alloc.job
    return {"ID": alloc.id, "EvalID": alloc.eval_id, "Name": alloc.name,
            "Namespace": alloc.namespace, "NodeID": alloc.node_id, "NodeName": alloc.node_name,
            "JobID": alloc.job_id, "JobType": job.type if job else "",
            "JobVersion": job.version if job else 0, "TaskGroup": alloc.task_group,
            "DesiredStatus": alloc.desired_status,
            "DesiredDescription": alloc.desired_description,
            "ClientStatus": alloc.client_status, "ClientDescription": alloc.client_description,
            "DesiredTransition": alloc.desired_transition,
            "TaskStates": alloc.task_states, "DeploymentStatus": alloc.deployment_status,
            "FollowupEvalID": alloc.followup_eval_id,
            "RescheduleTracker": alloc.reschedule_tracker,
            "PreviousAllocation": alloc.previous_allocation,
            "NextAllocation": alloc.next_allocation,
            "PreemptedAllocations": alloc.preempted_allocations,
            "PreemptedByAllocation": alloc.preempted_by_allocation,
            "CreateIndex": alloc.create_index, "ModifyIndex": alloc.modify_index,
            "AllocModifyIndex": alloc.alloc_modify_index, "CreateTime": alloc.create_time,
            "ModifyTime": alloc.modify_time}


async def allocations(ctx: Context, request: Request) -> Response:
    # nomad/alloc_endpoint.go `List`: by create index and ID ("<CreateIndex>.<ID>" tokens),
    # by ID with a prefix; `?reverse=true` flips the order.
    prefix = request.query_params.get("prefix", "")
    allocs = sorted((a for a in ctx.server.allocs.values()
                     if a.id.startswith(prefix) and in_namespace(request, a.namespace)),
                    key=(lambda a: a.id) if prefix else (lambda a: (a.create_index, a.id)))
    tokens = (by_id(lambda a: a.id) if prefix
              else by_create_index(lambda a: a.create_index, lambda a: a.id))
    result = page(request, allocs, tokens, reversible=True,
                  subject=lambda a: nomad_json(alloc_json(ctx.alloc_view(a.id))))
    views = [ctx.alloc_view(a.id) for a in result.items]
    stubs = [alloc_stub(v) for v in views]
    # Nomad's ?task_states=false leaves them out; absent, they are in.
    if "task_states" in request.query_params and not query_bool(request, "task_states"):
        for stub in stubs:
            stub["TaskStates"] = None
    if query_bool(request, "resources"):  # Nomad's ?resources=true
        for stub, view in zip(stubs, views, strict=True):
            stub["AllocatedResources"] = allocated_resources(view)
    response = json_response(stubs)
    if result.next_token:
        response.headers[NEXT_TOKEN_HEADER] = result.next_token
    return response


async def allocation(ctx: Context, request: Request) -> Response:
    return json_response(alloc_json(ctx.alloc_view(ctx.find_alloc_id(request.path_params["id"]))))


async def allocation_stop(ctx: Context, request: Request) -> Response:
    alloc_id = ctx.find_alloc_id(request.path_params["id"])
    if alloc_id not in ctx.server.allocs:
        raise ApiError(404, "alloc not found")
    try:
        # Nomad's ?no_shutdown_delay (command/agent/alloc_endpoint.go `allocStop`).
        stopped, ev = await ctx.server.stop_alloc_eval(
            alloc_id, no_shutdown_delay=query_bool(request, "no_shutdown_delay"))
    except KeyError:  # collected while this waited for the server's lock
        raise ApiError(404, "alloc not found") from None
    return json_response({"EvalID": ev.id, "Index": stopped.modify_index})

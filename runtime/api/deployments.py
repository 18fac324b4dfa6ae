"""`/v1/deployments`, `/v1/deployment/<id>` and its actions, `/v1/job/<id>/deployment[s]`:
the server's deployments (server/deployments.py), as Nomad lists, answers and changes them.

Reads: lists ordered by CreateIndex (`prefix`, `reverse`, `namespace`); a deployment by its ID
or a unique prefix; a job's deployments (only those of its current instance unless `all`, as
Nomad's `DeploymentsByJobID`), its latest (`null` without one). Neither job endpoint looks the
job up, as Nomad's do not.

Actions (`fail`, `pause`, `promote`, `unblock`, `allocation-health`) answer Nomad's
`DeploymentUpdateResponse` `{EvalID, EvalCreateIndex, DeploymentModifyIndex,
RevertedJobVersion, Index}`. A body whose `DeploymentID` is missing or is not the path's is
Nomad's 400. The server's refusals carry Nomad's texts ("deployment not found", "can't fail
terminal deployment", …, "unknown alloc", "alloc … is not part of deployment …"), but not
Nomad's status: Nomad's agent answers every RPC error 500, which would make a user's mistake
look like a server fault (and every route here keeps errors below 500). An unknown deployment
is a 404 (as GET answers it), a refusal a 400. No client depends on the 500: python-nomad
catches these as `BaseNomadException` (400 and 404 are subclasses) and reads the text; Go's
api package reads only the text. Every action runs under the server's lock, as one change
(deploymentwatcher.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.allocations import alloc_stub
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import in_namespace, request_namespace
from yurt.runtime.api.request import (
    ApiError,
    body_field,
    body_json,
    json_response,
    query_bool,
)
from yurt.runtime.server import deploymentwatcher as watcher
from yurt.runtime.server.deploymentbook import latest_deployment
from yurt.runtime.server.scheduler.deployments import with_status
from yurt.runtime.server.scheduler.reschedule import as_time
from yurt.runtime.structs import Allocation, AllocDeploymentStatus
from yurt.runtime.structs.update import (
    DEPLOYMENT_DESC_FAILED_ALLOCATIONS,
    DEPLOYMENT_DESC_FAILED_BY_USER,
    DEPLOYMENT_DESC_PAUSED,
    DEPLOYMENT_DESC_RUNNING,
    DEPLOYMENT_STATUS_PAUSED,
    DEPLOYMENT_STATUS_RUNNING,
    Deployment,
)

if TYPE_CHECKING:  # the server loads behind the API (the API binds first)
    from yurt.runtime.server.local import LocalServer


def _sorted(ds: list[Deployment]) -> list[Deployment]:
    return sorted(ds, key=lambda d: (d.create_index, d.id))


def find_deployment(server: LocalServer, prefix: str) -> Deployment | None:
    if prefix in server.deployments:
        return server.deployments[prefix]
    matches = [d for i, d in server.deployments.items() if i.startswith(prefix)]
    return matches[0] if len(matches) == 1 else None


# ---------------------------------------------------------------------- reads


async def deployments(ctx: Context, request: Request) -> Response:
    prefix = request.query_params.get("prefix", "")
    found = [d for d in _sorted(list(ctx.server.deployments.values()))
             if d.id.startswith(prefix) and in_namespace(request, d.namespace)]
    if query_bool(request, "reverse"):
        found.reverse()
    return json_response(found)


async def deployment(ctx: Context, request: Request) -> Response:
    d = find_deployment(ctx.server, request.path_params["id"])
    if d is None or not in_namespace(request, d.namespace):
        raise ApiError(404, "deployment not found")
    return json_response(d)


async def deployment_allocations(ctx: Context, request: Request) -> Response:
    server = ctx.server
    d = find_deployment(server, request.path_params["id"])
    if d is None:
        return json_response([])
    return json_response([alloc_stub(ctx.alloc_view(a.id))
                          for a in watcher.deployment_allocs(server, d)])


def _of_job(ctx: Context, request: Request) -> list[Deployment]:
    server = ctx.server
    job_id = request.path_params["job_id"]
    namespace = request_namespace(request)
    job = server.jobs.get(job_id)
    every = query_bool(request, "all")
    return [d for d in _sorted(list(server.deployments.values()))
            if d.job_id == job_id and d.namespace == namespace
            and (every or job is None or d.job_create_index == job.create_index)]


async def job_deployments(ctx: Context, request: Request) -> Response:
    # Newest first, as Nomad's `nomad job deployments` shows them.
    return json_response(list(reversed(_of_job(ctx, request))))


async def job_deployment(ctx: Context, request: Request) -> Response:
    return json_response(latest_deployment(_of_job(ctx, request),
                                           request.path_params["job_id"]))


# ---------------------------------------------------------------------- actions


class RpcError(ApiError):
    """A refusal of the server's deployment RPCs, with Nomad's text (see the header)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(status, message)


async def _request(request: Request, with_body: bool = True) -> tuple[str, dict[str, Any]]:
    deployment_id = request.path_params["id"]
    if not with_body:
        return deployment_id, {}
    body = await body_json(request)
    given = body_field(body, "DeploymentID", str, "")
    if not given:
        raise ApiError(400, "DeploymentID must be specified")
    if given != deployment_id:
        raise ApiError(400, "Deployment ID does not match")
    return deployment_id, body


def _active(server: LocalServer, deployment_id: str, terminal: str) -> Deployment:
    d = server.deployments.get(deployment_id)
    if d is None:
        raise RpcError("deployment not found", 404)
    if not d.active():
        raise RpcError(terminal)
    return d


def _answer(outcome: watcher.Outcome) -> Response:
    return json_response({
        "EvalID": outcome.eval.id if outcome.eval else "",
        "EvalCreateIndex": outcome.index if outcome.eval else 0,
        "DeploymentModifyIndex": outcome.index,
        "RevertedJobVersion": outcome.reverted_version, "Index": outcome.index})


async def fail(ctx: Context, request: Request) -> Response:
    deployment_id, _ = await _request(request, with_body=False)
    server = ctx.server
    async with server._lock:
        d = _active(server, deployment_id, "can't fail terminal deployment")
        rollback = any(s.auto_revert for s in d.task_groups.values())
        return _answer(await watcher.fail(server, d, DEPLOYMENT_DESC_FAILED_BY_USER, rollback))


async def pause(ctx: Context, request: Request) -> Response:
    deployment_id, body = await _request(request)
    want = body_field(body, "Pause", bool, False)
    server = ctx.server
    async with server._lock:
        d = _active(server, deployment_id, "can't pause terminal deployment" if want
                    else "can't resume terminal deployment")
        now = server._clock()
        if want:
            index = server.take_index()
            paused = with_status(d, DEPLOYMENT_STATUS_PAUSED, DEPLOYMENT_DESC_PAUSED, index, now)
            await server._commit([], [], deployments=[paused])
            return _answer(watcher.Outcome(None, index))
        resumed = with_status(d, DEPLOYMENT_STATUS_RUNNING, DEPLOYMENT_DESC_RUNNING,
                              server.index + 1, now)
        return _answer(await watcher.evaluate(server, d, resumed))


async def promote(ctx: Context, request: Request) -> Response:
    deployment_id, body = await _request(request)
    every = body_field(body, "All", bool, False)
    groups = body_field(body, "Groups", list, []) or []
    server = ctx.server
    async with server._lock:
        d = _active(server, deployment_id, "can't promote terminal deployment")
        try:
            outcome = await watcher.apply_promotion(
                server, d, None if every else [str(g) for g in groups])
        except watcher.PromotionError as e:
            raise RpcError(str(e)) from None
        return _answer(outcome)


async def unblock(ctx: Context, request: Request) -> Response:
    deployment_id, _ = await _request(request)
    server = ctx.server
    async with server._lock:
        # Only a multiregion deployment is ever blocked: on one node, none is.
        _active(server, deployment_id, "can't unblock terminal deployment")
        raise RpcError("can't unblock running deployment")


async def allocation_health(ctx: Context, request: Request) -> Response:
    deployment_id, body = await _request(request)
    healthy_ids = [str(i) for i in body_field(body, "HealthyAllocationIDs", list, []) or []]
    unhealthy_ids = [str(i) for i in body_field(body, "UnhealthyAllocationIDs", list, [])
                     or []]
    server = ctx.server
    async with server._lock:
        d = _active(server, deployment_id,
                    "can't set health of allocations for a terminal deployment")
        if not healthy_ids and not unhealthy_ids:
            raise RpcError("must specify at least one healthy/unhealthy allocation ID")
        now = server._clock()
        stamp = as_time(now)
        changed: list[Allocation] = []
        for ids, healthy in ((healthy_ids, True), (unhealthy_ids, False)):
            for alloc_id in ids:
                alloc = server.allocs.get(alloc_id)
                if alloc is None:
                    raise RpcError(f'unknown alloc "{alloc_id}"')
                if alloc.deployment_id != d.id:
                    raise RpcError(f'alloc "{alloc_id}" is not part of deployment "{d.id}"')
                status = alloc.deployment_status or AllocDeploymentStatus()
                changed.append(msgspec.structs.replace(
                    alloc, modify_time=now, deployment_status=msgspec.structs.replace(
                        status, healthy=healthy, timestamp=stamp,
                        modify_index=server.index + 1)))
        if unhealthy_ids:
            groups = {a.task_group for a in changed if a.id in unhealthy_ids}
            rollback = any(d.task_groups[g].auto_revert for g in groups if g in d.task_groups)
            return _answer(await watcher.fail(server, d, DEPLOYMENT_DESC_FAILED_ALLOCATIONS,
                                              rollback, "DeploymentAllocHealth", changed))
        outcome = await watcher.evaluate(server, d, None, "DeploymentAllocHealth",
                                         allocs=changed)
        await watcher.auto_promote(server, d.id)
        return _answer(outcome)

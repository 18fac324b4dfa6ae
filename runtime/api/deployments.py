"""`/v1/deployments`, `/v1/deployment/<id>` and its actions, `/v1/job/<id>/deployment[s]`:
the server's deployments (server/scheduler/deployments.py), as Nomad lists, answers and changes
them.

Reads: lists ordered by CreateIndex (`prefix`, `reverse`, `namespace`); a deployment by its ID
or a unique prefix; a job's deployments (only those of its current instance unless `all`, as
Nomad's `DeploymentsByJobID`), its latest (`null` without one). Neither job endpoint looks the
job up, as Nomad's do not.

Reads take read-job (one in a namespace the token may not read is hidden, its allocations
refused); actions take their capability (`fail-deployment`, ...) or submit-job in the
deployment's namespace, whatever the request's (authz_table.py, as Nomad's RPCs check).

Actions (`fail`, `pause`, `promote`, `unblock`, `allocation-health`) answer Nomad's
`DeploymentUpdateResponse` `{EvalID, EvalCreateIndex, DeploymentModifyIndex,
RevertedJobVersion, Index}`. A body whose `DeploymentID` is missing or is not the path's is
Nomad's 400. The server's refusals carry Nomad's texts ("deployment not found", "can't fail
terminal deployment", …, "unknown alloc", "alloc … is not part of deployment …"), but not
Nomad's status: Nomad's agent answers every RPC error 500, which would make a user's mistake
look like a server fault (and every route here keeps errors below 500). An unknown deployment
is a 404 (as GET answers it), a refusal a 400. No client depends on the 500: python-nomad
catches these as `BaseNomadException` (400 and 404 are subclasses) and reads the text; Go's
api package reads only the text. Every action is an operation of the server
(runtime/server/local.py `LocalServer.promote_deployment` and its siblings;
runtime/server/deploymentwatcher.py runs them): one change under the server's lock, run again
after a write conflict in a cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.allocations import alloc_stub
from yurt.runtime.api.authz import require_namespace
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import in_namespace, request_namespace
from yurt.runtime.api.paging import by_create_index, by_id, paged_response
from yurt.runtime.api.request import (
    ApiError,
    body_field,
    body_json,
    json_response,
    query_bool,
)
from yurt.runtime.server import deploymentwatcher as watcher
from yurt.runtime.server.deploymentbook import latest_deployment
from yurt.runtime.structs.update import Deployment

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
    # nomad/deployment_endpoint.go `List`: by create index and ID ("<CreateIndex>.<ID>"
    # tokens), by ID with a prefix; `?reverse=true` flips the order.
    found = [d for d in _sorted(list(ctx.server.deployments.values()))
             if d.id.startswith(prefix) and in_namespace(request, d.namespace)]
    if prefix:
        found.sort(key=lambda d: d.id)
    tokens = (by_id(lambda d: d.id) if prefix
              else by_create_index(lambda d: d.create_index, lambda d: d.id))
    query_bool(request, "reverse")  # a malformed value is still a 400
    return paged_response(request, found, tokens, reversible=True)


async def deployment(ctx: Context, request: Request) -> Response:
    d = find_deployment(ctx.server, request.path_params["id"])
    # nomad/deployment_endpoint.go `GetDeployment`: one the token may not read is hidden.
    if d is None or not in_namespace(request, d.namespace):
        raise ApiError(404, "deployment not found")
    return json_response(d)


async def deployment_allocations(ctx: Context, request: Request) -> Response:
    server = ctx.server
    d = find_deployment(server, request.path_params["id"])
    if d is None:
        return json_response([])
    allocs = watcher.deployment_allocs(server, d)
    if allocs:  # nomad/deployment_endpoint.go `Allocations`: read-job in theirs too
        require_namespace(request, allocs[0].namespace, "read-job")
    return json_response([alloc_stub(ctx.alloc_view(a.id)) for a in allocs])


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


def _answer(outcome: watcher.Outcome) -> Response:
    return json_response({
        "EvalID": outcome.eval.id if outcome.eval else "",
        "EvalCreateIndex": outcome.index if outcome.eval else 0,
        "DeploymentModifyIndex": outcome.index,
        "RevertedJobVersion": outcome.reverted_version, "Index": outcome.index})


async def _act(action: Awaitable[watcher.Outcome]) -> Response:
    """The server's answer to an action, or its refusal as Nomad's text (see the header)."""
    try:
        return _answer(await action)
    except watcher.DeploymentNotFound as e:
        raise RpcError(str(e), 404) from None
    except watcher.DeploymentRefused as e:
        raise RpcError(str(e)) from None


async def fail(ctx: Context, request: Request) -> Response:
    deployment_id, _ = await _request(request, with_body=False)
    return await _act(ctx.server.fail_deployment(deployment_id))


async def pause(ctx: Context, request: Request) -> Response:
    deployment_id, body = await _request(request)
    want = body_field(body, "Pause", bool, False)
    return await _act(ctx.server.pause_deployment(deployment_id, want))


async def promote(ctx: Context, request: Request) -> Response:
    deployment_id, body = await _request(request)
    every = body_field(body, "All", bool, False)
    groups = body_field(body, "Groups", list, []) or []
    return await _act(ctx.server.promote_deployment(
        deployment_id, None if every else [str(g) for g in groups]))


async def unblock(ctx: Context, request: Request) -> Response:
    deployment_id, _ = await _request(request)
    return await _act(ctx.server.unblock_deployment(deployment_id))


async def allocation_health(ctx: Context, request: Request) -> Response:
    deployment_id, body = await _request(request)
    healthy_ids = [str(i) for i in body_field(body, "HealthyAllocationIDs", list, []) or []]
    unhealthy_ids = [str(i) for i in body_field(body, "UnhealthyAllocationIDs", list, [])
                     or []]
    return await _act(ctx.server.set_alloc_health(deployment_id, healthy_ids, unhealthy_ids))

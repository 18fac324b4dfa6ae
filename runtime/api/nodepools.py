"""/v1/node/pools and /v1/node/pool/<name>[/jobs|/nodes]: Nomad's node pools
(command/agent/node_pool_endpoint.go, nomad/node_pool_endpoint.go).

Pools live in the server's object store beside namespaces (server/nodepools.py has the object
and its rules; server/state/objects_sqlite.py, or a cluster's in etcd). A pool a node
registered in exists as long as the node does, as Nomad's registration creates it; `all` and
`default` always exist. The nodes are the server's (`known_nodes`): in a cluster, every
client's.

ACLs are Nomad's (api/authz_table.py declares the path's need; the handlers filter lists and
check the body's pool): a list shows the pools the token may read; a pool's jobs are those of
the namespaces the token may list jobs in; its nodes need node:read besides.

Events: an upsert publishes `NodePool`/`NodePoolUpserted` with the stored pool, a delete
`NodePoolDeleted` with the pool as it was, both keyed by the pool's name and carrying
`{"NodePool": pool}` (nomad/state/events.go, `eventFromChange`); only a management token may
subscribe to the topic (api/events.py). In a cluster the event reaches the subscribers of the
server that made the change.

Refusals: Nomad answers its RPC errors (invalid pool, modifying a built-in one, a pool in use)
with a 500 and the error text; yurt keeps the text and answers 400, as api/namespaces.py does,
since a 5xx here means a bug. A pool not found is Nomad's 404 `node pool not found`.
"""

from __future__ import annotations

from functools import partial

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.authz import allowed, require
from yurt.runtime.api.context import Context
from yurt.runtime.api.jobs import job_stub
from yurt.runtime.api.namespaces import in_namespace
from yurt.runtime.api.nodes import node_stub
from yurt.runtime.api.paging import by_id, by_namespace_id, paged_response
from yurt.runtime.api.poolset import all_pools, find_pool, known_nodes
from yurt.runtime.api.request import ApiError, body_json, json_response
from yurt.runtime.server.acl.acl import Acl
from yurt.runtime.server.nodepools import (
    NodePool,
    delete_refusal,
    upsert_refusal,
)
from yurt.runtime.server.scheduler.binpack import is_in_pool

NOT_FOUND = "node pool not found"


def _can(op: str, pool: str) -> partial[bool]:
    return partial(Acl.allow_node_pool_operation, pool=pool, op=op)


# ---------------------------------------------------------------------- handlers

async def pools(ctx: Context, request: Request) -> Response:
    if request.method != "GET":
        return await _upsert(ctx, request, None)
    prefix = request.query_params.get("prefix", "")
    # nomad/node_pool_endpoint.go `List`: by name, name tokens, after the ACL check.
    found = sorted((p for p in await all_pools(ctx) if p.name.startswith(prefix)
                    and allowed(request, _can("read", p.name))), key=lambda p: p.name)
    return paged_response(request, found, by_id(lambda p: p.name))


async def pool_item(ctx: Context, request: Request) -> Response:
    name = request.path_params["name"]
    if request.method == "GET":
        found = await find_pool(ctx, name)
        if found is None:
            raise ApiError(404, NOT_FOUND)
        return json_response(found)
    if request.method == "DELETE":
        return await _delete(ctx, name)
    return await _upsert(ctx, request, name)


async def pool_jobs(ctx: Context, request: Request) -> Response:
    """nomad/node_pool_endpoint.go `ListJobs`: the jobs whose pool is `name`, of the
    namespaces the token may list jobs in (`?namespace=`, `*` for all)."""
    name = request.path_params["name"]
    if request.query_params.get("prefix"):
        raise ApiError(400, "prefix argument not allowed")
    if await find_pool(ctx, name) is None:
        return json_response([])
    jobs = sorted((j for j in ctx.server.jobs.values() if (j.node_pool or "default") == name
                   and in_namespace(request, j.namespace, "list-jobs")),
                  key=lambda j: (j.namespace, j.id))
    return paged_response(request, jobs, by_namespace_id(lambda j: j.namespace, lambda j: j.id),
                          shown=lambda page_jobs: [job_stub(j) for j in page_jobs])


async def pool_nodes(ctx: Context, request: Request) -> Response:
    """nomad/node_pool_endpoint.go `ListNodes`: the nodes in `name` (`all`: every node)."""
    name = request.path_params["name"]
    if request.query_params.get("prefix"):
        raise ApiError(400, "prefix argument not allowed")
    if await find_pool(ctx, name) is None:
        return json_response([])
    found = sorted((n for n in known_nodes(ctx) if is_in_pool(n, name)), key=lambda n: n.id)
    return paged_response(request, found, by_id(lambda n: n.id),
                          shown=lambda nodes: [node_stub(n) for n in nodes])


async def _upsert(ctx: Context, request: Request, name: str | None) -> Response:
    body = await body_json(request)
    try:
        pool = msgspec.convert(body, NodePool)
    except msgspec.ValidationError as e:
        raise ApiError(400, str(e)) from None
    if name is not None and pool.name != name:
        raise ApiError(400, "Node pool name does not match request path")
    require(request, _can("write", pool.name))
    why = upsert_refusal(pool)
    if why is not None:
        raise ApiError(400, why)
    stored = await (await ctx.agent.object_store()).put_node_pool(pool)
    _publish(ctx, "NodePoolUpserted", stored, index=stored.modify_index)
    return Response(status_code=200)


def _publish(ctx: Context, type_: str, pool: NodePool, *, index: int | None = None) -> None:
    ctx.agent.broker.publish("NodePool", type_, pool.name, {"NodePool": pool}, index=index,
                             namespace="")


async def _delete(ctx: Context, name: str) -> Response:
    live_jobs = any((j.node_pool or "default") == name and j.status != "dead"
                    for j in ctx.server.jobs.values())
    nodes = any(n.node_pool == name for n in known_nodes(ctx))
    store = await ctx.agent.object_store()
    before = await store.node_pool(name)
    why = await store.delete_node_pool(name, lambda exists: delete_refusal(
        name, live_jobs=live_jobs, nodes=nodes, exists=exists))
    if why is not None:
        raise ApiError(404 if why.endswith(" not found") else 400, why)
    _publish(ctx, "NodePoolDeleted", before or NodePool(name=name))
    return Response(status_code=200)

"""/v1/namespaces, /v1/namespace[/<name>]; and what scopes jobs by `?namespace=`.

Namespaces and variables live in the server's object store (runtime/server/state/
objects_sqlite.py, or a cluster's in etcd), which the process opens on the first request that
needs it (view.py `AgentView.object_store`): its module, and the cryptography it carries, load
behind the API, not before it binds (tests/test_import_weight.py).

Jobs are scoped the way Nomad scopes them: `?namespace=` (default `default`, `*` for every
namespace on lists) filters lists, and a job looked up by ID in another namespace than its own
is not found. A job may only be registered into a namespace that exists, and lands in the
node pool it names or else its namespace's default one, which must exist and which the
namespace must allow (`admit_node_pool`; a plan sees the job the same way). The server keys jobs
by ID alone, so one ID cannot live in two namespaces at once: registering it into a second one
is refused (Nomad would keep both).

Nomad answers its namespace errors (refused deletes, invalid names) with a 500 and the error
text; yurt keeps the text and answers 400 (404 for a namespace that does not exist), since a
5xx here means a bug.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.authz import allowed, namespace_visible, require_namespace
from yurt.runtime.api.context import Context
from yurt.runtime.api.poolset import find_pool
from yurt.runtime.api.request import ApiError, body_json, json_response
from yurt.runtime.server.acl.acl import Acl
from yurt.runtime.server.namespaces import (
    ALL_NAMESPACES,
    DEFAULT_NAMESPACE,
    Namespace,
    delete_refusal,
    go_quote,
    job_node_pool,
    node_pool_refusal,
    validate,
)
from yurt.runtime.structs import Job


def request_namespace(request: Request) -> str:
    """`?namespace=`, Nomad's `default` when absent or empty."""
    return request.query_params.get("namespace") or DEFAULT_NAMESPACE


def in_namespace(request: Request, namespace: str, *ops: str) -> bool:
    """Whether an object of `namespace` shows in a list for this request (`*`: all): of the
    namespace asked for, and one where the token holds one of `ops` (read-job by default:
    with `*`, Nomad's lists keep the namespaces the token may read, e.g.
    nomad/alloc_endpoint.go `List`; nomad/job_endpoint.go `List` asks list-jobs)."""
    wanted = request_namespace(request)
    return wanted in (ALL_NAMESPACES, namespace) and namespace_visible(
        request, namespace, *(ops or ("read-job",)))


def job_in(ctx: Context, request: Request, job_id: str) -> Job:
    """The job `job_id` in the request's namespace; 404 when it lives in another."""
    job = ctx.job(job_id)
    if job.namespace != request_namespace(request):
        raise ApiError(404, "job not found")
    return job


async def check_register(ctx: Context, job: Job) -> Job:
    """`job` with its node pool filled in (`admit_node_pool`); refuse a job for a namespace
    that does not exist, or an ID another namespace holds."""
    job = await admit_node_pool(ctx, job)
    existing = ctx.server.jobs.get(job.id)
    if existing is not None and existing.namespace != job.namespace:
        raise ApiError(400, f"job {go_quote(job.id)} already exists in namespace "
                            f"{go_quote(existing.namespace)}")
    return job


async def admit_node_pool(ctx: Context, job: Job) -> Job:
    """Nomad's node pool admission hooks (nomad/job_endpoint_hook_node_pool*.go): `job` in
    its namespace's default pool when it names none (`jobNodePoolMutatingHook`), refused
    (400) when its namespace does not exist, its pool does not
    (`jobNodePoolValidatingHook`), or its namespace does not allow the pool
    (server/namespaces.py `node_pool_refusal`)."""
    ns = await (await ctx.agent.object_store()).namespace(job.namespace)
    if ns is None:
        raise ApiError(400, f"job {go_quote(job.id)} is in nonexistent namespace "
                            f"{go_quote(job.namespace)}")
    pool = job_node_pool(ns, job.node_pool)
    if pool != job.node_pool:
        job = msgspec.structs.replace(job, node_pool=pool)
    if await find_pool(ctx, pool) is None:
        raise ApiError(400, f"job {go_quote(job.id)} is in nonexistent node pool "
                            f"{go_quote(pool)}")
    why = node_pool_refusal(ns, job.id, pool)
    if why is not None:
        raise ApiError(400, why)
    return job


def require_register(request: Request, job: Job, body: dict[str, Any], *ops: str) -> None:
    """403 unless the token may submit `job` in its namespace (nomad/job_endpoint.go
    `doRegister`): submit-job or one of `ops` (register-job for a register, plan-job for a
    plan), and sentinel-override when the body asks `PolicyOverride` for a job with groups.
    Nomad's volume and CSI plugin checks have nothing to look at: yurt's jobs carry neither."""
    require_namespace(request, job.namespace, "submit-job", *ops)
    if body.get("PolicyOverride") is True and job.task_groups:
        require_namespace(request, job.namespace, "sentinel-override")


def namespace_for_body(request: Request, body: dict[str, Any]) -> None:
    """A registered job without `Namespace` takes `?namespace=`, as Nomad's agent does."""
    job = body.get("Job")
    if isinstance(job, dict) and not job.get("Namespace") and "namespace" in \
            request.query_params:
        job["Namespace"] = request_namespace(request)


# ---------------------------------------------------------------------- handlers

async def namespaces(ctx: Context, request: Request) -> Response:
    prefix = request.query_params.get("prefix", "")
    store = await ctx.agent.object_store()
    # nomad/namespace_endpoint.go `ListNamespaces`: the namespaces the token has any rule for.
    return json_response([ns for ns in await store.namespaces() if ns.name.startswith(prefix)
                          and allowed(request, partial(Acl.allow_namespace, ns=ns.name))])


async def namespace_create(ctx: Context, request: Request) -> Response:
    return await _upsert(ctx, request, None)


async def namespace_item(ctx: Context, request: Request) -> Response:
    name = request.path_params["name"]
    if not name:
        raise ApiError(400, "Missing Namespace Name")
    if request.method == "GET":
        found = await (await ctx.agent.object_store()).namespace(name)
        if found is None:
            raise ApiError(404, "Namespace not found")
        return json_response(found)
    if request.method == "DELETE":
        return await _delete(ctx, name)
    return await _upsert(ctx, request, name)


async def _upsert(ctx: Context, request: Request, name: str | None) -> Response:
    body = await body_json(request)
    try:
        ns = msgspec.convert(body, Namespace)
    except msgspec.ValidationError as e:
        raise ApiError(400, str(e)) from None
    if name is not None and ns.name != name:
        raise ApiError(400, "Namespace name does not match request path")
    why = validate(ns)
    if why is not None:
        raise ApiError(400, why)
    await (await ctx.agent.object_store()).put_namespace(ns)
    return Response(status_code=200)


async def _delete(ctx: Context, name: str) -> Response:
    if name == DEFAULT_NAMESPACE:
        raise ApiError(400, "can not delete default namespace")
    store = await ctx.agent.object_store()
    if await store.namespace(name) is None:
        raise ApiError(404, "namespace not found")
    server = ctx.server
    live_jobs = any(j.namespace == name and j.status != "dead" for j in server.jobs.values())
    live_allocs = any(a.namespace == name and not a.is_terminal()
                      for a in server.allocs.values())
    why = await store.delete_namespace(name, lambda has_vars: delete_refusal(
        name, live_jobs=live_jobs, live_allocs=live_allocs, variables=has_vars))
    if why is not None:
        raise ApiError(400, why)
    return Response(status_code=200)

"""/v1/nodes and /v1/node/<id>[/allocations|/eligibility|/drain|/purge]: this agent's one node.

Shapes are Nomad's (api/nodes.go): the list answers `NodeListStub`s (with `?resources=true`
their `NodeResources` and `ReservedResources`, with `?os=true` an `Attributes` holding
`os.name`), a node answers the whole `Node`; eligibility, drain and purge answer Nomad's
update responses. An ID may be a unique prefix, as `nomad node status` allows; an unknown node
is a 404 `node not found`, a malformed body a 400. A node's allocations are Nomad's: full
allocations (`alloc_json`, with `AllocatedResources`), and an empty list for a node this server
does not know (Nomad's Node.GetAllocs has no "not found").

Changes go through `NodeControl` (runtime/server/nodestate.py), which persists them and runs
the drain.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime import __version__
from yurt.runtime.api.authz import namespace_visible
from yurt.runtime.api.context import Context
from yurt.runtime.api.paging import by_id, paged_response
from yurt.runtime.api.request import ApiError, body_field, body_json, json_response, query_bool
from yurt.runtime.server.dispatch import is_template
from yurt.runtime.structs import TRIGGER_NODE_UPDATE, Node
from yurt.runtime.structs.allocresources import alloc_json


def node_stub(node: Node, *, resources: bool = False, os: bool = False) -> dict[str, Any]:
    """Nomad's `Node.Stub`: what `nomad node status` lists."""
    stub: dict[str, Any] = {
        "Address": node.http_addr.rsplit(":", 1)[0] if node.http_addr else "",
        "ID": node.id}
    if os:
        stub["Attributes"] = {"os.name": node.attributes.get("os.name", "")}
    stub.update({
        "Datacenter": node.datacenter, "Name": node.name, "NodeClass": node.node_class,
        "NodePool": node.node_pool,
        "Version": node.attributes.get("nomad.version", __version__),
        "Drain": node.drain_strategy is not None,
        "SchedulingEligibility": node.scheduling_eligibility, "Status": node.status,
        "StatusDescription": node.status_description, "Drivers": node.drivers,
        "HostVolumes": {}})
    if resources:
        stub["NodeResources"] = node.node_resources
        stub["ReservedResources"] = node.reserved_resources
    stub.update({"LastDrain": node.last_drain, "CreateIndex": node.create_index,
                 "ModifyIndex": node.modify_index})
    return stub


def find_node(ctx: Context, node_id: str) -> Node:
    """This agent's node, if `node_id` is its ID or a prefix of it; else 404."""
    node = ctx.agent.node
    if not node_id or not node.id.startswith(node_id):
        raise ApiError(404, "node not found")
    return node


async def nodes(ctx: Context, request: Request) -> Response:
    resources, os = query_bool(request, "resources"), query_bool(request, "os")
    prefix = request.query_params.get("prefix", "")
    node = ctx.agent.node
    found = [node] if node.id.startswith(prefix) else []
    # nomad/node_endpoint.go `List`: by ID, ID tokens; the filter sees the whole node.
    return paged_response(request, sorted(found, key=lambda n: n.id), by_id(lambda n: n.id),
                          shown=lambda nodes: [node_stub(n, resources=resources, os=os)
                                               for n in nodes])


async def node(ctx: Context, request: Request) -> Response:
    node_id = request.path_params["id"]
    if node_id == "self":  # yurt's own shortcut; Nomad has /v1/agent/self for this
        return json_response(ctx.agent.node)
    return json_response(find_node(ctx, node_id))


async def node_allocations(ctx: Context, request: Request) -> Response:
    # nomad/node_endpoint.go `GetAllocs`: node:read (authz_table.py), then the allocations of
    # the namespaces the token may read jobs in.
    node = ctx.agent.node
    node_id = request.path_params["id"]
    if not node_id or not node.id.startswith(node_id):
        return json_response([])
    allocs = sorted((a for a in ctx.server.allocs_for_node()
                     if namespace_visible(request, a.namespace, "read-job")),
                    key=lambda a: (a.create_index, a.name))
    # Whole allocations as every other route answers them (`alloc_json`: Nomad's
    # AllocatedResources, not the stored TaskResources/AllocatedShared).
    return json_response([alloc_json(ctx.alloc_view(a.id)) for a in allocs])


def _update_response(index: int) -> dict[str, Any]:
    # Go's nil slice: no evaluation is created by the change itself here (see server/nodestate.py).
    return {"NodeModifyIndex": index, "EvalIDs": None, "EvalCreateIndex": 0, "Index": index}


async def node_eligibility(ctx: Context, request: Request) -> Response:
    node = find_node(ctx, request.path_params["id"])
    body = await body_json(request)
    eligibility = body_field(body, "Eligibility", str, "")
    body_id = body_field(body, "NodeID", str, "")
    if body_id and body_id != node.id:
        raise ApiError(400, f"node ID {body_id!r} in the body is not {node.id!r}")
    try:
        index = await ctx.client_side().node_control.set_eligibility(eligibility)
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    return json_response(_update_response(index))


async def node_drain(ctx: Context, request: Request) -> Response:
    find_node(ctx, request.path_params["id"])
    body = await body_json(request)
    spec = body_field(body, "DrainSpec", dict, None)
    mark_eligible = body_field(body, "MarkEligible", bool, False)
    meta = body_field(body, "Meta", dict, None)
    if meta is not None and not all(isinstance(v, str) for v in meta.values()):
        raise ApiError(400, '"Meta" must map strings to strings')
    deadline: int | None = None
    ignore_system = False
    if spec is not None:
        deadline = body_field(spec, "Deadline", int, 0)
        ignore_system = body_field(spec, "IgnoreSystemJobs", bool, False)
        if not -(1 << 63) <= deadline < (1 << 63):
            raise ApiError(400, '"Deadline" is out of range')
    index = await ctx.client_side().node_control.set_drain(deadline, ignore_system,
                                                           mark_eligible, meta)
    return json_response(_update_response(index))


async def node_purge(ctx: Context, request: Request) -> Response:
    find_node(ctx, request.path_params["id"])
    index = await ctx.client_side().node_control.purge()
    return json_response({"EvalIDs": None, "EvalCreateIndex": 0, "NodeModifyIndex": index,
                          "Index": index})


async def node_evaluate(ctx: Context, request: Request) -> Response:
    """Nomad's Node.Evaluate (`createNodeEvals`): a `node-update` evaluation of every job with
    an allocation on the node, and of every job still waiting for room (a blocked evaluation);
    the answer lists them. A periodic or parameterized parent has nothing to evaluate."""
    node = find_node(ctx, request.path_params["id"])
    server = ctx.server
    on_node = {a.job_id for a in server.allocs_for_node() if not a.is_terminal()}
    eval_ids: list[str] = []
    for job in list(server.jobs.values()):
        if job.stop or is_template(job):
            continue
        if job.id in on_node or server.blocked_evals(job.id):
            try:
                eval_ids.append((await server.evaluate(job.id, TRIGGER_NODE_UPDATE)).eval_id)
            except KeyError:
                continue  # purged meanwhile
    index = server.visible_index
    return json_response({"HeartbeatTTL": 0, "EvalIDs": eval_ids or None,
                          "EvalCreateIndex": index if eval_ids else 0,
                          "NodeModifyIndex": node.modify_index, "Index": index})

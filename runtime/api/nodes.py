"""/v1/nodes and /v1/node/<id>: this agent's one node (an ID may be a prefix)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime import __version__
from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, json_response


def node_stub(ctx: Context) -> dict[str, Any]:
    node = ctx.agent.node
    return {"ID": node.id, "Datacenter": node.datacenter, "Name": node.name,
            "NodeClass": node.node_class, "NodePool": node.node_pool,
            "Drivers": node.drivers, "Status": node.status,
            "StatusDescription": node.status_description, "Version": __version__,
            "CreateIndex": node.create_index, "ModifyIndex": node.modify_index}


async def nodes(ctx: Context, request: Request) -> Response:
    return json_response([node_stub(ctx)])


async def node(ctx: Context, request: Request) -> Response:
    node_id = request.path_params["id"]
    if not ctx.agent.node.id.startswith(node_id):
        raise ApiError(404, "node not found")
    return json_response(ctx.agent.node)

"""/v1/status/leader, /v1/status/peers, /v1/regions: the cluster as Nomad describes it, for an
agent that is its own single server.

The embedded server has no RPC listener; Nomad's answers name a server by its RPC address
(`host:4647`), so this agent names itself by the host its API listens on (the node's address
when it listens on every interface) and Nomad's default RPC port, or by the agent's
`advertise.rpc` when configured. One region, `global`; one peer, the leader.
"""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.context import Context
from yurt.runtime.api.request import json_response

#: Nomad's default RPC port, the port in every server address Nomad answers.
RPC_PORT: Final = 4647
REGION: Final = "global"


def server_address(ctx: Context) -> str:
    """This agent's name as a server: its `advertise.rpc` if configured (Nomad's servers
    name themselves by their advertised RPC address), else `host:4647`."""
    if ctx.agent.config.advertise_rpc:
        return ctx.agent.config.advertise_rpc
    host = ctx.agent.config.bind
    if host in ("0.0.0.0", "::", ""):  # every interface: the one the node is reached on
        host = ctx.agent.node.attributes.get("unique.network.ip-address", "127.0.0.1")
    return f"{host}:{RPC_PORT}"


async def leader(ctx: Context, request: Request) -> Response:
    return json_response(server_address(ctx))


async def peers(ctx: Context, request: Request) -> Response:
    return json_response([server_address(ctx)])


async def regions(ctx: Context, request: Request) -> Response:
    return json_response([REGION])

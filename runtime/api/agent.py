"""/v1/agent/self, /members, /servers, /health: the agent's configuration, member and stats.

`self` and `health` need no loaded state (app.py routes them with `needs_state=False`): they
are up as soon as the agent listens; `self` says `state_loaded: "false"` until the state is
loaded, and `health` answers Nomad's 500 with the client not ok until then.

The agent is its own cluster of one: one member (this agent, as the server it embeds, in
Nomad's `AgentMember` shape with Nomad's gossip port and tags) and one server, itself.
"""

from __future__ import annotations

import os
import time
import weakref
from dataclasses import replace
from typing import Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime import __version__
from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, json_response, query_bool
from yurt.runtime.api.status import REGION, RPC_PORT, server_address
from yurt.runtime.api.view import AgentView
from yurt.runtime.server.acl.settings import open_to_local_users

#: Nomad's serf (gossip) port, the `Port` of a member.
SERF_PORT: Final = 4648


async def agent_self(ctx: Context, request: Request) -> Response:
    cfg = ctx.agent.config
    loaded = ctx.agent.ready.is_set()
    node = ctx.agent.node
    healthy = [name for name, info in node.drivers.items() if info.healthy]
    # A client of servers keeps no ACL state (runtime/agent/agent.py `effective_acl`).
    acl = replace(cfg.acl, enabled=cfg.acl.enabled and not cfg.servers)
    warning = open_to_local_users(acl, cfg.token, healthy, os.geteuid(),
                                  f"http://{cfg.bind}:{cfg.port}")
    return json_response({
        "config": {"Version": {"Version": __version__}, "DataDir": str(cfg.data_dir),
                   "Datacenter": cfg.datacenter, "NodeName": ctx.agent.node.name,
                   "Addresses": {"HTTP": cfg.bind}, "Ports": {"HTTP": cfg.port},
                   "ACL": {"Enabled": acl.enabled or bool(cfg.token)}},
        # yurt's own: what an operator must hear of (runtime/cli/node.py prints them).
        "Warnings": [warning] if warning else [],
        "member": {"Name": ctx.agent.node.name, "Addr": cfg.bind,
                   "Tags": {"build": __version__}},
        "stats": {"client": {"known_servers": ",".join(cfg.servers) or "embedded",
                             "node_id": ctx.agent.node.id,
                             "num_allocations": str(len(ctx.runners()) if loaded else 0),
                             "restoring_allocations": str(len(ctx.restoring())),
                             # "false" while the state still loads after a start
                             "state_loaded": str(loaded).lower()},
                  "runtime": {"version": __version__,
                              "uptime_seconds": str(int(time.time()
                                                        - ctx.agent.started_at))}}})


def member(ctx: Context) -> dict[str, Any]:
    """This agent as Nomad's `AgentMember` (a server, the leader of a cluster of one)."""
    cfg = ctx.agent.config
    node = ctx.agent.node
    host = server_address(ctx).rsplit(":", 1)[0]
    return {"Name": f"{node.name}.{REGION}", "Addr": host, "Port": SERF_PORT,
            "Tags": {"role": "nomad", "region": REGION, "dc": cfg.datacenter,
                     "build": __version__, "port": str(RPC_PORT), "bootstrap": "1",
                     "expect": "1", "vsn": "1", "mvn": "1", "raft_vsn": "3",
                     "rpc_addr": host, "id": node.id},
            "Status": "alive", "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
            "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4}


async def agent_members(ctx: Context, request: Request) -> Response:
    me = member(ctx)
    return json_response({"ServerName": me["Name"], "ServerRegion": REGION,
                          "ServerDC": ctx.agent.config.datacenter, "Members": [me]})


#: Servers set with PUT /v1/agent/servers, per agent (answered by GET until the next PUT).
_servers: weakref.WeakKeyDictionary[AgentView, list[str]] = weakref.WeakKeyDictionary()


def _with_port(address: str) -> str:
    """Nomad's client adds the default RPC port to an address without one."""
    host, sep, port = address.rpartition(":")
    if sep and port.isdigit() and host and not host.endswith(":"):
        return address
    return f"{address}:{RPC_PORT}"


async def agent_servers(ctx: Context, request: Request) -> Response:
    """GET: the servers the client knows. PUT/POST `?address=` (repeated): replace that list,
    as Nomad's client does (its default port added). This client only ever talks to its
    embedded server; the list is kept in memory and answered, nothing more."""
    if request.method == "GET":
        return json_response(_servers.get(ctx.agent, [server_address(ctx)]))
    addresses = request.query_params.getlist("address")
    if not addresses:
        raise ApiError(400, "missing server address")
    if any(not a.strip() for a in addresses):
        raise ApiError(400, "server address must not be empty")
    _servers[ctx.agent] = sorted(_with_port(a.strip()) for a in addresses)
    return Response(status_code=200)


async def agent_join(ctx: Context, request: Request) -> Response:
    """Nomad joins the server to other servers' gossip; the embedded server has none to
    join, so nothing is joined and the answer says why (Nomad's `joinResult`)."""
    if not request.query_params.getlist("address"):
        raise ApiError(400, "missing address to join")
    return json_response({"num_joined": 0, "error": "this agent's embedded server does not "
                                                    "join other servers", "warning": ""})


async def agent_force_leave(ctx: Context, request: Request) -> Response:
    """Nomad moves a failed gossip member to `left`; there are no other members, so there
    is nothing to move (Nomad answers 200 for an unknown member too)."""
    if not request.query_params.get("node"):
        raise ApiError(400, "missing node to force leave")
    try:
        query_bool(request, "prune")
    except ApiError:
        raise ApiError(400, "invalid prune value") from None
    return Response(status_code=200)


async def agent_health(ctx: Context, request: Request) -> Response:
    types = request.query_params.getlist("type")
    health: dict[str, dict[str, Any]] = {}
    want_client = not types or "client" in types
    want_server = not types or "server" in types
    if want_client:
        ready = ctx.agent.ready.is_set()
        health["client"] = {"ok": ready, "message": "ok" if ready else "state loading"}
    if want_server:
        health["server"] = {"ok": True, "message": "ok"}
    if all(h["ok"] for h in health.values()):
        return json_response(health)
    # Nomad answers an unhealthy agent with a 500 whose body is the same JSON.
    return Response(msgspec.json.encode(health), status_code=500,
                    media_type="application/json")

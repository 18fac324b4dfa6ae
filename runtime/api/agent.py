"""/v1/agent/self, /members, /servers, /health, /monitor: the agent's configuration, member
and stats, and its log followed live.

`self` and `health` need no loaded state (app.py routes them with `needs_state=False`): they
are up as soon as the agent listens; `self` says `state_loaded: "false"` until the state is
loaded, and `health` answers Nomad's 500 with the client not ok until then.

`monitor` is Nomad's `AgentMonitor` (command/agent/agent_endpoint.go): the agent's log lines
at `log_level` (default info; may be below the agent's own level) as they are logged, hclog
text or JSON (`log_json`; `log_include_location` adds the caller's file and line), in Nomad's
stream frames (`{"Data": base64}`, `{}` heartbeats while idle) or as plain text
(`plain=true`), until the client goes away. It follows
runtime/lib/logmonitor.py's fan-out: a reader that falls behind loses lines (it is told how
many, in a `monitor:` line), and never slows the agent. `node_id` and `server_id` may only
name this agent (its node, `leader`, or its server's name): it is a node and a server of one.

The agent is its own cluster of one: one member (this agent, as the server it embeds, in
Nomad's `AgentMember` shape with Nomad's gossip port and tags) and one server, itself.
"""

from __future__ import annotations

import base64
import logging
import os
import time
import weakref
from dataclasses import replace
from typing import Any, Final

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from yurt.runtime import __version__
from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, json_response, query_bool
from yurt.runtime.api.status import REGION, RPC_PORT, server_address
from yurt.runtime.api.view import AgentView
from yurt.runtime.lib.logformat import LEVELS, HumanFormatter, JsonFormatter
from yurt.runtime.lib.logmonitor import LOG_FANOUT
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


#: How long a framed monitor stream may stay silent before a `{}` heartbeat goes out.
MONITOR_HEARTBEAT: Final = 10.0
_GO_BOOLS: Final = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
                    "0": False, "f": False, "F": False, "FALSE": False, "false": False,
                    "False": False}


def _go_bool(request: Request, name: str, what: str) -> bool:
    """Go's `strconv.ParseBool` of `?name=` ("" absent: false); 400 in Nomad's words."""
    text = request.query_params.get(name, "")
    if not text:
        return False
    if text not in _GO_BOOLS:
        raise ApiError(400, f'Unknown option for {what}: strconv.ParseBool: parsing '
                            f'"{text}": invalid syntax')
    return _GO_BOOLS[text]


async def agent_monitor(ctx: Context, request: Request) -> Response:
    level_name = request.query_params.get("log_level", "") or "INFO"
    if level_name.lower() not in LEVELS:
        raise ApiError(400, f"Unknown log level: {level_name}")
    log_json = _go_bool(request, "log_json", "log json")
    plain = _go_bool(request, "plain", "plain")
    location = _go_bool(request, "log_include_location", "log_include_location")
    node_id = request.query_params.get("node_id", "")
    server_id = request.query_params.get("server_id", "")
    if node_id and server_id:
        raise ApiError(400, "Cannot target node and server simultaneously")
    node = ctx.agent.node
    if node_id and node_id != node.id:
        raise ApiError(404, f"Unknown node {node_id!r}: this agent is node {node.id}")
    if server_id and server_id not in ("leader", node.name, node.id, f"{node.name}.{REGION}"):
        raise ApiError(404, f"Unknown server {server_id!r}: this agent's server is "
                            f"{node.name}.{REGION}")
    return MonitorResponse(LEVELS[level_name.lower()], log_json, plain, location)


class MonitorResponse(StreamingResponse):
    """The log lines of one monitor request, streamed until the client goes away.

    As runtime/api/logs.py `FramedLogResponse`: the stream runs in a nursery this response owns
    while it is sent, beside a task that ends it on the client's `http.disconnect`."""

    def __init__(self, level: int, log_json: bool, plain: bool, location: bool) -> None:
        super().__init__(iter(()), media_type="text/plain" if plain else "application/json")
        self._level = level
        self._formatter: logging.Formatter = (JsonFormatter(location) if log_json
                                              else HumanFormatter(location))
        self._plain = plain

    def _body(self, lines: list[str]) -> bytes:
        data = "".join(line + "\n" for line in lines).encode()
        if self._plain:
            return data
        return msgspec.json.encode({"Data": base64.b64encode(data).decode()})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watch_disconnect(cancel: trio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            cancel.cancel(reason="the monitor's client went away")

        with LOG_FANOUT.subscribe(self._level, self._formatter) as subscription:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch_disconnect, nursery.cancel_scope)
                await send({"type": "http.response.start", "status": self.status_code,
                            "headers": self.raw_headers})
                while True:
                    with trio.move_on_after(MONITOR_HEARTBEAT) as idle:
                        lines, lost = await subscription.take()
                    if idle.cancelled_caught:
                        if not self._plain:
                            await send({"type": "http.response.body", "body": b"{}",
                                        "more_body": True})
                        continue
                    if lost:
                        lines.insert(0, self._formatter.format(logging.LogRecord(
                            "yurt.monitor", logging.WARNING, __file__, 0,
                            f"{lost} log lines dropped: this monitor fell behind", None,
                            None)))
                    await send({"type": "http.response.body", "body": self._body(lines),
                                "more_body": True})

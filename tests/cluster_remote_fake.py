"""A fake `yurt server` node RPC for the `RemoteServer` tests: a Starlette app under
hypercorn's trio worker on a loopback port, as the agent's own API runs.

It keeps what a real server would (nodes and their secrets, this node's allocations, one
index) and counts every call, so tests assert what crossed the wire: registrations,
heartbeats, which allocations GetAllocs was asked for, each update batch. `serve_fake` can be
cancelled and started again on the same port: a server that went away and came back.
"""

from __future__ import annotations

import functools
import socket
from dataclasses import dataclass, field
from typing import Any

import hypercorn
import hypercorn.trio
import msgspec
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from yurt.runtime.structs import Allocation, Node
from yurt.runtime.structs.noderpc import NODE_SECRET_HEADER


def _json(body: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(body), status_code=status,
                    media_type="application/json")


def _go_duration_seconds(text: str) -> float:
    for suffix, scale in (("ms", 1e-3), ("s", 1.0), ("m", 60.0)):
        if text.endswith(suffix) and text[:-len(suffix)].replace(".", "").isdigit():
            return float(text[:-len(suffix)]) * scale
    return 300.0


@dataclass
class FakeNodeRPC:
    """The node RPC's state and counters. `ttl` is the HeartbeatTTL it answers (seconds)."""

    ttl: float = 10.0
    #: The cluster's token, asked of a registration when set.
    token: str = ""
    servers: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    allocs: dict[str, Allocation] = field(default_factory=dict)
    index: int = 1
    changed: trio.Event = field(default_factory=trio.Event)
    registers: int = 0
    register_refused: int = 0
    heartbeats: int = 0
    heartbeat_404: int = 0
    get_allocs: list[list[str]] = field(default_factory=list)
    batches: list[list[Allocation]] = field(default_factory=list)
    #: Public API requests received (method, path, query, body, token), for the proxy tests.
    public: list[tuple[str, str, str, bytes, str]] = field(default_factory=list)
    #: Set (and replaced) on every update batch received.
    updated: trio.Event = field(default_factory=trio.Event)
    registered: trio.Event = field(default_factory=trio.Event)
    #: While set, every call is answered 503 (a server up but failing) and counted.
    down: bool = False
    refused_while_down: int = 0

    # ---------------------------------------------------------------- what the test does

    def bump(self) -> int:
        self.index += 1
        self.changed.set()
        self.changed = trio.Event()
        return self.index

    def place(self, alloc: Allocation) -> None:
        """Give the node `alloc` (new or changed server-side)."""
        index = self.bump()
        self.allocs[alloc.id] = msgspec.structs.replace(
            alloc, alloc_modify_index=index, modify_index=index,
            create_index=alloc.create_index or index)

    def forget_nodes(self) -> None:
        """A server that lost its state: heartbeats get 404 until the node registers."""
        self.nodes.clear()

    def updates_for(self, alloc_id: str) -> list[Allocation]:
        return [u for batch in self.batches for u in batch if u.id == alloc_id]

    # ---------------------------------------------------------------- the routes

    def _authorised(self, request: Request, node_id: str) -> Response | None:
        secret = request.headers.get(NODE_SECRET_HEADER, "")
        if not secret or self.secrets.get(node_id) != secret:
            return _json({"error": "permission denied"}, 403)
        return None

    def _reply(self) -> dict[str, Any]:
        return {"HeartbeatTTL": int(self.ttl * 1e9), "Index": self.index,
                "Servers": self.servers}

    async def register(self, request: Request) -> Response:
        if self.token and request.headers.get("X-Nomad-Token") != self.token:
            self.register_refused += 1
            return _json({"error": "Permission denied"}, 403)
        body = msgspec.json.decode(await request.body())
        node = msgspec.convert(body["Node"], Node)
        secret = body["SecretID"]
        if self.secrets.get(node.id, secret) != secret:
            self.register_refused += 1
            return _json({"error": "node secret ID does not match"}, 403)
        self.secrets[node.id] = secret
        self.nodes[node.id] = node
        self.registers += 1
        self.registered.set()
        self.registered = trio.Event()
        return _json(self._reply())

    async def heartbeat(self, request: Request) -> Response:
        node_id = request.path_params["id"]
        if (denied := self._authorised(request, node_id)) is not None:
            return denied
        if node_id not in self.nodes:
            self.heartbeat_404 += 1
            return _json({"error": "node not registered"}, 404)
        self.heartbeats += 1
        return _json(self._reply())

    async def client_allocs(self, request: Request) -> Response:
        node_id = request.path_params["id"]
        if (denied := self._authorised(request, node_id)) is not None:
            return denied
        index = int(request.query_params.get("index", "0"))
        wait = _go_duration_seconds(request.query_params.get("wait", "300s"))
        with trio.move_on_after(wait):
            while self.index <= index:
                await self.changed.wait()
        return _json({"Allocs": {a.id: a.alloc_modify_index for a in self.allocs.values()
                                 if a.node_id == node_id}, "Index": self.index})

    async def get_allocs_route(self, request: Request) -> Response:
        ids: list[str] = msgspec.json.decode(await request.body())["AllocIDs"]
        found = [self.allocs[i] for i in ids if i in self.allocs]
        for alloc in found:
            if (denied := self._authorised(request, alloc.node_id)) is not None:
                return denied
        self.get_allocs.append(list(ids))
        return _json({"Allocs": found, "Index": self.index})

    async def update(self, request: Request) -> Response:
        node_id = request.path_params["id"]
        if (denied := self._authorised(request, node_id)) is not None:
            return denied
        body = msgspec.json.decode(await request.body())
        batch = [msgspec.convert(a, Allocation) for a in body["Allocs"]]
        if any(u.node_id != node_id for u in batch):
            return _json({"error": "permission denied"}, 403)
        self.batches.append(batch)
        for update in batch:
            if (alloc := self.allocs.get(update.id)) is not None:
                self.allocs[update.id] = msgspec.structs.replace(
                    alloc, client_status=update.client_status,
                    task_states=update.task_states, modify_index=self.index + 1)
        self.bump()  # the allocation's AllocModifyIndex does not move: no pull for this
        self.updated.set()
        self.updated = trio.Event()
        return _json({"Index": self.index})

    async def jobs(self, request: Request) -> Response:
        """A stand-in for the servers' public API: answers who it is and what it got."""
        body = await request.body()
        self.public.append((request.method, request.url.path, request.url.query, body,
                            request.headers.get("X-Nomad-Token", "")))
        if request.method == "GET" and "index" in request.query_params:
            with trio.move_on_after(_go_duration_seconds(
                    request.query_params.get("wait", "300s"))):
                while self.index <= int(request.query_params["index"]):
                    await self.changed.wait()
        response = _json([{"ID": "from-the-server", "Got": body.decode()}])
        response.headers["X-Nomad-Index"] = str(self.index)
        return response

    def app(self) -> ASGIApp:
        inner = self._routes()

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and self.down:
                self.refused_while_down += 1
                await _json({"error": "no leader"}, 503)(scope, receive, send)
                return
            await inner(scope, receive, send)

        return app

    def _routes(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/internal/node/register", self.register, methods=["PUT"]),
            Route("/v1/internal/node/{id}/heartbeat", self.heartbeat, methods=["PUT"]),
            Route("/v1/internal/node/{id}/allocs", self.client_allocs, methods=["GET"]),
            Route("/v1/internal/allocs", self.get_allocs_route, methods=["POST"]),
            Route("/v1/internal/node/{id}/allocs/update", self.update, methods=["POST"]),
            Route("/v1/jobs", self.jobs, methods=["GET", "PUT", "POST"]),
        ])


def free_port() -> int:
    """A loopback port nothing listens on (connecting to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def serve_fake(fake: FakeNodeRPC, port: int = 0, *,
                     task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `fake` on 127.0.0.1:`port` until cancelled; `task_status.started` gets its URL."""
    await serve_app(fake.app(), port, task_status=task_status)


async def serve_app(app: ASGIApp, port: int = 0, *,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `app` on 127.0.0.1:`port` until cancelled; `task_status.started` gets its URL."""
    config = hypercorn.Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.1
    serve = functools.partial(hypercorn.trio.serve, _with_lifespan(app),  # type: ignore[arg-type]
                              config,
                              shutdown_trigger=trio.Event().wait)
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(serve)
        task_status.started(binds[0])


def _with_lifespan(app: ASGIApp) -> ASGIApp:
    """`app` with ASGI's lifespan answered (a bare app need not know it)."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    return wrapped

"""A `yurt server`'s own routes, in front of the Nomad API (app.py `FrontRoute`).

- The node RPC (`/v1/internal/...`): what `yurt agent --servers` calls — register,
  heartbeat, its allocations by blocking query, updates. Every call but register carries the
  node's SecretID in `X-Yurt-Node-Secret`; a node touches only itself and its own
  allocations (403 otherwise). Register needs the cluster's token when one is set.
- The cluster's answers where an agent would speak of its one node: `/v1/nodes`,
  `/v1/node/<id>[/allocations|/eligibility]`, `/v1/status/{leader,peers}`,
  `/v1/agent/members`.
- What only a node's agent can answer (its files, logs, stats, GC, an allocation's restart
  or signal: `/v1/client/...`) is forwarded to that agent (`to_node`); what has no node to
  ask is a 501 that says where to ask.

The handlers read the server process through `ClusterProcess` (runtime/agent/serverproc.py
`ServerProcess` implements it): its `ClusterServer`, its configuration, the servers it knows,
the leader, and the HTTP client it forwards to nodes with.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, Final, Protocol

import httpx2
import msgspec
import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from yurt.runtime import __version__
from yurt.runtime.api.app import FrontRoute
from yurt.runtime.api.authz import namespace_visible
from yurt.runtime.api.context import find_alloc_id
from yurt.runtime.api.nodes import node_stub
from yurt.runtime.api.request import (
    ApiError,
    body_field,
    body_json,
    json_response,
    query_bool,
    query_duration,
    query_int,
)
from yurt.runtime.server.cluster.server import ClusterServer, NodeAuthError, UnknownNode
from yurt.runtime.structs import NODE_STATUS_READY, TRIGGER_NODE_UPDATE, Allocation, Node
from yurt.runtime.structs.allocresources import alloc_json
from yurt.runtime.structs.noderpc import FORWARDED_HEADER, NODE_SECRET_HEADER

#: A node's blocking query for its allocations waits at most this long (Nomad's default).
MAX_ALLOC_WAIT: Final = 300.0


class ClusterConfig(Protocol):
    """What the routes read of the server's configuration."""

    @property
    def name(self) -> str: ...
    @property
    def token(self) -> str: ...


class ClusterProcess(Protocol):
    """The `yurt server` process the routes answer for (see the header)."""

    @property
    def server(self) -> ClusterServer: ...
    @property
    def server_config(self) -> ClusterConfig: ...
    @property
    def node_http(self) -> httpx2.AsyncClient:
        """Forwards to nodes' agents (`to_node`)."""
        ...
    def server_urls(self) -> list[str]: ...
    def leader_address(self) -> str | None: ...
    def members(self) -> list[dict[str, Any]]: ...



class _RegisterBody(msgspec.Struct):
    node: Node = msgspec.field(name="Node")
    secret_id: str = msgspec.field(name="SecretID")


class _UpdateBody(msgspec.Struct):
    allocs: list[Allocation] | None = msgspec.field(default=None, name="Allocs")


_register_decoder = msgspec.json.Decoder(_RegisterBody)
_update_decoder = msgspec.json.Decoder(_UpdateBody)


def decode_register(raw: bytes) -> tuple[Node, str]:
    """A register body: the node and its SecretID, in one pass (the simulated network's
    node RPC decodes with it too).

    Raises:
        ValueError: the body is not one (the 400's message).
    """
    try:
        body = _register_decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ValueError(f"bad register body: {e}") from None
    return body.node, body.secret_id


def decode_update(raw: bytes) -> list[Allocation]:
    """An update body's allocations, in one pass (on every node's every update post).

    Raises:
        ValueError: the body is not one (the 400's message).
    """
    try:
        return _update_decoder.decode(raw or b"{}").allocs or []
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ValueError(f"bad update body: {e}") from None


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


def _secret(request: Request) -> str:
    return request.headers.get(NODE_SECRET_HEADER, "")


async def _guarded(proc: ClusterProcess, request: Request, node_id: str) -> Response | None:
    """None when the request carries `node_id`'s secret; else the refusal."""
    try:
        await proc.server.check_secret(node_id, _secret(request))
    except UnknownNode:
        return _error(404, "node not registered")
    except NodeAuthError as e:
        return _error(403, str(e))
    return None


def _ttl_reply(proc: ClusterProcess, ttl: float, index: int) -> Response:
    return JSONResponse({"HeartbeatTTL": int(ttl * 1e9), "Index": index,
                         "Servers": proc.server_urls()},
                        headers={"X-Nomad-Index": str(max(index, 1))})


async def register(proc: ClusterProcess, request: Request) -> Response:
    token = proc.server_config.token
    if token and not hmac.compare_digest(request.headers.get("X-Nomad-Token", "").encode(),
                                         token.encode()):
        return _error(403, "Permission denied")
    try:
        node, secret = decode_register(await request.body())
    except ValueError as e:
        return _error(400, str(e))
    if node.http_addr:
        try:
            parse_http_addr(node.http_addr)
        except ValueError as e:
            return _error(400, str(e))
    try:
        ttl, index = await proc.server.register_node(node, secret)
    except NodeAuthError as e:
        return _error(403, str(e))
    return _ttl_reply(proc, ttl, index)


async def heartbeat(proc: ClusterProcess, request: Request) -> Response:
    node_id = request.path_params["id"]
    try:
        ttl, index = await proc.server.node_heartbeat(node_id, _secret(request))
    except UnknownNode:
        return _error(404, "node not registered")
    except NodeAuthError as e:
        return _error(403, str(e))
    return _ttl_reply(proc, ttl, index)


async def client_allocs(proc: ClusterProcess, request: Request) -> Response:
    node_id = request.path_params["id"]
    if (refused := await _guarded(proc, request, node_id)) is not None:
        return refused
    try:
        index = query_int(request, "index") if "index" in request.query_params else 0
        wait = min(query_duration(request, "wait", MAX_ALLOC_WAIT), MAX_ALLOC_WAIT)
    except ApiError as e:
        return _error(e.status, str(e))
    found, answer = await proc.server.wait_client_allocs(node_id, index, wait)
    return JSONResponse({"Allocs": found, "Index": answer},
                        headers={"X-Nomad-Index": str(answer)})


async def get_allocs(proc: ClusterProcess, request: Request) -> Response:
    try:
        body = await body_json(request)
        ids = body_field(body, "AllocIDs", list, [])
        node_id = str(body.get("NodeID", ""))
    except ApiError as e:
        return _error(e.status, str(e))
    if not node_id:
        # The node is the one the secret belongs to: find it among the allocations' nodes.
        nodes = {proc.server.allocs[i].node_id for i in ids if i in proc.server.allocs}
        node_id = next(iter(nodes)) if len(nodes) == 1 else ""
    if not node_id:
        return _error(403, "allocations of more than one node") if ids else JSONResponse(
            {"Allocs": [], "Index": proc.server.visible_index})
    if (refused := await _guarded(proc, request, node_id)) is not None:
        return refused
    try:
        found = proc.server.get_allocs(node_id, [str(i) for i in ids])
    except NodeAuthError as e:
        return _error(403, str(e))
    return json_response({"Allocs": found, "Index": proc.server.visible_index})


async def update_allocs(proc: ClusterProcess, request: Request) -> Response:
    node_id = request.path_params["id"]
    if (refused := await _guarded(proc, request, node_id)) is not None:
        return refused
    try:
        batch = decode_update(await request.body())
    except ValueError as e:
        return _error(400, str(e))
    try:
        index = await proc.server.update_node_allocs(node_id, batch)
    except NodeAuthError as e:
        return _error(403, str(e))
    return JSONResponse({"Index": index}, headers={"X-Nomad-Index": str(max(index, 1))})


# --------------------------------------------------------------------------- cluster answers


async def nodes(proc: ClusterProcess, request: Request) -> Response:
    resources, os = query_bool(request, "resources"), query_bool(request, "os")
    prefix = request.query_params.get("prefix", "")
    found = sorted((n for n in proc.server.nodes() if n.id.startswith(prefix)),
                   key=lambda n: (n.name, n.id))
    return json_response([node_stub(n, resources=resources, os=os) for n in found])


def _find_node(proc: ClusterProcess, node_id: str) -> Node:
    matches = [n for n in proc.server.nodes() if node_id and n.id.startswith(node_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ApiError(404, "node not found")
    raise ApiError(400, f"node ID prefix {node_id!r} is ambiguous")


async def node(proc: ClusterProcess, request: Request) -> Response:
    return json_response(_find_node(proc, request.path_params["id"]))


async def node_allocations(proc: ClusterProcess, request: Request) -> Response:
    node_id = request.path_params["id"]
    allocs = sorted((a for a in proc.server.allocs_on(node_id)
                     if namespace_visible(request, a.namespace, "read-job")),
                    key=lambda a: (a.create_index, a.name))
    return json_response([alloc_json(a) for a in allocs])  # as the agent's route answers


async def node_eligibility(proc: ClusterProcess, request: Request) -> Response:
    node = _find_node(proc, request.path_params["id"])
    body = await body_json(request)
    try:
        index = await proc.server.set_eligibility(node.id,
                                                  body_field(body, "Eligibility", str, ""))
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    except KeyError:
        raise ApiError(404, "node not found") from None
    return json_response({"NodeModifyIndex": index, "EvalIDs": None, "EvalCreateIndex": 0,
                          "Index": index})


async def node_evaluate(proc: ClusterProcess, request: Request) -> Response:
    """Nomad's Node.Evaluate: a node-update evaluation of every job with an allocation on
    the node."""
    node = _find_node(proc, request.path_params["id"])
    server = proc.server
    on_node = sorted({a.job_id for a in server.allocs_on(node.id) if not a.is_terminal()})
    eval_ids = []
    for job_id in on_node:
        try:
            eval_ids.append((await server.evaluate(job_id, TRIGGER_NODE_UPDATE)).eval_id)
        except (KeyError, ValueError):
            continue  # purged meanwhile, or a template job
    index = server.visible_index
    return json_response({"HeartbeatTTL": 0, "EvalIDs": eval_ids or None,
                          "EvalCreateIndex": index if eval_ids else 0,
                          "NodeModifyIndex": node.modify_index, "Index": index})


async def not_in_a_cluster_yet(proc: ClusterProcess, request: Request) -> Response:
    return Response("not supported by a yurt cluster yet: node drain and purge run on a "
                    "single-node agent only", status_code=501)


async def agent_servers(proc: ClusterProcess, request: Request) -> Response:
    return json_response([url.removeprefix("http://").removeprefix("https://")
                          for url in proc.server_urls()])


async def status_leader(proc: ClusterProcess, request: Request) -> Response:
    return json_response(proc.leader_address() or "")


async def status_peers(proc: ClusterProcess, request: Request) -> Response:
    return json_response(proc.server_urls())


async def members(proc: ClusterProcess, request: Request) -> Response:
    servers = proc.members()
    me = proc.server_config.name
    return json_response({"ServerName": me, "ServerRegion": "global", "ServerDC": "dc1",
                          "Members": [_member(s) for s in servers]})


def _member(server: dict[str, Any]) -> dict[str, Any]:
    host, _, port = server["address"].removeprefix("http://").partition(":")
    return {"Name": f"{server['name']}.global", "Addr": host, "Port": int(port or 0),
            "Tags": {"role": "nomad", "region": "global", "dc": "dc1", "build": __version__,
                     "leader": "true" if server.get("leader") else "false",
                     "http_addr": server["address"]},
            "Status": "alive"}


async def only_on_nodes(proc: ClusterProcess, request: Request) -> Response:
    return Response("this is a yurt server: ask the agent running the allocation (its "
                    "address is the node's HTTPAddr in /v1/node/<id>), or name the node "
                    "with ?node_id=", status_code=501)



def parse_http_addr(addr: str) -> tuple[str, int]:
    """A node's `HTTPAddr` as (host, port): exactly `host:port` (`[v6]:port`), a real
    address (not every interface), or ValueError. Checked at registration: a server
    forwards requests there, so the text must not be able to say anything else (a path, a
    user, another scheme)."""
    host, sep, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if (not sep or not host or not port.isdigit() or not 0 < int(port) < 65536
            or any(c in host for c in "/?#@[] \\")):
        raise ValueError(f"HTTPAddr {addr!r} is not host:port")
    if host in ("0.0.0.0", "::", ""):
        raise ValueError(f"HTTPAddr {addr!r} names every interface, not one address")
    return host, int(port)


#: Request headers a forward to a node keeps: the caller's token and what the answer's
#: shape depends on. A browser's (`Origin`, `Referer`, `Sec-Fetch-*`) are not: this server
#: judged them against its own address (api/origin.py `CrossOriginMiddleware`) before the
#: route ran, so the forward is the server's own call, and the node's agent, which holds
#: them against its address, would refuse every call the server's web UI makes.
KEPT_HEADERS: Final = ("x-nomad-token", "authorization", "accept", "content-type")


async def to_node(proc: ClusterProcess, request: Request) -> Response:
    """A node's own answer (its allocation's files, logs, stats, restart, signal; its stats
    and GC), forwarded to the agent of the node running it, streamed back unchanged, as
    Nomad's servers forward client routes to the client."""
    params = request.path_params
    alloc_ref = params.get("alloc_id") or params.get("id")
    if alloc_ref:
        alloc = _find_alloc(proc, alloc_ref)
        node = proc.server.cluster_nodes.get(alloc.node_id)
    else:
        node_id = request.query_params.get("node_id", "")
        if not node_id:
            return await only_on_nodes(proc, request)
        node = _find_node(proc, node_id)
    if request.headers.get(FORWARDED_HEADER):
        # A server's forward that came back to a server: the node's address is wrong (one
        # of this machine's, say). Refused, not forwarded again in a loop.
        raise ApiError(508, "a forwarded request reached a server again: the node's "
                            "HTTPAddr does not lead to its agent")
    if node is None:
        raise ApiError(404, "the allocation's node is not known")
    if node.status != NODE_STATUS_READY:
        raise ApiError(502, f"node {node.name} is {node.status}: its agent cannot answer")
    host, port = parse_http_addr(node.http_addr)
    url = httpx2.URL(scheme="http", host=host, port=port, path=request.url.path,
                     query=request.url.query.encode())
    headers = {k: v for k, v in request.headers.items() if k.lower() in KEPT_HEADERS}
    headers[FORWARDED_HEADER] = "1"  # the node answers it, never sends it back
    upstream = proc.node_http.build_request(request.method, url, headers=headers,
                                            content=await request.body())
    try:
        answer = await proc.node_http.send(upstream, stream=True)
    except httpx2.PoolTimeout:
        raise ApiError(503, "too many requests to nodes in flight; try again") from None
    except httpx2.TransportError as e:
        raise ApiError(502, f"node {node.name} ({node.http_addr}) does not answer: "
                            f"{e or type(e).__name__}") from None

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in answer.aiter_raw():
                yield chunk
        except httpx2.HTTPError:
            return  # the node went away mid-answer: the stream ends there
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await answer.aclose()

    kept = {k: v for k, v in answer.headers.items()
            if k.lower() in ("content-type", "x-nomad-index")}
    return StreamingResponse(body(), status_code=answer.status_code, headers=kept)


def _find_alloc(proc: ClusterProcess, prefix: str) -> Allocation:
    """The allocation with this ID or unique ID prefix (404/400 otherwise), as the agent's
    own routes find it."""
    return proc.server.allocs[find_alloc_id(prefix, proc.server.allocs, ())]


def routes(proc: ClusterProcess) -> list[FrontRoute]:
    def r(fn: Any) -> Any:
        return partial(fn, proc)

    rpc = {"blocking": False, "token_exempt": True}
    post = ("PUT", "POST")
    return [
        FrontRoute("/v1/internal/node/register", r(register), post, **rpc),
        FrontRoute("/v1/internal/node/{id}/heartbeat", r(heartbeat), post, **rpc),
        FrontRoute("/v1/internal/node/{id}/allocs", r(client_allocs), ("GET",), **rpc),
        FrontRoute("/v1/internal/node/{id}/allocs/update", r(update_allocs), post, **rpc),
        FrontRoute("/v1/internal/allocs", r(get_allocs), post, **rpc),
        FrontRoute("/v1/nodes", r(nodes), ("GET",)),
        FrontRoute("/v1/node/{id}/allocations", r(node_allocations), ("GET",)),
        FrontRoute("/v1/node/{id}/eligibility", r(node_eligibility), post),
        FrontRoute("/v1/node/{id}/drain", r(not_in_a_cluster_yet), post),
        FrontRoute("/v1/node/{id}/purge", r(not_in_a_cluster_yet), post),
        FrontRoute("/v1/node/{id}/evaluate", r(node_evaluate), post),
        FrontRoute("/v1/node/{id}", r(node), ("GET",)),
        FrontRoute("/v1/agent/servers", r(agent_servers), ("GET",)),
        FrontRoute("/v1/status/leader", r(status_leader), ("GET",)),
        FrontRoute("/v1/status/peers", r(status_peers), ("GET",)),
        FrontRoute("/v1/agent/members", r(members), ("GET",)),
        FrontRoute("/v1/client/fs/{op}/{alloc_id}", r(to_node), ("GET",), blocking=False),
        FrontRoute("/v1/client/allocation/{id}/{op}", r(to_node), ("GET", "PUT", "POST"),
                   blocking=False),
        FrontRoute("/v1/client/stats", r(to_node), ("GET",), blocking=False),
        FrontRoute("/v1/client/gc", r(to_node), ("GET", "PUT"), blocking=False),
        FrontRoute("/v1/client/{rest:path}", r(only_on_nodes), ("GET", "PUT", "POST", "DELETE")),
    ]

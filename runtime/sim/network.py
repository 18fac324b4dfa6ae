"""The whole-cluster simulation's network: the node RPC delivered in process, over links with
latency, message loss and partitions, all drawn from one seeded RNG on the trio clock.

`SimNetwork.transport(node_id)` is a `NodeTransport` (runtime/client/remote.py): the real
`RemoteServer` of a `SimNode` calls it exactly as it calls `HttpTransport`, and it answers
what runtime/api/noderpc.py answers over HTTP — the same paths, the same SecretID checks,
the same status codes (403 a wrong secret or another node's allocation, 404 an unknown node,
400 a bad body) and the replies encoded as JSON bytes — by calling the same `ClusterServer`
methods (`wait_client_allocs` is the blocking pull noderpc.client_allocs serves).

One message, both ways:

    node ──latency──▶ [lost? partitioned? server down?] ──▶ handler on the server
    node ◀──latency── [lost? partitioned? server down?] ◀── reply

- **Latency**: each way a uniform draw from `latency`.
- **Loss**: each way lost with probability `loss`; a lost message is a reset connection
  (`ConnectionResetError`, an OSError: the caller fails over at once). A lost *reply* comes
  after the server acted: the node sends again what was already applied, as on a real
  network.
- **Partitions** (a node↔server pair, or a node cut off from every server) black-hole
  the packets: the call hangs until the caller's own deadline (`RemoteServer`'s per-server
  `fail_after`). Chosen over a connect error because that is what a partition does to TCP
  (no RST comes back), and it exercises the timeout path: a node that hangs on a cut-off
  server for `request_timeout` may miss its heartbeat, as a real one does. A partition
  that starts while a reply is on its way swallows it too.
- **A crashed server** (no process behind the address) refuses the connection at once
  (`ConnectionRefusedError`); calls it was serving when it crashed end with a reset: each
  handler runs in a cancel scope the server's crash cancels, so a dead server never acts
  on a request afterwards.

Invariant: every draw comes from the network's RNG in the order the trio scheduler runs the
calls, so a seeded scheduler (scenario.py) makes the whole network reproducible. Every
message is appended to `log` (the run's trace, hashed into its digest).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, final

import msgspec
import trio

from yurt.runtime.api.noderpc import MAX_ALLOC_WAIT, decode_register, decode_update
from yurt.runtime.client.remote import NodeTransport
from yurt.runtime.lib.durations import parse_duration
from yurt.runtime.server.cluster.server import ClusterServer, NodeAuthError, UnknownNode
from yurt.runtime.structs.noderpc import NODE_SECRET_HEADER

PREFIX: Final = "/v1/internal/"


class _Refused(Exception):
    """An answer with an error status, as api/noderpc.py's `_error`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ServerEndpoint:
    """What is behind one server's address: its `ClusterServer` while it runs, and the
    calls it is serving (cancelled when it crashes)."""

    url: str
    server: ClusterServer | None = None
    serving: set[trio.CancelScope] = field(default_factory=set)

    def crash(self) -> None:
        self.server = None
        for scope in list(self.serving):
            scope.cancel()


@final
class SimNetwork:
    """The links between simulated nodes and servers (see the module header).

    Args:
        rng: every draw of the network (latency, loss).
        latency: (low, high) seconds, one way.
        loss: the chance that one message (a request or a reply) is lost.
        log: where each message's outcome is appended (the run's trace).
    """

    def __init__(self, rng: random.Random, *, latency: tuple[float, float] = (0.001, 0.02),
                 loss: float = 0.0, log: Callable[[str], None] | None = None) -> None:
        self.rng = rng
        self.latency = latency
        self.loss = loss
        self.endpoints: dict[str, ServerEndpoint] = {}
        #: Cut node↔server pairs, and nodes cut off from every server.
        self.cut: set[tuple[str, str]] = set()
        self.isolated: set[str] = set()
        self._log = log or (lambda _: None)
        self.calls = 0
        self.lost = 0
        self.blackholed = 0
        self.refused = 0
        self.errors: list[str] = []  # 5xx answers: a server raised (the scenario reports them)

    def add_server(self, url: str) -> ServerEndpoint:
        endpoint = self.endpoints[url] = ServerEndpoint(url)
        return endpoint

    # ------------------------------------------------------------------ faults

    def partitioned(self, node_id: str, url: str) -> bool:
        return node_id in self.isolated or (node_id, url) in self.cut

    def heal(self) -> None:
        self.cut.clear()
        self.isolated.clear()

    # ------------------------------------------------------------------ the transport

    def transport(self, node_id: str) -> NodeTransport:
        """The `NodeTransport` of node `node_id`."""
        return _Link(self, node_id)

    async def _hop(self, node_id: str, server_url: str, what: str) -> None:
        """One way of one message: its latency, then its fate."""
        await trio.sleep(self.rng.uniform(*self.latency))
        if self.partitioned(node_id, server_url):
            self.blackholed += 1
            self._log(f"net {node_id} {what} blackholed")
            await trio.sleep_forever()  # the caller's deadline ends it
        if self.loss and self.rng.random() < self.loss:
            self.lost += 1
            self._log(f"net {node_id} {what} lost")
            raise ConnectionResetError(f"{what}: message lost")

    async def _send(self, node_id: str, method: str, url: str, content: bytes | None,
                    params: dict[str, str], headers: dict[str, str]) -> tuple[int, bytes]:
        self.calls += 1
        base, _, rest = url.partition("/v1/")
        path = "/v1/" + rest
        endpoint = self.endpoints.get(base)
        what = f"{method} {base}{path.removeprefix(PREFIX[:-1])}"
        await self._hop(node_id, base, what)
        if endpoint is None or endpoint.server is None:
            self.refused += 1
            self._log(f"net {node_id} {what} refused")
            raise ConnectionRefusedError(f"{base}: connection refused")
        server = endpoint.server
        with trio.CancelScope() as scope:
            endpoint.serving.add(scope)
            try:
                status, body = await self._handle(server, method, path, content, params,
                                                  headers)
            finally:
                endpoint.serving.discard(scope)
        if scope.cancelled_caught:  # the server crashed mid-call
            self._log(f"net {node_id} {what} reset")
            raise ConnectionResetError(f"{base}: connection reset")
        await self._hop(node_id, base, f"{what} reply")
        if endpoint.server is not server:  # crashed while the reply travelled: never sent
            raise ConnectionResetError(f"{base}: connection reset")
        self._log(f"net {node_id} {what} {status}")
        return status, body

    async def _handle(self, server: ClusterServer, method: str, path: str,
                      content: bytes | None, params: dict[str, str], headers: dict[str, str]
                      ) -> tuple[int, bytes]:
        secret = headers.get(NODE_SECRET_HEADER, "")
        try:
            answer = await _dispatch(server, method, path, content, params, secret,
                                     list(self.endpoints))
        except _Refused as e:
            return e.status, msgspec.json.encode({"error": str(e)})
        except Exception as e:  # what a route would answer as a 500
            self.errors.append(f"{method} {path}: {type(e).__name__}: {e}")
            return 500, msgspec.json.encode({"error": f"{type(e).__name__}: {e}"})
        return 200, msgspec.json.encode(answer)


@final
class _Link:
    """One node's `NodeTransport`: its calls, through the network."""

    def __init__(self, network: SimNetwork, node_id: str) -> None:
        self._network = network
        self._node_id = node_id

    async def __call__(self, method: str, url: str, *, content: bytes | None,
                       params: dict[str, str] | None, headers: dict[str, str]
                       ) -> tuple[int, bytes]:
        return await self._network._send(self._node_id, method, url, content, params or {},
                                         headers)


async def _dispatch(server: ClusterServer, method: str, path: str, content: bytes | None,
                    params: dict[str, str], secret: str, urls: list[str]) -> Any:
    """api/noderpc.py's node RPC, minus HTTP: the answer's JSON-able body, or `_Refused`."""
    parts = path.removeprefix(PREFIX).split("/")
    if parts == ["node", "register"] and method in ("PUT", "POST"):
        try:
            node, node_secret = decode_register(content or b"")
        except ValueError as e:
            raise _Refused(400, str(e)) from None
        try:
            ttl, index = await server.register_node(node, node_secret)
        except NodeAuthError as e:
            raise _Refused(403, str(e)) from None
        return _ttl_reply(ttl, index, urls)
    if len(parts) == 3 and parts[0] == "node" and parts[2] == "heartbeat":
        try:
            ttl, index = await server.node_heartbeat(parts[1], secret)
        except UnknownNode:
            raise _Refused(404, "node not registered") from None
        except NodeAuthError as e:
            raise _Refused(403, str(e)) from None
        return _ttl_reply(ttl, index, urls)
    if len(parts) == 3 and parts[0] == "node" and parts[2] == "allocs" and method == "GET":
        node_id = parts[1]
        await _guard(server, node_id, secret)
        try:
            index = int(params.get("index", "0"))
            wait = min(parse_duration(params.get("wait", f"{MAX_ALLOC_WAIT:.0f}s")) / 1e9,
                       MAX_ALLOC_WAIT)
        except ValueError as e:
            raise _Refused(400, str(e)) from None
        listed, answer = await server.wait_client_allocs(node_id, index, wait)
        return {"Allocs": listed, "Index": answer}
    if parts == ["allocs"] and method == "POST":
        try:
            body = msgspec.json.decode(content or b"{}")
            ids = [str(i) for i in body.get("AllocIDs") or []]
            node_id = str(body.get("NodeID", ""))
        except (msgspec.DecodeError, AttributeError) as e:
            raise _Refused(400, str(e)) from None
        if not node_id:
            nodes = {server.allocs[i].node_id for i in ids if i in server.allocs}
            node_id = next(iter(nodes)) if len(nodes) == 1 else ""
        if not node_id:
            if ids:
                raise _Refused(403, "allocations of more than one node")
            return {"Allocs": [], "Index": server.visible_index}
        await _guard(server, node_id, secret)
        try:
            found = server.get_allocs(node_id, ids)
        except NodeAuthError as e:
            raise _Refused(403, str(e)) from None
        return {"Allocs": found, "Index": server.visible_index}
    if (len(parts) == 4 and parts[0] == "node" and parts[2:] == ["allocs", "update"]
            and method in ("PUT", "POST")):
        node_id = parts[1]
        await _guard(server, node_id, secret)
        try:
            batch = decode_update(content or b"")
        except ValueError as e:
            raise _Refused(400, str(e)) from None
        try:
            index = await server.update_node_allocs(node_id, batch)
        except NodeAuthError as e:
            raise _Refused(403, str(e)) from None
        return {"Index": index}
    raise _Refused(404, f"no route {method} {path}")


async def _guard(server: ClusterServer, node_id: str, secret: str) -> None:
    try:
        await server.check_secret(node_id, secret)
    except UnknownNode:
        raise _Refused(404, "node not registered") from None
    except NodeAuthError as e:
        raise _Refused(403, str(e)) from None


def _ttl_reply(ttl: float, index: int, urls: list[str]) -> dict[str, Any]:
    return {"HeartbeatTTL": int(ttl * 1e9), "Index": index, "Servers": urls}

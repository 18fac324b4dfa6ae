"""`ServerProxy`: a client-only agent's HTTP API forwards the servers' routes to a server.

Nomad's client agent answers its whole HTTP API: what only a server knows (jobs, allocations,
nodes, evaluations, deployments, services, variables, operator, search, the event stream) it
forwards to a server over RPC. Here the forward is HTTP: the request goes, method, path,
query, headers (the caller's `X-Nomad-Token` included) and body, to the current server of
`RemoteServer`, and the answer streams back unchanged (status, headers, body bytes as they
arrive), so blocking queries, `?index=` waits and NDJSON streams (`/v1/event/stream`) work
through it.

Invariants and choices:
- The body is read first, bounded by the API's own limit (413 past it): a request that
  finds its server gone fails over to the next with the same bytes. Only a transport error
  (refused, reset, no connection in `CONNECT_TIMEOUT`) fails over; any answer, a 5xx too,
  is the server's and is passed on. No server reachable: 502 with `{"error": ...}` naming
  each server tried.
- Hop-by-hop headers (RFC 9110 §7.6.1) are not forwarded either way; `Host` is the
  server's.
- There is no deadline past the connect: a blocking query legitimately holds its answer for
  minutes, and an event stream never ends. Once the answer has started, an upstream failure
  ends the body early; the caller sees a truncated stream, as it would from the server.
- The event websocket (`/v1/event/ws`, the web UI's live updates) is relayed: a browser's
  page can only open a socket to the agent that served it. The server's socket is opened
  first (with the caller's token, from its header or its subprotocol, api/app.py), and only then
  the caller's accepted, so a refusal reaches the caller as the server's close code (1008
  for a wrong token). Messages go one way, server to caller; either side closing ends both.
  Other websockets (exec) are not forwarded: closed with 1011 and a reason.
"""

from __future__ import annotations

import logging
from typing import Final, final

import httpx2
import msgspec
import trio
from starlette.types import Message, Receive, Scope, Send
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    open_websocket_url,
)

from yurt.runtime.client.remote import RemoteServer

log = logging.getLogger("yurt.cluster.proxy")

CONNECT_TIMEOUT: Final = 5.0
#: The one websocket relayed to a server.
EVENT_SOCKET: Final = "/v1/event/ws"
#: Headers that describe one connection, never forwarded (RFC 9110 §7.6.1), and `host`.
HOP_BY_HOP: Final = frozenset({b"connection", b"keep-alive", b"proxy-authenticate",
                               b"proxy-authorization", b"proxy-connection", b"te",
                               b"trailer", b"transfer-encoding", b"upgrade", b"host",
                               b"content-length"})


class _TooLarge(Exception):
    pass


@final
class ServerProxy:
    """Forwards HTTP requests to the servers `remote` knows. `aclose` when done."""

    def __init__(self, remote: RemoteServer, *, max_body: int) -> None:
        self._remote = remote
        self._max_body = max_body
        self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(None, connect=CONNECT_TIMEOUT),
                                        follow_redirects=False, trust_env=False)
        self.forwarded = 0  # requests a server answered (tests, operators)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan: the agent's app has it
            raise ValueError(f"a server proxy serves http, not {scope['type']}")
        if scope["type"] == "websocket":
            if scope["path"] == EVENT_SOCKET:
                await self._relay_events(scope, receive, send)
                return
            await send({"type": "websocket.close", "code": 1011,
                        "reason": "a client-only agent does not forward websockets; "
                                  "ask a server"})
            return
        try:
            body = await self._read_body(receive)
        except _TooLarge:
            await _json(send, 413, "request body too large")
            return
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        target = path.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")
        # `Origin` was checked here (api/origin.py) against this agent's address; the server
        # would hold it against its own.
        headers = [(k, v) for k, v in scope.get("headers", [])
                   if k.lower() not in HOP_BY_HOP and k.lower() != b"origin"]
        errors: list[str] = []
        for url in self._remote.rotation():
            request = self._http.build_request(scope["method"], url + target,
                                               headers=headers, content=body)
            try:
                response = await self._http.send(request, stream=True)
            except httpx2.TransportError as e:
                errors.append(f"{url}: {e or type(e).__name__}")
                self._remote.server_failed(url)
                continue
            self.forwarded += 1
            try:
                await send({"type": "http.response.start", "status": response.status_code,
                            "headers": [(k, v) for k, v in response.headers.raw
                                        if k.lower() not in HOP_BY_HOP - {b"content-length"}]})
                try:
                    async for chunk in response.aiter_raw():
                        await send({"type": "http.response.body", "body": chunk,
                                    "more_body": True})
                except httpx2.HTTPError as e:  # the answer had started: end it where it broke
                    log.warning("the server's answer to %s broke off: %s", target, e)
                await send({"type": "http.response.body", "body": b""})
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await response.aclose()
            return
        await _json(send, 502, "no server answered: " + "; ".join(errors))

    async def _relay_events(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The server's event socket, relayed to the caller (see above)."""
        from yurt.runtime.api.authz import request_secret
        from yurt.runtime.api.events import UI_SUBPROTOCOL

        if (await receive())["type"] != "websocket.connect":
            return
        token = request_secret(scope).encode()  # the header, a Bearer, or the subprotocol
        query = scope.get("query_string", b"").decode("latin-1")
        target = EVENT_SOCKET + (f"?{query}" if query else "")
        # The UI's subprotocol is asked for upstream too: the server paces the UI's socket
        # at its own interval (api/events.py).
        ui = UI_SUBPROTOCOL in (scope.get("subprotocols") or [])
        errors: list[str] = []
        for url in self._remote.rotation():
            try:
                async with open_websocket_url(
                        "ws" + url.removeprefix("http") + target,
                        subprotocols=[UI_SUBPROTOCOL] if ui else None,
                        extra_headers=[(b"X-Nomad-Token", token)] if token else [],
                        connect_timeout=CONNECT_TIMEOUT) as upstream:
                    await send({"type": "websocket.accept", "headers": [],
                                "subprotocol": UI_SUBPROTOCOL if ui else None})
                    self.forwarded += 1
                    await _pump(upstream, receive, send)
                return
            except ConnectionRejected as e:  # the server's answer: passed on
                code = 1008 if e.status_code == 403 else 1011
                await send({"type": "websocket.close", "code": code})
                return
            except HandshakeError as e:
                errors.append(f"{url}: {e.__cause__ or type(e).__name__}")
                self._remote.server_failed(url)
        await send({"type": "websocket.close", "code": 1011,
                    "reason": "no server answered"})
        log.warning("no server answered the event socket: %s", "; ".join(errors))

    async def _read_body(self, receive: Receive) -> bytes:
        body = bytearray()
        more = True
        while more:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                break
            body += message.get("body", b"")
            if len(body) > self._max_body:
                raise _TooLarge
            more = bool(message.get("more_body", False))
        return bytes(body)


async def _pump(upstream: WebSocketConnection, receive: Receive, send: Send) -> None:
    """Server's messages to the caller until either side closes; the server's close code
    (1008: its token check) is passed on, a caller gone closes the server's socket."""
    async with trio.open_nursery() as nursery:
        async def caller_gone() -> None:
            while (await receive())["type"] != "websocket.disconnect":
                pass
            nursery.cancel_scope.cancel(reason="the caller closed the event socket")

        nursery.start_soon(caller_gone)
        code = 1000
        try:
            while True:
                message = await upstream.get_message()
                await send({"type": "websocket.send", "text": message}
                           if isinstance(message, str) else
                           {"type": "websocket.send", "bytes": message})
        except ConnectionClosed as e:
            said = e.reason.code if e.reason is not None else None
            code = said if said in (1000, 1008) else 1011
        await send({"type": "websocket.close", "code": code})
        nursery.cancel_scope.cancel(reason="the server closed the event socket")


async def _json(send: Send, status: int, error: str) -> None:
    body = msgspec.json.encode({"error": error})
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

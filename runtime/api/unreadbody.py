"""`UnreadBodyMiddleware`: a request body nobody read must not cost the client its connection.

An answer given before the body is read (405 from the router, 403 from the token check, a 404
for an unknown id, a GET sent with a body) leaves the body in the connection. hypercorn then
closes the connection after the answer without saying so, and a client that pools
connections (python-nomad, Go's) finds it dead on its next request ("Server disconnected").
Go's server, which Nomad's API runs on, reads such a body up to a bound before answering and
says `Connection: close` past it; this does the same. The drop shares `read_body`'s bounds.

Invariant: the answer is held only while at most `DRAIN_BYTES` / `DRAIN_SECONDS` of the body
are dropped; past them it goes out with `Connection: close`, so the client is told.
"""

from __future__ import annotations

from typing import final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yurt.runtime.api.request import drop_body


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


@final
class UnreadBodyMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        body_done = False
        gone = False

        async def tracked_receive() -> Message:
            nonlocal body_done, gone
            message = await receive()
            if message["type"] == "http.request":
                body_done = body_done or not message.get("more_body", False)
            else:
                gone = True
            return message

        async def checked_send(message: Message) -> None:
            closing = any(k.lower() == b"connection" and v.lower() == b"close"
                          for k, v in message.get("headers", []))
            if (message["type"] == "http.response.start" and not body_done and not gone
                    and not closing):  # a 413 has dropped what it would already
                await drop_body(tracked_receive)
                if not body_done:
                    headers = [(k, v) for k, v in message.get("headers", [])
                               if k.lower() != b"connection"]
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, tracked_receive, checked_send)

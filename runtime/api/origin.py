"""Requests a browser makes on behalf of another site are refused (cross-site request forgery).

An agent without a token answers whoever reaches its port, and a browser on the same machine
reaches it for any web page it shows: a page of another site can POST a job (a "simple" request
needs no CORS preflight, and the API reads its body whatever the Content-Type says) or open
`/v1/client/allocation/<id>/exec` as a websocket, which browsers never guard. A browser names the
page's site in `Origin` on every such request; API clients (the CLI, python-nomad, curl) send
none. So a request whose `Origin` is not this agent's own address — scheme aside, the same
`host:port` as its `Host` header — is answered 403 (a websocket is closed with 1008), before
the token is even looked at. The web UI's own requests are same-origin and pass.

`Origin: null` (a sandboxed frame, a `file:` page) is another site too.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

REFUSED: Final = "Cross-origin request refused: Origin is not this agent's address"


def same_origin(origin: bytes, host: bytes) -> bool:
    try:
        parts = urlsplit(origin.decode("latin-1"))
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    netloc = parts.netloc.lower()
    wanted = host.decode("latin-1").lower()
    default = {"http": ":80", "https": ":443"}[parts.scheme]
    return netloc == wanted or netloc + default == wanted or netloc == wanted + default


class CrossOriginMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers", []))
            origin = headers.get(b"origin")
            if origin is not None and not same_origin(origin, headers.get(b"host", b"")):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await PlainTextResponse(REFUSED, status_code=403)(scope, receive, send)
                return
        await self.app(scope, receive, send)

"""Who may call what: the token of every request resolved to an `Identity`, and each route's
declared need checked before its handler runs.

A request's secret is its `X-Nomad-Token` header, else `Authorization: Bearer <secret>`
(command/agent/http.go `parseToken`), else — a websocket from a browser, which cannot set
headers there — the subprotocol `x-nomad-token.<base64url>`. Never the query string: it ends
up in access logs, proxies and shell histories. No secret is the anonymous token.

Every route of the app is wrapped by `guard` with its `Need` (authz_table.py: one table, so a
route without a declared need is a failing test, tests/test_authz_routes.py). A need is one of:
- `PUBLIC`: no token is looked at (health, leader, the UI's static files, the JWKS);
- a namespace capability, in the request's `?namespace=` (`*`: granted when any namespace
  grants it; the lists then show only the namespaces granted, namespaces.py `in_namespace`),
  or in the namespace of the allocation the path names;
- a `node`, `agent`, `operator` or `plugin` level, or a management token;
- `IN_HANDLER`: the handler checks against what only the body or the state says (a job's
  namespace is the body's; the ACL endpoints' rules; the event stream's topics), through
  `require` and `identity` below, the token still resolved first.

A secret that resolves to nothing, or to an expired token, is refused on every guarded route
(403 `ACL token not found` / `ACL token expired`, Nomad's texts); a need not met is 403
`Permission denied`. A websocket is accepted and closed with 1008 instead (see
`refuse_websocket`). With ACLs disabled every identity is `ACL_DISABLED` and every need holds.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from yurt.runtime.api.request import ApiError
from yurt.runtime.server.acl.acl import Acl
from yurt.runtime.server.acl.identity import AclTokenError, Identity, TokenResolver
from yurt.runtime.server.acl.policy import NAMESPACE_CAPABILITIES
from yurt.runtime.server.namespaces import ALL_NAMESPACES, DEFAULT_NAMESPACE

WS_TOKEN_PROTOCOL: Final = b"x-nomad-token"
#: Where the resolved identity of a request is kept in its ASGI scope.
IDENTITY_KEY: Final = "yurt.identity"
#: The subprotocol the UI's sockets ask for beside the token (api/events.py `UI_SUBPROTOCOL`).
UI_SUBPROTOCOL: Final = "yurt-events"
PERMISSION_DENIED: Final = "Permission denied"


def subprotocol_token(offered: bytes) -> bytes:
    """The token a browser offers as the subprotocol `x-nomad-token.<base64url, unpadded>`."""
    for item in offered.split(b","):
        name = item.strip()
        if name.startswith(WS_TOKEN_PROTOCOL + b"."):
            encoded = name[len(WS_TOKEN_PROTOCOL) + 1:]
            try:
                return base64.urlsafe_b64decode(encoded + b"=" * (-len(encoded) % 4))
            except (binascii.Error, ValueError):
                return b""
    return b""


def request_secret(scope: Scope) -> str:
    """The secret a request carries (see the header), "" for none."""
    headers = dict(scope.get("headers", []))
    secret = headers.get(b"x-nomad-token", b"").strip()
    if not secret:
        scheme, _, value = headers.get(b"authorization", b"").partition(b" ")
        if scheme.lower() == b"bearer":
            secret = value.strip()
    if not secret and scope["type"] == "websocket":
        secret = subprotocol_token(headers.get(b"sec-websocket-protocol", b""))
    return bytes(secret).decode("latin-1")


def identity(conn: HTTPConnection | Scope) -> Identity:
    """The identity `guard` resolved for this request. A route reached without a guard is a
    bug, refused as such rather than taken as allowed."""
    scope = conn.scope if isinstance(conn, HTTPConnection) else conn
    found = scope.get(IDENTITY_KEY)
    if not isinstance(found, Identity):
        raise ApiError(500, "no identity resolved for this route (it has no declared need)")
    return found


def allowed(conn: HTTPConnection, check: Callable[[Acl], bool]) -> bool:
    """Whether the request's identity passes `check` (always, with ACLs disabled)."""
    acl = identity(conn).acl
    return acl is None or acl.is_management() or check(acl)


def require(conn: HTTPConnection, check: Callable[[Acl], bool]) -> None:
    """403 unless `allowed`."""
    if not allowed(conn, check):
        raise ApiError(403, PERMISSION_DENIED)


def require_namespace(conn: HTTPConnection, namespace: str, *ops: str) -> None:
    """403 unless one of `ops` is granted in `namespace`."""
    require(conn, lambda acl: acl.allow_namespace_operation_any_of(namespace, *ops))


def namespace_visible(conn: HTTPConnection, namespace: str, *ops: str) -> bool:
    """Whether an object of `namespace` may show to this request (a list's filter)."""
    return allowed(conn, lambda acl: acl.allow_namespace_operation_any_of(namespace, *ops))


# ---------------------------------------------------------------------- needs

#: What a need may look up besides the request: an allocation's namespace by ID or prefix
#: (None when there is no such allocation).
AllocNamespace = Callable[[str], str | None]


@dataclass(frozen=True)
class Need:
    """What a route requires (see the header). `check(acl, scope, alloc_namespace)`; None for
    `PUBLIC`. `text` is Nomad's "ACL Required" wording, for people and for the tests."""

    text: str
    check: Callable[[Acl, Scope, AllocNamespace], bool] | None
    #: A policy that meets the need in namespace `default`, and a broad one that does not
    #: ("": only a management token meets it, or nothing is checked): the route walk's
    #: tokens (tests/test_authz_routes.py).
    grants: str = ""
    denies: str = ""


_LEVELS: Final = ("node", "agent", "operator")


def _namespace_grants(ops: tuple[str, ...]) -> tuple[str, str]:
    """A policy granting the first of `ops` in `default`, and one granting every other
    namespace capability there (and every level), so nothing but `ops` is missing."""
    others = sorted(NAMESPACE_CAPABILITIES - set(ops) - {"deny"})
    levels = "".join(f'{kind} {{ policy = "write" }}\n' for kind in _LEVELS)
    return (f'namespace "default" {{ capabilities = ["{ops[0]}"] }}\n',
            f'namespace "default" {{ capabilities = {_hcl_list(others)} }}\n{levels}')


def _hcl_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def _query_namespace(scope: Scope) -> str:
    from urllib.parse import parse_qs

    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("namespace")
    return values[0] if values and values[0] else DEFAULT_NAMESPACE


def namespace_op(*ops: str) -> Need:
    """One of `ops` in the request's namespace (`*`: in any namespace)."""

    def check(acl: Acl, scope: Scope, _: AllocNamespace) -> bool:
        ns = _query_namespace(scope)
        if ns == ALL_NAMESPACES:
            return acl.allow_namespace_operation_any_of(ALL_NAMESPACES, *ops)
        return acl.allow_namespace_operation_any_of(ns, *ops)

    return Need(" or ".join(f"namespace:{op}" for op in ops), check, *_namespace_grants(ops))


def alloc_op(*ops: str, param: str = "id") -> Need:
    """One of `ops` in the namespace of the allocation named by the path parameter `param`.
    An allocation that does not exist is looked at in the request's namespace, so that its
    404 is only told to a token that may read there."""

    def check(acl: Acl, scope: Scope, alloc_namespace: AllocNamespace) -> bool:
        alloc_id = str(scope.get("path_params", {}).get(param, ""))
        ns = alloc_namespace(alloc_id) or _query_namespace(scope)
        return acl.allow_namespace_operation_any_of(ns, *ops)

    return Need(" or ".join(f"namespace:{op}" for op in ops) + " (the allocation's)", check,
                *_namespace_grants(ops))


def level(kind: str, wanted: str) -> Need:
    """`node`, `agent`, `operator` or `plugin` at `read` (or `list`, plugins) or `write`."""
    method = f"allow_{kind}_{wanted}"

    def check(acl: Acl, scope: Scope, _: AllocNamespace) -> bool:
        return bool(getattr(acl, method)())

    every_namespace = _hcl_list(sorted(NAMESPACE_CAPABILITIES - {"deny"}))
    others = "".join(f'{other} {{ policy = "write" }}\n' for other in _LEVELS if other != kind)
    below = {"write": "read", "read": "deny"}.get(wanted, "deny")
    return Need(f"{kind}:{wanted}", check, f'{kind} {{ policy = "{wanted}" }}\n',
                f'namespace "*" {{ capabilities = {every_namespace} }}\n{others}'
                f'{kind} {{ policy = "{below}" }}\n')


def _management(acl: Acl, scope: Scope, _: AllocNamespace) -> bool:
    return acl.is_management()


def _anything(acl: Acl, scope: Scope, _: AllocNamespace) -> bool:
    return True


PUBLIC: Final = Need("none", None)
MANAGEMENT: Final = Need("management", _management)
IN_HANDLER: Final = Need("checked by the handler", _anything)

#: A route's needs by method (`*`: every method the route takes).
Needs = Mapping[str, Need]


def guard(app: ASGIApp, needs: Needs, resolver: Callable[[], Awaitable[TokenResolver]],
          alloc_namespace: AllocNamespace) -> ASGIApp:
    """`app` behind its route's `needs` (see the header)."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method", "GET") if scope["type"] == "http" else "GET"
        if method == "HEAD":  # taken only where GET is, and answered as GET (app.py)
            method = "GET"
        need = needs.get(method) or needs.get("*")
        if need is None:  # a method the table does not declare: refused, never open
            await _deny(scope, receive, send, PERMISSION_DENIED)
            return
        if need.check is not None:
            try:
                ident = await (await resolver()).resolve(request_secret(scope))
            except AclTokenError as e:
                await _deny(scope, receive, send, str(e))
                return
            scope[IDENTITY_KEY] = ident
            acl = ident.acl
            if acl is not None and not acl.is_management() and \
                    not need.check(acl, scope, alloc_namespace):
                await _deny(scope, receive, send, PERMISSION_DENIED)
                return
        await app(scope, receive, send)

    return guarded


async def _deny(scope: Scope, receive: Receive, send: Send, text: str) -> None:
    if scope["type"] == "websocket":
        await refuse_websocket(scope, receive, send, text)
        return
    await PlainTextResponse(text, status_code=403)(scope, receive, send)


async def refuse_websocket(scope: Scope, receive: Receive, send: Send,
                           reason: str = PERMISSION_DENIED) -> None:
    """Accept, then close with 1008 (policy violation) before anything is sent. A handshake
    refused outright reaches a browser's script as a bare 1006 (the HTTP status is hidden
    from it), which also means "the agent is down"; 1008 tells the UI to ask for the token.
    The accept names the UI's subprotocol when offered: a browser drops an accept naming
    none of its offers, as 1006 again."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    offered = scope.get("subprotocols") or []
    chosen = UI_SUBPROTOCOL if UI_SUBPROTOCOL in offered else None
    await send({"type": "websocket.accept", "subprotocol": chosen, "headers": []})
    await send({"type": "websocket.close", "code": 1008, "reason": reason})

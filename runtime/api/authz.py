"""Who may call what: the token of every request resolved to an `Identity`, and each route's
declared need checked before its handler runs.

A request's secret is its `X-Nomad-Token` header, else `Authorization: Bearer <secret>`
(command/agent/http.go `parseToken`), else — a websocket from a browser, which cannot set
headers there — the subprotocol `x-nomad-token.<base64url>`. Never the query string: it ends
up in access logs, proxies and shell histories. No secret is the anonymous token.

Every route of the app is wrapped by `guard` with its `Need` (authz_table.py: one table, so a
route without a declared need is a failing test, tests/test_authz_routes.py). A need is one of:
- `PUBLIC`: no token is looked at (health, leader, the UI's static files, the JWKS);
- one of some namespace capabilities (`namespace_op`; `namespace_op_or_all`, one or all of
  others; `namespace_op_unless`, a set that a query flag narrows), in the request's
  `?namespace=` (`*`: granted when any namespace grants it; the lists then show only the
  namespaces granted, namespaces.py `in_namespace`; `wildcard_filters`: `*` refuses no one),
  or in the namespace of the allocation or deployment the path names (`object_op`: looked
  up in the state by the `ObjectNamespace` the app gives the guard), or in the namespace the
  path names (`path_namespace`);
- a `node`, `agent`, `operator` or `plugin` level, or a management token;
- `FILTERED`: any token that resolves; the answer shows only what it may read;
- `IN_HANDLER`: the handler checks against what only the body says (a job's namespace, a
  variable's path, a search's contexts, the ACL endpoints' rules), through `require` and
  `identity` below, the token still resolved first.
Each need but these last carries a policy that meets it and a broad one that does not
(`grants`, `denies`): the route walk's tokens.

A secret that resolves to nothing, or to an expired token, is refused on every guarded route
(403 `ACL token not found` / `ACL token expired`, Nomad's texts); a need not met is 403
`Permission denied`. A websocket is accepted and closed with 1008 instead (see
`refuse_websocket`). With ACLs disabled every identity is `ACL_DISABLED` and every need holds.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from starlette.datastructures import QueryParams
from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from yurt.runtime.api.request import ApiError
from yurt.runtime.lib.goparse import parse_go_bool
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

#: What a need may look up besides the request: the namespace of an object of the state by
#: kind (`alloc`, `deployment`) and ID or unique prefix; None when there is no such object.
ObjectNamespace = Callable[[str, str], str | None]


@dataclass(frozen=True)
class Need:
    """What a route requires (see the header). `check(acl, scope, object_namespace)`; None
    for `PUBLIC`. `text` is Nomad's "ACL Required" wording, for people and for the tests."""

    text: str
    check: Callable[[Acl, Scope, ObjectNamespace], bool] | None
    #: A policy that meets the need in namespace `default`, and a broad one that does not
    #: ("": only a management token meets it, or nothing is checked): the route walk's
    #: tokens (tests/test_authz_routes.py).
    grants: str = ""
    denies: str = ""


_LEVELS: Final = ("node", "agent", "operator")
_EVERY_LEVEL: Final = "".join(f'{kind} {{ policy = "write" }}\n' for kind in _LEVELS)


def _hcl_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in sorted(items)) + "]"


def namespace_policy(*caps: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """A policy granting `caps` in `namespace` and nothing else."""
    return f'namespace "{namespace}" {{ capabilities = {_hcl_list(caps)} }}\n'


def _every_namespace_capability_but(missing: Iterable[str]) -> str:
    """A policy granting, in `default`, every namespace capability except `missing` (and
    every level): the broad token a need on `missing` must still refuse."""
    return namespace_policy(*(NAMESPACE_CAPABILITIES - set(missing) - {"deny"})) + _EVERY_LEVEL


#: A client token that may do everything a policy can grant: every namespace capability in
#: every namespace, every level at write, every variable. Still not a management token.
BROAD_POLICY: Final = (
    f'namespace "*" {{\n  capabilities = {_hcl_list(NAMESPACE_CAPABILITIES - {"deny"})}\n'
    '  variables { path "*" { capabilities = ["write", "read", "list", "destroy"] } }\n}\n'
    + _EVERY_LEVEL + 'plugin { policy = "read" }\nnode_pool "*" { policy = "write" }\n')


def _query(scope: Scope) -> QueryParams:
    """The query as the handlers read it (Starlette's `request.query_params`: a repeated
    parameter is its last value), so that the guard checks the very namespace and flags the
    handler then acts on."""
    return QueryParams(scope.get("query_string", b""))


def _query_namespace(scope: Scope) -> str:
    return _query(scope).get("namespace") or DEFAULT_NAMESPACE


def _query_flag(scope: Scope, name: str) -> bool:
    """A boolean query parameter as Nomad parses it (Go's `strconv.ParseBool`, request.py
    `query_bool`); one that does not parse counts as set, the stricter reading (its handler
    answers it 400)."""
    value = _query(scope).get(name, "")
    if value == "":
        return False
    try:
        return parse_go_bool(value)
    except ValueError:
        return True


def namespace_rule(text: str, test: Callable[[Acl, str], bool], grants: str, denies: str, *,
                   wildcard_filters: bool = False) -> Need:
    """`test(acl, namespace)` on the request's namespace (`*`: Nomad's `AllowNsOp` reading,
    some namespace grants it). `wildcard_filters`: with `namespace=*` nothing is refused,
    the list shows what the token may read (e.g. nomad/service_registration_endpoint.go
    `listAllServiceRegistrations`)."""

    def check(acl: Acl, scope: Scope, _: ObjectNamespace) -> bool:
        ns = _query_namespace(scope)
        return (wildcard_filters and ns == ALL_NAMESPACES) or test(acl, ns)

    return Need(text, check, grants, denies)


def _any_of(ops: tuple[str, ...]) -> Callable[[Acl, str], bool]:
    return lambda acl, ns: acl.allow_namespace_operation_any_of(ns, *ops)


def _ops_text(ops: tuple[str, ...]) -> str:
    return " or ".join(f"namespace:{op}" for op in ops)


def namespace_op(*ops: str, wildcard_filters: bool = False) -> Need:
    """One of `ops` in the request's namespace (`*`: in any namespace; see
    `namespace_rule`). Its grants hold the first of `ops`."""
    return namespace_rule(_ops_text(ops), _any_of(ops), namespace_policy(ops[0]),
                          _every_namespace_capability_but(ops),
                          wildcard_filters=wildcard_filters)


def namespace_op_implied(ops: tuple[str, ...], implied_by: tuple[str, ...], *,
                         wildcard_filters: bool = False) -> Need:
    """`namespace_op(*ops)` for capabilities that others imply (acl/policy.go
    `expandNamespaceCapabilities`: host-volume-write grants host-volume-read): the broad token
    it must refuse lacks `implied_by` too."""
    return namespace_rule(_ops_text(ops), _any_of(ops), namespace_policy(ops[0]),
                          _every_namespace_capability_but((*ops, *implied_by)),
                          wildcard_filters=wildcard_filters)


def namespace_op_or_all(op: str, all_of: tuple[str, ...], *,
                        wildcard_filters: bool = False) -> Need:
    """`op`, or every one of `all_of`, in the request's namespace (nomad/scaling_endpoint.go:
    list-scaling-policies, or list-jobs and read-job)."""

    def test(acl: Acl, ns: str) -> bool:
        return acl.allow_namespace_operation(ns, op) or all(
            acl.allow_namespace_operation(ns, other) for other in all_of)

    return namespace_rule(f"namespace:{op}, or " + " and ".join(all_of), test,
                          namespace_policy(op),
                          _every_namespace_capability_but((op, all_of[-1])),
                          wildcard_filters=wildcard_filters)


def namespace_op_unless(flag: str, ops: tuple[str, ...], also: tuple[str, ...]) -> Need:
    """One of `ops`, or of `also` too when the query's boolean `flag` is not set, in the
    request's namespace (nomad/job_endpoint.go `Deregister`: submit-job or purge-job, and
    deregister-job only without `purge`). Its grants hold the first of `also`."""
    every = (*ops, *also)

    def check(acl: Acl, scope: Scope, _: ObjectNamespace) -> bool:
        wanted = ops if _query_flag(scope, flag) else every
        return acl.allow_namespace_operation_any_of(_query_namespace(scope), *wanted)

    return Need(f"{_ops_text(ops)}; without {flag}, also {_ops_text(also)}", check,
                namespace_policy(also[0]), _every_namespace_capability_but(every))


def object_op(kind: str, *ops: str, param: str = "id") -> Need:
    """One of `ops` in the namespace of the `kind` object the path parameter `param` names
    (not the request's: e.g. nomad/deployment_endpoint.go `Fail` checks the deployment's).
    An object that does not exist is looked at in the request's namespace, so that its 404
    is only told to a token that may act there."""

    def check(acl: Acl, scope: Scope, object_namespace: ObjectNamespace) -> bool:
        object_id = str(scope.get("path_params", {}).get(param, ""))
        ns = object_namespace(kind, object_id) or _query_namespace(scope)
        return acl.allow_namespace_operation_any_of(ns, *ops)

    return Need(f"{_ops_text(ops)} (the {kind}'s namespace)", check, namespace_policy(ops[0]),
                _every_namespace_capability_but(ops))


def alloc_op(*ops: str, param: str = "id") -> Need:
    """One of `ops` in the namespace of the allocation the path names (client/
    alloc_endpoint.go, fs_endpoint.go: `alloc.Namespace`)."""
    return object_op("alloc", *ops, param=param)


def deployment_op(*ops: str, param: str = "id") -> Need:
    """One of `ops` in the namespace of the deployment the path names."""
    return object_op("deployment", *ops, param=param)


def path_namespace(param: str) -> Need:
    """Some capability (not deny) in the namespace the path parameter `param` names
    (nomad/namespace_endpoint.go `GetNamespace`: `AllowNamespace`)."""

    def check(acl: Acl, scope: Scope, _: ObjectNamespace) -> bool:
        return acl.allow_namespace(str(scope.get("path_params", {}).get(param, "")))

    return Need("any capability in the namespace named", check,
                namespace_policy("list-jobs"),
                namespace_policy(*(NAMESPACE_CAPABILITIES - {"deny"}), namespace="other")
                + namespace_policy("deny") + _EVERY_LEVEL)


def level(kind: str, wanted: str) -> Need:
    """`node`, `agent`, `operator` or `plugin` at `read` (or `list`, plugins) or `write`."""
    method = f"allow_{kind}_{wanted}"

    def check(acl: Acl, scope: Scope, _: ObjectNamespace) -> bool:
        return bool(getattr(acl, method)())

    others = "".join(f'{other} {{ policy = "write" }}\n' for other in _LEVELS if other != kind)
    below = {"write": "read", "read": "deny"}.get(wanted, "deny")
    return Need(f"{kind}:{wanted}", check, f'{kind} {{ policy = "{wanted}" }}\n',
                namespace_policy(*(NAMESPACE_CAPABILITIES - {"deny"}), namespace="*")
                + others + f'{kind} {{ policy = "{below}" }}\n')


def _management(acl: Acl, scope: Scope, _: ObjectNamespace) -> bool:
    return acl.is_management()


def _anything(acl: Acl, scope: Scope, _: ObjectNamespace) -> bool:
    return True


PUBLIC: Final = Need("none", None)
MANAGEMENT: Final = Need("management", _management, denies=BROAD_POLICY)
#: The handler checks what only the body or the state says; the route walk gives each such
#: route its own policies and body (tests/test_authz_routes.py `IN_HANDLER_ROUTES`).
IN_HANDLER: Final = Need("checked by the handler", _anything)
#: Any token that resolves (the anonymous one too): the answer shows only what the token may
#: read, and refuses nothing (e.g. nomad/namespace_endpoint.go `ListNamespaces`).
FILTERED: Final = Need("none; the answer shows what the token may read", _anything)

#: A route's needs by method (`*`: every method the route takes).
Needs = Mapping[str, Need]


def guard(app: ASGIApp, needs: Needs, resolver: Callable[[], Awaitable[TokenResolver]],
          object_namespace: ObjectNamespace) -> ASGIApp:
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
                    not need.check(acl, scope, object_namespace):
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

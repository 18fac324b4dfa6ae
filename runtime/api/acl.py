"""/v1/acl/*: Nomad's ACL API (command/agent/acl_endpoint.go over nomad/acl_endpoint.go).

Shapes are Nomad's: policies and roles as stored (lists of policies drop `Rules`), tokens in
Nomad's JSON with RFC 3339 times (structs/acl_json.py; lists drop `SecretID`), a write of a
token or a role answers what was stored, a write or delete of a policy answers nothing. Every
endpoint answers 400 `ACL support disabled` when the agent's ACLs are off, the bootstrap too.

Who may call what, as Nomad's RPC handlers check it (each route's need is `IN_HANDLER` or
`PUBLIC` in authz_table.py, so the token is resolved and refused there when it cannot act):
- writes, deletes and the token list: a management token;
- the policy list, and a policy: a client token sees the policies it holds, directly or
  through its roles (`getPolicyAuthorizationFunc`); anyone may read `anonymous`;
- the role list, a role by ID or by name: a client token sees the roles it links to;
- `token/self`, and `token/<accessor>` of the caller's own token: any token (anonymous:
  Nomad's anonymous token); another's, or one that does not exist: management only;
- `token/onetime`: a stored token, for itself; `bootstrap` and `token/onetime/exchange`:
  no token (the secret is the credential).

The rules of the objects themselves (validation, what must exist, the bootstrap, one-time
tokens) are the store's (server/acl/state.py); its refusals keep their texts and statuses.
Secrets are never logged: no handler logs, and no refusal text carries one.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from yurt.runtime.api.authz import PERMISSION_DENIED, identity
from yurt.runtime.api.context import Context
from yurt.runtime.api.paging import by_create_index, by_id, nomad_json, paged_response
from yurt.runtime.api.request import ApiError, body_json, json_response
from yurt.runtime.server.acl.identity import Identity
from yurt.runtime.server.acl.validate import (
    AclRefused,
    policy_problems,
    refusal,
    role_problems,
)
from yurt.runtime.structs.acl import (
    ANONYMOUS_ACCESSOR,
    ANONYMOUS_POLICY,
    AclPolicy,
    AclRole,
    AclToken,
)
from yurt.runtime.structs.acl_json import one_time_to_json, token_from_json, token_to_json

if TYPE_CHECKING:  # the store's module loads behind the API (tests/test_import_weight.py)
    from yurt.runtime.server.state.objects_sqlite import Objects

_NS: Final = 1_000_000_000
#: nomad/structs/acl.go `AnonymousACLToken`: what `token/self` answers without a token.
ANONYMOUS_TOKEN: Final = AclToken(accessor_id=ANONYMOUS_ACCESSOR, name="Anonymous Token",
                                  policies=[ANONYMOUS_POLICY])

Endpoint = Callable[[Request], Awaitable[Response]]
Wrap = Callable[[Callable[[Context, Request], Awaitable[Response]]], Endpoint]


# ---------------------------------------------------------------------- shared

async def _store(ctx: Context) -> Objects:
    """The object store, once ACLs are known to be on (`aclDisabled` otherwise)."""
    if not ctx.agent.config.acl.enabled:
        raise ApiError(400, "ACL support disabled")
    return await ctx.agent.object_store()


def _management(request: Request) -> Identity:
    ident = identity(request)
    if not ident.is_management():
        raise ApiError(403, PERMISSION_DENIED)
    return ident


def _refused(e: AclRefused) -> ApiError:
    return ApiError(e.status, e.message)


def _empty() -> Response:
    return Response(status_code=200)


def _convert(body: dict[str, Any], kind: type[Any]) -> Any:
    try:
        return msgspec.convert(body, kind)
    except msgspec.ValidationError as e:
        raise ApiError(400, str(e)) from None


async def _held_policies(store: Objects, ident: Identity) -> set[str]:
    """nomad/acl_endpoint.go `getPoliciesForIdentity`: the token's policies and those of its
    roles that exist (the anonymous token holds `anonymous`)."""
    token = ident.token
    if token is None:
        return {ANONYMOUS_POLICY}
    names = set(token.policies)
    roles = await store.acl_roles_by_id([link.id for link in token.roles])
    linked = {link.name for role in roles for link in role.policies}
    names |= {p.name for p in await store.acl_policies_named(linked)}
    return names


def _policy_stub(policy: AclPolicy) -> dict[str, Any]:
    return {"Name": policy.name, "Description": policy.description, "JobACL": policy.job_acl,
            "CreateIndex": policy.create_index, "ModifyIndex": policy.modify_index}


# ---------------------------------------------------------------------- bootstrap

async def bootstrap(ctx: Context, request: Request) -> Response:
    store = await _store(ctx)
    body = await body_json(request)
    secret = body.get("BootstrapSecret") or ""
    if not isinstance(secret, str):
        raise ApiError(400, "failed to decode request body: BootstrapSecret must be a string")
    try:
        token = await store.acl_bootstrap(secret)
    except AclRefused as e:
        raise _refused(e) from None
    return json_response(token_to_json(token))


# ---------------------------------------------------------------------- policies

async def policies(ctx: Context, request: Request) -> Response:
    store = await _store(ctx)
    ident = identity(request)
    found = await store.acl_policies(request.query_params.get("prefix", ""))
    if not ident.is_management():
        held = await _held_policies(store, ident)
        found = [p for p in found if p.name in held]
    return json_response([_policy_stub(p) for p in found])


async def policy(ctx: Context, request: Request) -> Response:
    name = request.path_params["name"]
    if request.method == "GET":
        if name == "self":  # command/agent/acl_endpoint.go `aclSelfPolicy`
            return await policies(ctx, request)
        store = await _store(ctx)
        ident = identity(request)
        if name != ANONYMOUS_POLICY and not ident.is_management() and \
                name not in await _held_policies(store, ident):
            raise ApiError(403, PERMISSION_DENIED)
        found = await store.acl_policy(name)
        if found is None:
            raise ApiError(404, "ACL policy not found")
        return json_response(found)
    store = await _store(ctx)
    _management(request)
    if request.method == "DELETE":
        await store.delete_acl_policy(name)
        return _empty()
    written: AclPolicy = _convert(await body_json(request), AclPolicy)
    if written.name != name:
        raise ApiError(400, "ACL policy name does not match request path")
    problems = policy_problems(written)
    if problems:
        raise _refused(refusal("policy", problems))
    await store.put_acl_policy(msgspec.structs.replace(written, create_index=0,
                                                       modify_index=0))
    return _empty()


# ---------------------------------------------------------------------- tokens

async def tokens(ctx: Context, request: Request) -> Response:
    store = await _store(ctx)
    _management(request)
    prefix = request.query_params.get("prefix", "")
    found = await store.acl_tokens(prefix)
    # nomad/acl_endpoint.go `ListTokens`: by create index and accessor ID ("<CreateIndex>.<ID>"
    # tokens), by accessor ID with a prefix; `?reverse=true` flips the order. The filter sees
    # the stub: a secret is never something a filter can probe.
    found = sorted(found, key=(lambda t: t.accessor_id) if prefix
                   else (lambda t: (t.create_index, t.accessor_id)))
    tokens_by = (by_id(lambda t: t.accessor_id) if prefix
                 else by_create_index(lambda t: t.create_index, lambda t: t.accessor_id))
    return paged_response(request, found, tokens_by, reversible=True,
                          subject=lambda t: nomad_json(token_to_json(t, stub=True)),
                          shown=lambda page_tokens: [token_to_json(t, stub=True)
                                                     for t in page_tokens])


async def token_create(ctx: Context, request: Request) -> Response:
    return await _token_upsert(ctx, request, "")


async def token_self(ctx: Context, request: Request) -> Response:
    store = await _store(ctx)
    token = identity(request).token
    if token is None:
        return json_response(token_to_json(ANONYMOUS_TOKEN))
    if token.create_index:  # stored: read again, for its roles' current names
        fresh = await store.acl_token_by_secret(token.secret_id)
        if fresh is None:
            raise ApiError(404, "ACL token not found")
        token = fresh
    return json_response(token_to_json(token))


async def token_item(ctx: Context, request: Request) -> Response:
    accessor = request.path_params["accessor"]
    if accessor in ("self", "onetime"):  # routes of their own (Nomad's exact paths): a
        raise ApiError(405, "Method Not Allowed")  # method they do not take ends here
    if request.method == "GET":
        store = await _store(ctx)
        ident = identity(request)
        found = await store.acl_token(accessor)
        # nomad/acl_endpoint.go `GetToken`: a client token may read itself only, and learns
        # nothing of tokens that do not exist.
        own = found is not None and ident.token is not None and hmac.compare_digest(
            found.secret_id.encode(), ident.token.secret_id.encode())
        if not ident.is_management() and not own:
            raise ApiError(403, PERMISSION_DENIED)
        if found is None:
            raise ApiError(404, "ACL token not found")
        return json_response(token_to_json(found))
    if request.method == "DELETE":
        store = await _store(ctx)
        _management(request)
        try:
            await store.delete_acl_token(accessor)
        except AclRefused as e:
            raise _refused(e) from None
        return _empty()
    return await _token_upsert(ctx, request, accessor)


async def _token_upsert(ctx: Context, request: Request, accessor: str) -> Response:
    store = await _store(ctx)
    _management(request)
    try:
        token = token_from_json(await body_json(request))
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    if accessor and token.accessor_id != accessor:
        raise ApiError(400, "ACL token accessor does not match request path")
    settings = ctx.agent.config.acl
    try:
        stored = await store.put_acl_token(
            msgspec.structs.replace(token, create_index=0, modify_index=0),
            min_ttl_ns=int(settings.token_min_expiration_ttl * _NS),
            max_ttl_ns=int(settings.token_max_expiration_ttl * _NS))
    except AclRefused as e:
        raise _refused(e) from None
    return json_response(token_to_json(stored))


# ---------------------------------------------------------------------- one-time tokens

async def one_time(ctx: Context, request: Request) -> Response:
    store = await _store(ctx)
    token = identity(request).token
    if token is None:  # nomad/acl_endpoint.go `UpsertOneTimeToken`: for one's own token
        raise ApiError(403, PERMISSION_DENIED)
    try:
        ott = await store.create_one_time_token(token.accessor_id)
    except AclRefused as e:
        raise _refused(e) from None
    return json_response({"OneTimeToken": one_time_to_json(ott), "Index": ott.create_index})


async def one_time_exchange(ctx: Context, request: Request) -> Response:
    store = await _store(ctx)
    secret = (await body_json(request)).get("OneTimeSecretID")
    if not isinstance(secret, str) or not secret:
        raise ApiError(400, "missing OneTimeSecretID")
    try:
        token = await store.exchange_one_time_token(secret)
    except AclRefused as e:
        raise _refused(e) from None
    return json_response({"Token": token_to_json(token)})


# ---------------------------------------------------------------------- roles

def _linked(ident: Identity, test: Callable[[str, str], bool]) -> bool:
    """Whether the caller's token links to a role `test(id, name)` picks."""
    token = ident.token
    return token is not None and any(test(link.id, link.name) for link in token.roles)


async def roles(ctx: Context, request: Request) -> Response:
    store = await _store(ctx)
    ident = identity(request)
    found = await store.acl_roles(request.query_params.get("prefix", ""))
    if not ident.is_management():
        linked = {link.id for link in ident.token.roles} if ident.token is not None else set()
        found = [r for r in found if r.id in linked]
    return json_response(found)


async def role_create(ctx: Context, request: Request) -> Response:
    return await _role_upsert(ctx, request, "")


async def role_item(ctx: Context, request: Request) -> Response:
    role_id = request.path_params["id"]
    if request.method == "GET":
        store = await _store(ctx)
        ident = identity(request)
        if not ident.is_management() and not _linked(ident, lambda i, _: i == role_id):
            raise ApiError(403, PERMISSION_DENIED)
        return _role_or_404(await store.acl_role(role_id))
    if request.method == "DELETE":
        store = await _store(ctx)
        _management(request)
        try:
            await store.delete_acl_role(role_id)
        except AclRefused as e:
            raise _refused(e) from None
        return _empty()
    return await _role_upsert(ctx, request, role_id)


async def role_by_name(ctx: Context, request: Request) -> Response:
    name = request.path_params["name"]
    store = await _store(ctx)
    ident = identity(request)
    if not ident.is_management() and not _linked(ident, lambda _, n: n == name):
        raise ApiError(403, PERMISSION_DENIED)
    return _role_or_404(await store.acl_role_by_name(name))


def _role_or_404(role: AclRole | None) -> Response:
    if role is None:
        raise ApiError(404, "ACL role not found")
    return json_response(role)


async def _role_upsert(ctx: Context, request: Request, role_id: str) -> Response:
    store = await _store(ctx)
    _management(request)
    role: AclRole = _convert(await body_json(request), AclRole)
    if role_id and role.id != role_id:
        raise ApiError(400, "ACL role ID does not match request path")
    problems = role_problems(role)
    if problems:
        raise _refused(refusal("role", problems))
    try:
        stored = await store.put_acl_role(msgspec.structs.replace(role, create_index=0,
                                                                  modify_index=0))
    except AclRefused as e:
        raise _refused(e) from None
    return json_response(stored)


# ---------------------------------------------------------------------- routes

WRITE: Final = ["PUT", "POST"]


def acl_routes(wrap: Wrap) -> list[BaseRoute]:
    """Every /v1/acl/* route, its handler wrapped by `wrap` (app.py's `h`). The fixed paths
    come before the ones that take a parameter (`token/self` is not an accessor)."""
    return [
        Route("/v1/acl/bootstrap", wrap(bootstrap), methods=WRITE),
        Route("/v1/acl/policies", wrap(policies), methods=["GET"]),
        Route("/v1/acl/policy/{name}", wrap(policy), methods=["GET", *WRITE, "DELETE"]),
        Route("/v1/acl/tokens", wrap(tokens), methods=["GET"]),
        Route("/v1/acl/token", wrap(token_create), methods=WRITE),
        Route("/v1/acl/token/self", wrap(token_self), methods=["GET"]),
        Route("/v1/acl/token/onetime", wrap(one_time), methods=WRITE),
        Route("/v1/acl/token/onetime/exchange", wrap(one_time_exchange), methods=WRITE),
        Route("/v1/acl/token/{accessor}", wrap(token_item), methods=["GET", *WRITE, "DELETE"]),
        Route("/v1/acl/roles", wrap(roles), methods=["GET"]),
        Route("/v1/acl/role", wrap(role_create), methods=WRITE),
        Route("/v1/acl/role/name/{name}", wrap(role_by_name), methods=["GET"]),
        Route("/v1/acl/role/{id}", wrap(role_item), methods=["GET", *WRITE, "DELETE"]),
    ]

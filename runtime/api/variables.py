"""/v1/vars and /v1/var/<path>: Nomad Variables, items sealed at rest.

Shapes and statuses are Nomad's (command/agent/variable_endpoint.go): lists are
`VariableMetadata` (never items), sorted by namespace then path, `?namespace=*` for all; a read
is the `Variable` with its items, 404 `variable not found`; a write answers the stored variable
(200), a delete 204; `?cas=N` makes either a check-and-set on ModifyIndex, whose conflict is a
409 carrying what is stored, its items only to a token that may read it (server/state/
objects_sqlite.py and server/variables.py hold the rules). The token needs, on the path, read
to read, write to write, destroy to delete; a list shows the paths it may list.

A write's namespace is the body's `Namespace`, else `?namespace=`, else `default`; its path is
the URL's. The namespace need not exist: Nomad's Variables.Apply and its state store's
varSetTxn check none (only Enterprise quotas look at it), so neither does yurt. Nomad
answers an invalid path or item set with a 500 and the validation text; yurt keeps the text
and answers 400, a 5xx here being a bug. One more difference: rewriting a variable with the
items it already has answers that variable, where Nomad answers `null`. Nomad's variable
locks (`?lock-acquire`, `?lock-renew`, `?lock-release`) are api/varlocks.py's; a plain write or
delete of a variable whose lock is on answers 409.
"""

from __future__ import annotations

from functools import partial

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.authz import allowed, require
from yurt.runtime.api.context import Context
from yurt.runtime.api.namespaces import request_namespace
from yurt.runtime.api.paging import by_namespace_id, paged_response
from yurt.runtime.api.request import ApiError, body_json, json_response, query_cas
from yurt.runtime.api.varlocks import handle as handle_lock
from yurt.runtime.api.varlocks import lock_operation, refuse_if_locked
from yurt.runtime.api.varlocks import shown as shown_with_lock
from yurt.runtime.server.acl.acl import Acl
from yurt.runtime.server.namespaces import ALL_NAMESPACES
from yurt.runtime.server.variables import Conflict, items_error, path_error
from yurt.runtime.structs.variables import Variable


def _namespace(request: Request) -> str:
    namespace = request_namespace(request)
    if namespace == ALL_NAMESPACES:
        raise ApiError(400, 'can not target wildcard ("*")namespace')
    return namespace


def _require_path(request: Request, namespace: str, path: str, op: str) -> None:
    """nomad/variables_endpoint.go `handleMixedAuthEndpoint`: `op` on `path` in `namespace`."""
    require(request, lambda acl: acl.allow_variable_operation(namespace, path, op))


def _conflict(request: Request, conflict: Conflict) -> Response:
    """409 with what is stored: its items only to a token that may read it
    (nomad/variables_endpoint.go `makeVariablesApplyResponse`: otherwise redacted)."""
    current = conflict.current
    if not allowed(request, lambda acl: acl.allow_variable_operation(
            current.namespace, current.path, "read")):
        current = msgspec.structs.replace(current, items=None)
    return json_response(current, status=409)


async def variables(ctx: Context, request: Request) -> Response:
    namespace = request_namespace(request)
    prefix = request.query_params.get("prefix", "")
    store = await ctx.agent.object_store()
    found = await store.variables(None if namespace == ALL_NAMESPACES else namespace, prefix)
    # nomad/variables_endpoint.go `List`: the variables whose path the token may list, by
    # namespace and path ("<namespace>.<path>" tokens).
    listed = sorted((v for v in found if allowed(request, partial(
        Acl.allow_variable_operation, ns=v.namespace, path=v.path, op="list"))),
        key=lambda v: (v.namespace, v.path))
    return paged_response(request, listed, by_namespace_id(lambda v: v.namespace,
                                                           lambda v: v.path))


async def variable(ctx: Context, request: Request) -> Response:
    path = request.path_params["path"]
    if not path:
        raise ApiError(400, "missing variable path")
    if request.method == "GET":
        _require_path(request, _namespace(request), path, "read")
        store = await ctx.agent.object_store()
        found = await store.variable(_namespace(request), path)
        if found is None:
            raise ApiError(404, "variable not found")
        return json_response(shown_with_lock(request, store, found))
    if request.method == "DELETE":
        return await _delete(ctx, request, path)
    return await _put(ctx, request, path)


async def _put(ctx: Context, request: Request, path: str) -> Response:
    operation = lock_operation(request)
    if operation is not None:  # ?lock-acquire, ?lock-renew, ?lock-release: api/varlocks.py
        return await handle_lock(request, await ctx.agent.object_store(),
                                 _namespace(request), path, operation)
    body = await body_json(request)
    items = body.get("Items")
    if not items:
        raise ApiError(400, "variable missing required Items object")
    if not isinstance(items, dict) or not all(isinstance(v, str) for v in items.values()):
        raise ApiError(400, "json: cannot unmarshal Items: every item must be a string")
    namespace = body.get("Namespace") or _namespace(request)
    if not isinstance(namespace, str):
        raise ApiError(400, "json: cannot unmarshal Namespace: must be a string")
    if namespace == ALL_NAMESPACES:
        raise ApiError(400, 'can not target wildcard ("*")namespace')
    _require_path(request, namespace, path, "write")
    why = path_error(path) or items_error(items)
    if why is not None:
        raise ApiError(400, why)
    cas = query_cas(request, "can not parse cas", empty_is_absent=True)
    refuse_if_locked(await ctx.agent.object_store(), namespace, path)
    stored = await (await ctx.agent.object_store()).put_variable(
        Variable(namespace=namespace, path=path, items=items), cas)
    if isinstance(stored, Conflict):
        return _conflict(request, stored)
    return json_response(stored)


async def _delete(ctx: Context, request: Request, path: str) -> Response:
    _require_path(request, _namespace(request), path, "destroy")
    cas = query_cas(request, "can not parse cas", empty_is_absent=True)
    refuse_if_locked(await ctx.agent.object_store(), _namespace(request), path)
    conflict = await (await ctx.agent.object_store()).delete_variable(
        _namespace(request), path, cas)
    if conflict is not None:
        return _conflict(request, conflict)
    return Response(status_code=204)

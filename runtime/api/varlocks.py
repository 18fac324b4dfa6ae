"""`PUT /v1/var/<path>?lock-acquire|lock-renew|lock-release`: Nomad's variable locks
(command/agent/variable_endpoint.go `variableLockOperation`, nomad/variables_endpoint.go
`RenewLock` and `Apply` with `VarOpLockAcquire`/`VarOpLockRelease`).

Shapes are Nomad's: the body is a `Variable` whose `Lock` is `{ID, TTL, LockDelay}` (Go
duration strings, 15s each by default); acquire answers the variable with its `Lock` (the new
ID the holder renews and releases with), renew and release its metadata; a lock held by
another is a 409 whose body is the variable's zero value (namespace and path, never items).
The token needs `write` on the path for all three, as Nomad's; a read shows a variable's
`Lock` (its holder's ID included) to a management token only (`shown`).

Acquiring creates the variable if it does not exist (with the body's items, possibly none:
Nomad's `ValidateForLock` allows an empty one); on an existing variable it writes the body's
items when it carries some and keeps the stored ones otherwise (Nomad overwrites them with
none). The lock itself is in the embedded server's `LockTable` (runtime/server/varlocks.py),
in memory; a cluster's servers share no such table, so there the operations answer 501.
"""

from __future__ import annotations

import weakref
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.authz import allowed, require
from yurt.runtime.api.request import ApiError, body_json, json_response
from yurt.runtime.lib.durations import format_duration, parse_duration
from yurt.runtime.server.state.objects_sqlite import Objects, ObjectStore
from yurt.runtime.server.variables import Conflict, path_error
from yurt.runtime.server.varlocks import (
    VAR_IS_LOCKED,
    VAR_NOT_FOUND,
    HeldLock,
    LockTable,
    lock_error,
)
from yurt.runtime.structs.variables import Variable

OPERATIONS = ("lock-acquire", "lock-renew", "lock-release")
_DEFAULT_NS = 15 * 1_000_000_000  # api/locks.go `DefaultLockTTL`, `DefaultLockDelay`
_tables: weakref.WeakKeyDictionary[ObjectStore, LockTable] = weakref.WeakKeyDictionary()


def lock_operation(request: Request) -> str | None:
    """The lock operation the query asks for (command/agent/variable_endpoint.go
    `getLockOperation`); 400 for more than one."""
    asked = [op for op in OPERATIONS if op in request.query_params]
    if len(asked) > 1:
        raise ApiError(400, "multiple lock operations")
    return asked[0] if asked else None


def table_of(store: Objects) -> LockTable | None:
    """The store's lock table; None for a cluster's store (no shared table)."""
    if not isinstance(store, ObjectStore):
        return None
    table = _tables.get(store)
    if table is None:
        table = _tables[store] = LockTable()
    return table


def _lock_json(lock: HeldLock) -> dict[str, str]:
    return {"ID": lock.id, "TTL": format_duration(lock.ttl_ns),
            "LockDelay": format_duration(lock.delay_ns)}


def _with_lock(var: Variable, lock: HeldLock | None, *, items: bool = True) -> dict[str, Any]:
    shown: dict[str, Any] = msgspec.to_builtins(var if items else var.metadata())
    shown["Lock"] = _lock_json(lock) if lock is not None else None
    return shown


def _zero(namespace: str, path: str) -> Response:
    return json_response(_with_lock(Variable(namespace=namespace, path=path), None,
                                    items=False), status=409)


def _duration(lock: dict[str, Any], name: str) -> int:
    text = lock.get(name) or ""
    if not text:
        return _DEFAULT_NS
    if not isinstance(text, str):
        raise ApiError(400, f"json: cannot unmarshal Lock.{name}: must be a duration string")
    try:
        return parse_duration(text)
    except ValueError as e:
        raise ApiError(400, f"Lock.{name}: {e}") from None


async def handle(request: Request, store: Objects, namespace: str, path: str,
                 operation: str) -> Response:
    table = table_of(store)
    if table is None:
        raise ApiError(501, "variable locks are kept by the embedded server: a cluster's "
                            "servers do not support them yet")
    require(request, lambda acl: acl.allow_variable_operation(namespace, path, "write"))
    if why := path_error(path):
        raise ApiError(400, why)
    body = await body_json(request)
    lock = body.get("Lock") or {}
    if not isinstance(lock, dict):
        raise ApiError(400, "json: cannot unmarshal Lock: must be an object")
    holder = lock.get("ID") or ""
    if not isinstance(holder, str):
        raise ApiError(400, "json: cannot unmarshal Lock.ID: must be a string")
    if operation == "lock-acquire":
        return await _acquire(table, store, body, namespace, path, lock, holder)
    existing = await store.variable(namespace, path)
    if existing is None:
        raise ApiError(404, VAR_NOT_FOUND)
    if operation == "lock-renew":
        renewed = table.renew(namespace, path, holder)
        if isinstance(renewed, str):
            raise ApiError(409, renewed)
        return json_response(_with_lock(existing, renewed, items=False))
    if not holder:
        raise ApiError(400, "missing lock information")  # nomad `errMissingLockInfo`
    if body.get("Items"):
        raise ApiError(400, "lock release operation doesn't take variable items")
    why = table.release(namespace, path, holder)
    if why == VAR_IS_LOCKED:
        return _zero(namespace, path)
    if why is not None:
        raise ApiError(409, why)
    return json_response(_with_lock(existing, None, items=False))


async def _acquire(table: LockTable, store: Objects, body: dict[str, Any], namespace: str,
                   path: str, lock: dict[str, Any], holder: str) -> Response:
    ttl, delay = _duration(lock, "TTL"), _duration(lock, "LockDelay")
    if why := lock_error(ttl, delay):
        raise ApiError(400, why)
    items = body.get("Items") or {}
    if not isinstance(items, dict) or not all(isinstance(v, str) for v in items.values()):
        raise ApiError(400, "json: cannot unmarshal Items: every item must be a string")
    held = table.acquire(namespace, path, ttl, delay, holder)
    if held is None:
        return _zero(namespace, path)
    try:
        existing = await store.variable(namespace, path)
        if existing is None or items:
            stored = await store.put_variable(
                Variable(namespace=namespace, path=path, items=items), None)
            if isinstance(stored, Conflict):  # never with cas None; a type's due
                raise ApiError(409, VAR_IS_LOCKED)
            existing = stored
    except BaseException:
        table.release(namespace, path, held.id)  # not written: not held either
        raise
    return json_response(_with_lock(existing, held))


def refuse_if_locked(store: Objects, namespace: str, path: str) -> None:
    """A plain write or delete of a variable someone holds the lock of: 409, as Nomad's
    state store refuses it (`errVarIsLocked`)."""
    table = table_of(store)
    if table is not None and table.current(namespace, path) is not None:
        raise ApiError(409, VAR_IS_LOCKED)


def shown(request: Request, store: Objects, var: Variable) -> Variable | dict[str, Any]:
    """`var` as a read answers it: with its `Lock` to a management token (Nomad's
    variables_endpoint.go `Read`: only management sees a lock; with ACLs off, everyone)."""
    table = table_of(store)
    lock = table.current(var.namespace, var.path) if table is not None else None
    if lock is None or not allowed(request, lambda _acl: False):
        return var
    return _with_lock(var, lock)

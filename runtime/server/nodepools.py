"""Nomad node pools (nomad/structs/node_pool.go): the object, its validation, why an upsert
or a delete is refused, and its table.

Two pools are built in and always exist: `all` (every node; a job in it places anywhere) and
`default` (where nodes and jobs are unless they say otherwise). Neither is stored, neither can
be modified or deleted (nomad/node_pool_endpoint.go `UpsertNodePools`,
nomad/state/state_store_node_pools.go `deleteNodePoolTxn`). A
pool a node registers in exists from then on, as Nomad's node registration creates it: the
list here adds the pools of the known nodes (`with_node_pools`). A pool that has nodes or
non-terminal jobs cannot be deleted; the refusal is Nomad's multierror text.

Scheduler configuration per pool is Enterprise: `SchedulerConfiguration` is kept as given and
changes nothing.

The SQL helpers take an open connection and run inside the caller's transaction (as
server/namespaces.py's do: server/state/objects_sqlite.py owns the file, objects_etcd.py loads
the rows into a private database); nothing here does I/O of its own.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from yurt.runtime.server.namespaces import go_quote, multierror

NODE_POOL_ALL: Final = "all"
NODE_POOL_DEFAULT: Final = "default"
BUILT_IN: Final = {
    NODE_POOL_ALL: "Node pool with all nodes in the cluster.",
    NODE_POOL_DEFAULT: "Default node pool.",
}
MAX_DESCRIPTION: Final = 256
_VALID_NAME: Final = re.compile(r"[a-zA-Z0-9\-_]{1,128}")
_NAME_REGEX_TEXT: Final = "^[a-zA-Z0-9-_]{1,128}$"


class NodePool(msgspec.Struct, rename="pascal", kw_only=True):
    """Nomad's `api.NodePool`."""

    name: str
    description: str = ""
    meta: dict[str, str] | None = None
    scheduler_configuration: dict[str, Any] | None = None
    create_index: int = 0
    modify_index: int = 0


def built_in(name: str) -> NodePool:
    return NodePool(name=name, description=BUILT_IN[name], create_index=1, modify_index=1)


def name_problem(name: str) -> str | None:
    """Nomad's `ValidateNodePoolName` text, or None."""
    if _VALID_NAME.fullmatch(name):
        return None
    return f"invalid name {go_quote(name)}, must match regex {_NAME_REGEX_TEXT}"


def upsert_refusal(pool: NodePool) -> str | None:
    """Why Nomad's `UpsertNodePools` answers 400 for `pool`, or None."""
    errors = []
    if (why := name_problem(pool.name)) is not None:
        errors.append(why)
    if len(pool.description) > MAX_DESCRIPTION:
        errors.append(f"description longer than {MAX_DESCRIPTION}")
    if errors:
        return f"invalid node pool {go_quote(pool.name)}: {multierror(errors)}"
    if pool.name in BUILT_IN:
        return f"modifying node pool {go_quote(pool.name)} is not allowed"
    return None


def delete_refusal(name: str, *, live_jobs: bool, nodes: bool, exists: bool) -> str | None:
    """Why Nomad's `DeleteNodePools` refuses `name`, or None when it may go: first the
    pool's use (a multierror), then the state store's refusals; Nomad answers each with 500
    (an RPC error without a code)."""
    errors = []
    if live_jobs:
        errors.append(f"node pool {go_quote(name)} has non-terminal jobs in regions: [global]")
    if nodes:
        errors.append(f"node pool {go_quote(name)} has nodes in regions: [global]")
    if errors:
        return multierror(errors)
    if not exists:
        return f"node pool {name} not found"
    if name in BUILT_IN:
        return f"deleting node pool {go_quote(name)} is not allowed"
    return None


def with_node_pools(stored: list[NodePool], node_pools: Iterable[str]) -> list[NodePool]:
    """`stored` and the pools nodes registered in (created at index 1 when not stored:
    Nomad creates them when the node registers), sorted by name."""
    by_name = {p.name: p for p in stored}
    for name in node_pools:
        if name and name not in by_name:
            by_name[name] = (built_in(name) if name in BUILT_IN
                             else NodePool(name=name, create_index=1, modify_index=1))
    return [by_name[n] for n in sorted(by_name)]


# ---------------------------------------------------------------------- table

SCHEMA: Final = ("CREATE TABLE IF NOT EXISTS node_pools (name TEXT PRIMARY KEY, "
                 "value TEXT NOT NULL)")
_decode = msgspec.json.Decoder(NodePool)


def list_all(conn: sqlite3.Connection) -> list[NodePool]:
    """Every stored pool and the built-in ones, sorted by name."""
    stored = [_decode.decode(v) for (v,) in conn.execute("SELECT value FROM node_pools")]
    return with_node_pools(stored, BUILT_IN)


def get(conn: sqlite3.Connection, name: str) -> NodePool | None:
    if name in BUILT_IN:
        return built_in(name)
    row = conn.execute("SELECT value FROM node_pools WHERE name = ?", (name,)).fetchone()
    return _decode.decode(row[0]) if row is not None else None


def put(conn: sqlite3.Connection, pool: NodePool, index: int) -> NodePool:
    """Create or update `pool` at `index` (CreateIndex kept on update)."""
    existing = get(conn, pool.name)
    stored = msgspec.structs.replace(
        pool, create_index=existing.create_index if existing is not None else index,
        modify_index=index)
    conn.execute("INSERT INTO node_pools (name, value) VALUES (?, ?) ON CONFLICT (name) "
                 "DO UPDATE SET value = excluded.value",
                 (pool.name, msgspec.json.encode(stored).decode()))
    return stored


def delete(conn: sqlite3.Connection, name: str) -> None:
    conn.execute("DELETE FROM node_pools WHERE name = ?", (name,))

"""Nomad Variables: Nomad's path and size rules, check-and-set, and their table (the objects,
`Variable` and `VariableMetadata`, are in structs/variables.py).

A variable is a map of string items at a path in a namespace. Its items are sealed with the
server's root key (keyring.py) before they reach the table, with the namespace and path as the
associated data: the table holds the metadata (indexes and times, which lists show) in clear
and the items only as ciphertext.

Writes follow Nomad's state store exactly (`varSetCASTxn`, `svDeleteCASTxn`):
- set: a new variable takes the write's index as CreateIndex and ModifyIndex; an update keeps
  CreateIndex and CreateTime; an update that changes no item changes nothing, indexes included.
- `cas=N` set: N=0 means "must not exist yet"; otherwise the stored ModifyIndex must be N. A
  mismatch is a conflict that carries the stored variable, or, when none is stored, a zero
  value with only the namespace and path.
- delete: deleting what does not exist succeeds. `cas=0` delete succeeds only if nothing is
  stored; `cas=N` needs the stored ModifyIndex to be N (a missing variable conflicts).

The SQL helpers run inside the caller's transaction (server/state/objects_sqlite.py owns the
file and the index).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import msgspec

from yurt.runtime.server.namespaces import go_quote
from yurt.runtime.structs.variables import Variable, VariableMetadata

if TYPE_CHECKING:
    # Only a type: the API imports this module, and the agent binds its API before it loads
    # cryptography (see tests/test_import_weight.py).
    from yurt.runtime.server.keyring import Keyring

#: Nomad's limit on a variable's items: the bytes of every key and value together.
MAX_ITEMS_BYTES: Final = 65536
_VALID_PATH: Final = re.compile(r"[a-zA-Z0-9\-_~/]{1,128}")


def path_error(path: str) -> str | None:
    """Nomad's `validatePath`: its message, or None when `path` may hold a variable."""
    if not path:
        return "variable requires path"
    if not _VALID_PATH.fullmatch(path):
        return f"invalid path {go_quote(path)}"
    parts = path.split("/")
    if parts[0] != "nomad":
        return None
    if len(parts) == 1:
        return ('"nomad" is a reserved top-level directory path, but you may write variables '
                'to "nomad/jobs", "nomad/job-templates", or below')
    if parts[1] == "jobs" or (parts[1] == "job-templates" and len(parts) == 3):
        return None
    if parts[1] == "job-templates":
        return ('"nomad/job-templates" is a reserved directory path, but you may write '
                'variables at the level below it, for example, '
                '"nomad/job-templates/template-name"')
    return ('only paths at "nomad/jobs" or "nomad/job-templates" and below are valid paths '
            'under the top-level "nomad" directory')


def items_error(items: dict[str, str]) -> str | None:
    if not items:
        return "empty variables are invalid"
    size = sum(len(k.encode()) + len(v.encode()) for k, v in items.items())
    if size > MAX_ITEMS_BYTES:
        return "variables are limited to 64KiB in total size"
    return None


@dataclass(frozen=True)
class Conflict:
    """A check-and-set that did not hold: what is stored (a zero value when nothing is)."""

    current: Variable


# ---------------------------------------------------------------------- table

SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS variables (namespace TEXT NOT NULL, path TEXT NOT NULL, "
    "create_index INTEGER NOT NULL, modify_index INTEGER NOT NULL, "
    "create_time INTEGER NOT NULL, modify_time INTEGER NOT NULL, key_id TEXT NOT NULL, "
    "data BLOB NOT NULL, PRIMARY KEY (namespace, path))")
_COLUMNS: Final = "namespace, path, create_index, modify_index, create_time, modify_time"
_items = msgspec.json.Decoder(dict[str, str])


def _associated(namespace: str, path: str) -> bytes:
    # NUL never occurs in a valid namespace or path, so no two places share the bytes.
    return f"{namespace}\0{path}".encode()


def _meta(row: tuple[str, str, int, int, int, int]) -> VariableMetadata:
    ns, path, ci, mi, ct, mt = row
    return VariableMetadata(namespace=ns, path=path, create_index=ci, modify_index=mi,
                            create_time=ct, modify_time=mt)


def list_metadata(conn: sqlite3.Connection, namespace: str | None, prefix: str
                  ) -> list[VariableMetadata]:
    """Sorted by namespace then path, as Nomad's index walks them; `None`: all namespaces."""
    # Prefix matching in Python: LIKE/GLOB would treat `_`, `%`, `*` in paths as wildcards.
    if namespace is None:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM variables ORDER BY namespace, path")
    else:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM variables WHERE namespace = ? "
                            "ORDER BY path", (namespace,))
    return [_meta(r) for r in rows if r[1].startswith(prefix)]


def any_in(conn: sqlite3.Connection, namespace: str) -> bool:
    return conn.execute("SELECT 1 FROM variables WHERE namespace = ? LIMIT 1",
                        (namespace,)).fetchone() is not None


def get(conn: sqlite3.Connection, keyring: Keyring, namespace: str, path: str
        ) -> Variable | None:
    row = conn.execute(f"SELECT {_COLUMNS}, data FROM variables WHERE namespace = ? AND "
                       "path = ?", (namespace, path)).fetchone()
    if row is None:
        return None
    meta = _meta(row[:6])
    items = _items.decode(keyring.open(row[6], _associated(namespace, path)))
    return Variable(namespace=meta.namespace, path=meta.path, create_index=meta.create_index,
                    modify_index=meta.modify_index, create_time=meta.create_time,
                    modify_time=meta.modify_time, items=items)


def _zero(namespace: str, path: str) -> Variable:
    return Variable(namespace=namespace, path=path)


def put(conn: sqlite3.Connection, keyring: Keyring, var: Variable, *, index: int, now: int,
        cas: int | None) -> Variable | Conflict:
    """Store `var` (its namespace, path and items) at `index`, under `cas` if given."""
    existing = get(conn, keyring, var.namespace, var.path)
    if cas is not None:
        if existing is None and cas != 0:
            return Conflict(_zero(var.namespace, var.path))
        if existing is not None and existing.modify_index != cas:
            return Conflict(existing)
    if existing is not None and existing.items == var.items:
        return existing  # nothing changed: Nomad keeps the indexes too
    stored = Variable(namespace=var.namespace, path=var.path,
                      create_index=existing.create_index if existing else index,
                      modify_index=index,
                      create_time=existing.create_time if existing else now,
                      modify_time=now, items=var.items)
    sealed = keyring.seal(msgspec.json.encode(var.items),
                          _associated(var.namespace, var.path))
    conn.execute(
        "INSERT INTO variables (namespace, path, create_index, modify_index, create_time, "
        "modify_time, key_id, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (namespace, path) DO UPDATE SET modify_index = excluded.modify_index, "
        "modify_time = excluded.modify_time, key_id = excluded.key_id, data = excluded.data",
        (stored.namespace, stored.path, stored.create_index, stored.modify_index,
         stored.create_time, stored.modify_time, keyring.key_id, sealed))
    return stored


def delete(conn: sqlite3.Connection, keyring: Keyring, namespace: str, path: str, *,
           cas: int | None) -> Conflict | None:
    """Delete the variable, under `cas` if given; a conflict when the check fails."""
    if cas is not None:
        existing = get(conn, keyring, namespace, path)
        if existing is None and cas != 0:
            return Conflict(_zero(namespace, path))
        if existing is not None and existing.modify_index != cas:
            return Conflict(existing)
    conn.execute("DELETE FROM variables WHERE namespace = ? AND path = ?", (namespace, path))
    return None

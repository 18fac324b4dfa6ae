"""`ClusterObjectStore`: namespaces and variables of a cluster, in etcd.

The embedded server keeps them in `objects.db` (runtime/server/state/objects_sqlite.py); a cluster
keeps
them beside the rest of its state, so every server answers the same. The rules are not
written twice: each operation loads the rows it touches from etcd into a private in-memory
SQLite database, runs the very table helpers the embedded store runs (server/namespaces.py,
server/variables.py: Nomad's check-and-set, "an update that changes nothing changes nothing"), and
writes back the rows that changed in one etcd transaction with the index counter, compared as
every server write is (runtime/server/state/etcd.py). A conflict (another server wrote in
between) runs the operation again on fresh rows.

Keys, under the cluster's prefix:

    objects/namespaces/<name>          the namespace's JSON (the embedded table's `value`)
    objects/variables/<ns>/<path>      the variable's row: metadata in clear, items sealed
    objects/keyring                    the root key sealing variable items, created once

The root key lives in etcd so that every server can open what any server sealed: a copy of
etcd's data discloses the variables (Nomad's servers share their keyring too). Restrict who
may read etcd.

Reads go to etcd (not to the watched view): lists and reads are rare operator calls.
"""

from __future__ import annotations

import base64
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import msgspec
import trio

from yurt.runtime.server import namespaces as ns_table
from yurt.runtime.server import variables as var_table
from yurt.runtime.server.cluster.etcd.client import Compare, Op
from yurt.runtime.server.namespaces import Namespace
from yurt.runtime.server.variables import Conflict
from yurt.runtime.structs.variables import Variable, VariableMetadata

if TYPE_CHECKING:
    from yurt.runtime.server.cluster.server import ClusterServer
    from yurt.runtime.server.keyring import Keyring

T = TypeVar("T")
_ROW: Final = msgspec.json.Decoder(list[Any])


class _Key(msgspec.Struct):
    key_id: str
    key: str  # base64


@final
class ClusterObjectStore:
    def __init__(self, server: ClusterServer) -> None:
        self._server = server
        self._kv = server.kv
        self._prefix = server.prefix + b"objects/"
        self._keyring: Keyring | None = None

    # ------------------------------------------------------------------ keys and rows

    def _ns_key(self, name: str) -> bytes:
        return self._prefix + b"namespaces/" + name.encode()

    def _var_key(self, namespace: str, path: str) -> bytes:
        return self._prefix + b"variables/" + namespace.encode() + b"/" + path.encode()

    async def keyring(self) -> Keyring:
        """The cluster's root key: the first server to need one creates it (a create-only
        transaction, so two never make two), every other reads it."""
        if self._keyring is None:
            from yurt.runtime.server.keyring import Keyring

            key = self._prefix + b"keyring"
            fresh = msgspec.json.encode(_Key(key_id=str(uuid.uuid4()),
                                             key=base64.b64encode(os.urandom(32)).decode()))
            result = await self._kv.txn([Compare.create_revision(key, "=", 0)],
                                        [Op.put(key, fresh)], [Op.get(key)])
            raw = fresh if result.succeeded else result.responses[0][0].value
            stored = msgspec.json.decode(raw, type=_Key)
            self._keyring = Keyring(stored.key_id, base64.b64decode(stored.key))
        return self._keyring

    async def _rows(self, namespaces: list[bytes], variables: list[bytes]
                    ) -> sqlite3.Connection:
        """A private database holding the rows at these keys (a key ending in `/` stands
        for every key under it)."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute(ns_table.SCHEMA)
        conn.execute(var_table.SCHEMA)
        for key in namespaces:
            for kv in await self._read(key):
                name = kv.key[len(self._ns_key("")):].decode()
                conn.execute("INSERT INTO namespaces (name, value) VALUES (?, ?)",
                             (name, kv.value.decode()))
        for key in variables:
            for kv in await self._read(key):
                row = _ROW.decode(kv.value)
                conn.execute("INSERT INTO variables VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (*row[:7], base64.b64decode(row[7])))
        return conn

    async def _read(self, key: bytes) -> list[Any]:
        if key.endswith(b"/"):
            kvs, _ = await self._kv.get_prefix(key)
            return kvs
        kv, _ = await self._kv.get(key)
        return [kv] if kv is not None else []

    def _dump(self, conn: sqlite3.Connection) -> dict[bytes, bytes]:
        rows = {self._ns_key(name): value.encode()
                for name, value in conn.execute("SELECT name, value FROM namespaces")}
        for row in conn.execute("SELECT * FROM variables"):
            rows[self._var_key(row[0], row[1])] = msgspec.json.encode(
                [*row[:7], base64.b64encode(row[7]).decode()])
        return rows

    async def _read_op(self, namespaces: list[bytes], variables: list[bytes],
                       fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = await self._rows(namespaces, variables)
        try:
            return fn(conn)
        finally:
            conn.close()

    async def _write_op(self, namespaces: list[bytes], variables: list[bytes],
                        fn: Callable[[sqlite3.Connection, int], T]) -> T:
        """`fn(conn, index)` over the rows, the changed rows written with the index, as one
        change of the server (retried on a conflict)."""
        server = self._server

        async def attempt() -> T:
            async with server._lock:
                conn = await self._rows(namespaces, variables)
                try:
                    before = self._dump(conn)
                    index = server.take_index()
                    result = fn(conn, index)
                    after = self._dump(conn)
                finally:
                    conn.close()
                changed: dict[bytes, bytes | None] = {
                    k: v for k, v in after.items() if before.get(k) != v}
                changed.update({k: None for k in before if k not in after})
                try:
                    await server.cluster_store.save_rows(index, changed)
                except BaseException:
                    server._undo_index()
                    raise
                server._notify_changed()
                return result

        return await server._retrying(attempt)

    # ------------------------------------------------------------------ namespaces

    async def namespaces(self) -> list[Namespace]:
        return await self._read_op([self._ns_key("")], [], ns_table.list_all)

    async def namespace(self, name: str) -> Namespace | None:
        return await self._read_op([self._ns_key(name)], [],
                                   lambda conn: ns_table.get(conn, name))

    async def put_namespace(self, ns: Namespace) -> Namespace:
        return await self._write_op([self._ns_key(ns.name)], [],
                                    lambda conn, index: ns_table.put(conn, ns, index))

    async def delete_namespace(self, name: str, refusal: Callable[[bool], str | None]
                               ) -> str | None:
        def delete(conn: sqlite3.Connection, index: int) -> str | None:
            why = refusal(var_table.any_in(conn, name))
            if why is None:
                ns_table.delete(conn, name)
            return why

        return await self._write_op([self._ns_key(name)], [self._var_key(name, "")], delete)

    # ------------------------------------------------------------------ variables

    async def variables(self, namespace: str | None, prefix: str) -> list[VariableMetadata]:
        where = (self._prefix + b"variables/" if namespace is None
                 else self._var_key(namespace, ""))
        return await self._read_op([], [where], lambda conn: var_table.list_metadata(
            conn, namespace, prefix))

    async def variable(self, namespace: str, path: str) -> Variable | None:
        keyring = await self.keyring()
        return await self._read_op([], [self._var_key(namespace, path)],
                                   lambda conn: var_table.get(conn, keyring, namespace, path))

    async def put_variable(self, var: Variable, cas: int | None) -> Variable | Conflict:
        keyring = await self.keyring()
        now = time.time_ns()
        return await self._write_op([], [self._var_key(var.namespace, var.path)],
                                    lambda conn, index: var_table.put(
                                        conn, keyring, var, index=index, now=now, cas=cas))

    async def delete_variable(self, namespace: str, path: str, cas: int | None
                              ) -> Conflict | None:
        keyring = await self.keyring()
        return await self._write_op([], [self._var_key(namespace, path)],
                                    lambda conn, index: var_table.delete(
                                        conn, keyring, namespace, path, cas=cas))

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

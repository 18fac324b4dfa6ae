"""`ClusterObjectStore`: namespaces, node pools, variables and ACL objects of a cluster, in
etcd.

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
    objects/node_pools/<name>          the node pool's JSON (likewise)
    objects/variables/<ns>/<path>      the variable's row: metadata in clear, items sealed
    objects/keyring                    the root key sealing variable items, created once
    objects/acl/policies/<name>        ACL rows (server/acl/state.py), each as the JSON list
    objects/acl/tokens/<sha256(secret)>  of its columns; a token under a digest of its
    objects/acl/roles/<id>               secret, so that resolving a request's token is one
    objects/acl/onetime/<accessor>       read
    objects/acl/meta/bootstrap

The root key lives in etcd so that every server can open what any server sealed: a copy of
etcd's data discloses the variables (Nomad's servers share their keyring too). Restrict who
may read etcd.

Reads go to etcd (not to the watched view): lists and reads are rare operator calls, and the
token resolver (server/acl/resolve.py) caches what it reads. `acl_generation` moves with each
ACL write made through this store, which drops that cache at once; a write made through
another server reaches this one's cache when its entries expire (the resolver's TTLs, Nomad's
`acl { token_ttl, policy_ttl }`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import msgspec
import trio

from yurt.runtime.server import namespaces as ns_table
from yurt.runtime.server import nodepools as pool_table
from yurt.runtime.server import variables as var_table
from yurt.runtime.server.acl import state as acl_table
from yurt.runtime.server.acl.reset_file import read_bootstrap_reset
from yurt.runtime.server.cluster.etcd.client import Compare, Op
from yurt.runtime.server.namespaces import Namespace
from yurt.runtime.server.nodepools import NodePool
from yurt.runtime.server.variables import Conflict
from yurt.runtime.structs.acl import AclPolicy, AclRole, AclToken, OneTimeToken
from yurt.runtime.structs.variables import Variable, VariableMetadata

if TYPE_CHECKING:
    from yurt.runtime.server.cluster.server import ClusterServer
    from yurt.runtime.server.keyring import Keyring

T = TypeVar("T")
_ROW: Final = msgspec.json.Decoder(list[Any])
#: Each ACL table's key segment and the key of a row (its columns in server/acl/state.py's
#: order). Tokens are keyed by a digest of their secret: resolving a request's token reads
#: one key.
_ACL_KEYS: Final[dict[str, tuple[str, Callable[[tuple[Any, ...]], str]]]] = {
    "acl_policies": ("policies", lambda row: str(row[0])),
    "acl_tokens": ("tokens", lambda row: _secret_key(str(row[1]))),
    "acl_roles": ("roles", lambda row: str(row[0])),
    "acl_one_time_tokens": ("onetime", lambda row: str(row[0])),
    "acl_meta": ("meta", lambda row: str(row[0])),
}
_ACL_TABLE: Final = {segment.encode(): table for table, (segment, _) in _ACL_KEYS.items()}


def _secret_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _plain(name: str) -> bool:
    """Whether `name` is one key's last segment (a name from a request may hold anything)."""
    return bool(name) and "/" not in name


class _Key(msgspec.Struct):
    key_id: str
    key: str  # base64


@final
class ClusterObjectStore:
    def __init__(self, server: ClusterServer, data_dir: Path | None = None) -> None:
        self._server = server
        self._kv = server.kv
        self._prefix = server.prefix + b"objects/"
        self._keyring: Keyring | None = None
        #: Where the operator's `acl-bootstrap-reset` is looked for (None: nowhere).
        self._data_dir = data_dir
        self._acl_generation = 0
        #: The wall clock of token times and expiry (tests replace it).
        self.now_ns: Callable[[], int] = time.time_ns

    # ------------------------------------------------------------------ keys and rows

    def _ns_key(self, name: str) -> bytes:
        return self._prefix + b"namespaces/" + name.encode()

    def _pool_key(self, name: str) -> bytes:
        return self._prefix + b"node_pools/" + name.encode()

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

    async def _rows(self, namespaces: list[bytes], variables: list[bytes],
                    acl: Sequence[bytes] = (), pools: Sequence[bytes] = ()
                    ) -> sqlite3.Connection:
        """A private database holding the rows at these keys (a key ending in `/` stands
        for every key under it)."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute(ns_table.SCHEMA)
        conn.execute(pool_table.SCHEMA)
        for key in pools:
            for kv in await self._read(key):
                conn.execute("INSERT INTO node_pools (name, value) VALUES (?, ?)",
                             (kv.key[len(self._pool_key("")):].decode(), kv.value.decode()))
        conn.execute(var_table.SCHEMA)
        for schema in acl_table.SCHEMAS:
            conn.execute(schema)
        for key in acl:
            for kv in await self._read(key):
                table = _ACL_TABLE[kv.key[len(self._acl_key("")):].split(b"/", 1)[0]]
                row = _ROW.decode(kv.value)
                conn.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
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

    def _acl_key(self, tail: str) -> bytes:
        return self._prefix + b"acl/" + tail.encode()

    def _dump(self, conn: sqlite3.Connection) -> dict[bytes, bytes]:
        rows = {self._ns_key(name): value.encode()
                for name, value in conn.execute("SELECT name, value FROM namespaces")}
        rows.update({self._pool_key(name): value.encode()
                     for name, value in conn.execute("SELECT name, value FROM node_pools")})
        for row in conn.execute("SELECT * FROM variables"):
            rows[self._var_key(row[0], row[1])] = msgspec.json.encode(
                [*row[:7], base64.b64encode(row[7]).decode()])
        for table, (segment, key_of) in _ACL_KEYS.items():
            for row in conn.execute(f"SELECT * FROM {table}"):
                rows[self._acl_key(f"{segment}/{key_of(row)}")] = msgspec.json.encode(
                    list(row))
        return rows

    async def _read_op(self, namespaces: list[bytes], variables: list[bytes],
                       fn: Callable[[sqlite3.Connection], T], acl: Sequence[bytes] = (),
                       pools: Sequence[bytes] = ()) -> T:
        conn = await self._rows(namespaces, variables, acl, pools)
        try:
            return fn(conn)
        finally:
            conn.close()

    async def _write_op(self, namespaces: list[bytes], variables: list[bytes],
                        fn: Callable[[sqlite3.Connection, int], T], acl: Sequence[bytes] = (),
                        pools: Sequence[bytes] = ()) -> T:
        """`fn(conn, index)` over the rows, the changed rows written with the index, as one
        change of the server (retried on a conflict). When `fn` raises, nothing is written
        and the index is not taken."""
        server = self._server

        async def attempt() -> T:
            async with server._lock:
                conn = await self._rows(namespaces, variables, acl, pools)
                try:
                    before = self._dump(conn)
                    index = server.take_index()
                    try:
                        result = fn(conn, index)
                    except BaseException:
                        server._undo_index()
                        raise
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

    # ------------------------------------------------------------------ node pools

    async def node_pools(self) -> list[NodePool]:
        return await self._read_op([], [], pool_table.list_all, pools=[self._pool_key("")])

    async def node_pool(self, name: str) -> NodePool | None:
        return await self._read_op([], [], lambda conn: pool_table.get(conn, name),
                                   pools=[self._pool_key(name)])

    async def put_node_pool(self, pool: NodePool) -> NodePool:
        return await self._write_op([], [], lambda conn, index: pool_table.put(
            conn, pool, index), pools=[self._pool_key(pool.name)])

    async def delete_node_pool(self, name: str, refusal: Callable[[bool], str | None]
                               ) -> str | None:
        def delete(conn: sqlite3.Connection, index: int) -> str | None:
            why = refusal(pool_table.get(conn, name) is not None)
            if why is None:
                pool_table.delete(conn, name)
            return why

        return await self._write_op([], [], delete, pools=[self._pool_key(name)])

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

    # ------------------------------------------------------------------ ACL

    @property
    def acl_generation(self) -> int:
        return self._acl_generation

    async def _acl_read(self, keys: list[str], fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._read_op([], [], fn, [self._acl_key(k) for k in keys])

    async def _acl_write(self, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        """Every ACL write reads every ACL row: they are few, and a token is found by its
        AccessorID, a role by its name, only by looking at all of them."""
        try:
            return await self._write_op([], [], fn, [self._acl_key("")])
        finally:
            self._acl_generation += 1

    async def acl_policies(self, prefix: str = "") -> list[AclPolicy]:
        return await self._acl_read(["policies/"], lambda conn: acl_table.list_policies(
            conn, prefix))

    async def acl_policy(self, name: str) -> AclPolicy | None:
        return await self._acl_read([f"policies/{name}"] if _plain(name) else [],
                                    lambda conn: acl_table.get_policy(conn, name))

    async def acl_policies_named(self, names: Collection[str]) -> list[AclPolicy]:
        return await self._acl_read([f"policies/{n}" for n in set(names) if _plain(n)],
                                    lambda conn: acl_table.get_policies(conn, names))

    async def put_acl_policy(self, policy: AclPolicy) -> AclPolicy:
        return await self._acl_write(lambda conn, index: acl_table.put_policy(conn, policy,
                                                                              index))

    async def delete_acl_policy(self, name: str) -> None:
        await self._acl_write(lambda conn, index: acl_table.delete_policy(conn, name))

    async def acl_tokens(self, prefix: str = "") -> list[AclToken]:
        return await self._acl_read(["tokens/", "roles/"], lambda conn: acl_table.list_tokens(
            conn, prefix))

    async def acl_token(self, accessor: str) -> AclToken | None:
        return await self._acl_read(["tokens/", "roles/"], lambda conn: acl_table.get_token(
            conn, accessor))

    async def acl_token_by_secret(self, secret: str) -> AclToken | None:
        return await self._acl_read([f"tokens/{_secret_key(secret)}", "roles/"],
                                    lambda conn: acl_table.token_by_secret(conn, secret))

    async def put_acl_token(self, token: AclToken, *, min_ttl_ns: int, max_ttl_ns: int
                            ) -> AclToken:
        now = self.now_ns()
        return await self._acl_write(lambda conn, index: acl_table.put_token(
            conn, token, index, now_ns=now, min_ttl_ns=min_ttl_ns, max_ttl_ns=max_ttl_ns))

    async def delete_acl_token(self, accessor: str) -> None:
        now = self.now_ns()
        await self._acl_write(lambda conn, index: acl_table.delete_token(conn, accessor, now))

    async def acl_roles(self, prefix: str = "") -> list[AclRole]:
        return await self._acl_read(["roles/"], lambda conn: acl_table.list_roles(conn, prefix))

    async def acl_role(self, role_id: str) -> AclRole | None:
        return await self._acl_read([f"roles/{role_id}"] if _plain(role_id) else [],
                                    lambda conn: acl_table.get_role(conn, role_id))

    async def acl_role_by_name(self, name: str) -> AclRole | None:
        return await self._acl_read(["roles/"], lambda conn: acl_table.role_by_name(conn, name))

    async def acl_roles_by_id(self, ids: Collection[str]) -> list[AclRole]:
        return await self._acl_read([f"roles/{i}" for i in set(ids) if _plain(i)],
                                    lambda conn: acl_table.get_roles(conn, ids))

    async def put_acl_role(self, role: AclRole) -> AclRole:
        return await self._acl_write(lambda conn, index: acl_table.put_role(conn, role, index))

    async def delete_acl_role(self, role_id: str) -> None:
        await self._acl_write(lambda conn, index: acl_table.delete_role(conn, role_id))

    async def acl_bootstrap(self, secret: str = "") -> AclToken:
        """One etcd transaction compared on the index counter: of two bootstraps at once, on
        this server or another, the second is retried on fresh rows and sees the first's
        mark."""
        now = self.now_ns()
        reset = (0 if self._data_dir is None
                 else await trio.to_thread.run_sync(read_bootstrap_reset, self._data_dir))
        return await self._acl_write(lambda conn, index: acl_table.bootstrap(
            conn, index, now_ns=now, reset_index=reset, secret=secret))

    async def create_one_time_token(self, accessor: str) -> OneTimeToken:
        now = self.now_ns()
        return await self._acl_write(lambda conn, index: acl_table.create_one_time(
            conn, accessor, index, now_ns=now))

    async def exchange_one_time_token(self, secret: str) -> AclToken:
        now = self.now_ns()
        return await self._acl_write(lambda conn, index: acl_table.exchange_one_time(
            conn, secret, now_ns=now))

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

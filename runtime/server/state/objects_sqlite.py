"""`ObjectStore`: namespaces, node pools, variables and ACL objects on disk, in
`<data-dir>/server/objects.db`.

Its own SQLite file, beside the server's job and allocation state: the server core owns that
one, and these objects change on their own (an operator writing a variable touches no job).
The file is 0600 from its first byte (created before SQLite opens it), its directory 0700; the
root key that seals variable items lives in `keyring` beside it (server/keyring.py), never in it.

Every write is a change of the server (`IndexSource.change`): its index is the next of the one
counter, so a variable's CreateIndex/ModifyIndex and a namespace's are on the same scale as
every job and allocation index and `X-Nomad-Index`; the server persists the counter before the
write (so a restart never hands it out again) and wakes blocking queries (`?index=N`) once it
is committed, in index order.

Each operation runs in a worker thread on a connection of its own, inside one transaction
(`BEGIN IMMEDIATE`: a check-and-set reads and writes with no other writer between), behind a
limiter of one: writes are rare (an operator's command), and a connection per operation leaves
nothing to close when the agent stops or is killed. Writes are serialised by the server's
change lock, so indexes reach the file in the order they were taken.

ACL objects (policies, tokens with their secrets, roles, one-time tokens: server/acl/state.py)
live in the same file, hence its mode. A bootstrap is one transaction, its check and its
token together, so of two at once exactly one wins. The read path of every request (the
token resolver, server/acl/resolve.py) caches what it reads and drops it when
`acl_generation` moves: this store moves it after each ACL write.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from typing import Final, Protocol, TypeVar, final

import trio

from yurt.runtime.server import keyring as keyring_mod
from yurt.runtime.server import namespaces as ns_table
from yurt.runtime.server import nodepools as pool_table
from yurt.runtime.server import variables as var_table
from yurt.runtime.server.acl import state as acl_table
from yurt.runtime.server.acl.reset_file import read_bootstrap_reset
from yurt.runtime.server.keyring import Keyring
from yurt.runtime.server.namespaces import Namespace
from yurt.runtime.server.nodepools import NodePool
from yurt.runtime.server.variables import Conflict
from yurt.runtime.structs.acl import AclPolicy, AclRole, AclToken, OneTimeToken
from yurt.runtime.structs.variables import Variable, VariableMetadata

DB_NAME: Final = "objects.db"
T = TypeVar("T")


class IndexSource(Protocol):
    """The server's one index counter (LocalServer)."""

    def change(self) -> AbstractAsyncContextManager[int]:
        """The next index, persisted before the block, for a change committed within it;
        visible when it ends."""


class AclObjects(Protocol):
    """The ACL objects (server/acl/state.py has the rules each operation follows). Every
    write refuses bad input with `AclRefused` (server/acl/validate.py) and, once committed,
    moves `acl_generation`, which caches of what was read (server/acl/resolve.py) compare to
    drop what any write made through this store may have changed."""

    @property
    def acl_generation(self) -> int: ...
    async def acl_policies(self, prefix: str = "") -> list[AclPolicy]: ...
    async def acl_policy(self, name: str) -> AclPolicy | None: ...
    async def acl_policies_named(self, names: Collection[str]) -> list[AclPolicy]: ...
    async def put_acl_policy(self, policy: AclPolicy) -> AclPolicy: ...
    async def delete_acl_policy(self, name: str) -> None: ...
    async def acl_tokens(self, prefix: str = "") -> list[AclToken]: ...
    async def acl_token(self, accessor: str) -> AclToken | None: ...
    async def acl_token_by_secret(self, secret: str) -> AclToken | None: ...
    async def put_acl_token(self, token: AclToken, *, min_ttl_ns: int, max_ttl_ns: int
                            ) -> AclToken: ...
    async def delete_acl_token(self, accessor: str) -> None: ...
    async def acl_roles(self, prefix: str = "") -> list[AclRole]: ...
    async def acl_role(self, role_id: str) -> AclRole | None: ...
    async def acl_role_by_name(self, name: str) -> AclRole | None: ...
    async def acl_roles_by_id(self, ids: Collection[str]) -> list[AclRole]: ...
    async def put_acl_role(self, role: AclRole) -> AclRole: ...
    async def delete_acl_role(self, role_id: str) -> None: ...
    async def acl_bootstrap(self, secret: str = "") -> AclToken: ...
    async def create_one_time_token(self, accessor: str) -> OneTimeToken: ...
    async def exchange_one_time_token(self, secret: str) -> AclToken: ...


class Objects(AclObjects, Protocol):
    """What the API reads and writes namespaces, variables and ACL objects through: this
    module's store (one node), or a cluster's in etcd (runtime/server/state/objects_etcd.py)."""

    async def namespaces(self) -> list[Namespace]: ...
    async def namespace(self, name: str) -> Namespace | None: ...
    async def put_namespace(self, ns: Namespace) -> Namespace: ...
    async def delete_namespace(self, name: str, refusal: Callable[[bool], str | None]
                               ) -> str | None: ...
    async def node_pools(self) -> list[NodePool]: ...
    async def node_pool(self, name: str) -> NodePool | None: ...
    async def put_node_pool(self, pool: NodePool) -> NodePool: ...
    async def delete_node_pool(self, name: str, refusal: Callable[[bool], str | None]
                               ) -> str | None: ...
    async def variables(self, namespace: str | None, prefix: str
                        ) -> list[VariableMetadata]: ...
    async def variable(self, namespace: str, path: str) -> Variable | None: ...
    async def put_variable(self, var: Variable, cas: int | None) -> Variable | Conflict: ...
    async def delete_variable(self, namespace: str, path: str, cas: int | None
                              ) -> Conflict | None: ...


@final
class ObjectStore:
    def __init__(self, path: Path, keyring: Keyring, index: IndexSource) -> None:
        self.path = path
        self._keyring = keyring
        self._index = index
        self._limiter = trio.CapacityLimiter(1)
        self._acl_generation = 0
        #: The wall clock of token times and expiry (tests replace it).
        self.now_ns: Callable[[], int] = time.time_ns

    @classmethod
    async def open(cls, directory: Path, index: IndexSource) -> ObjectStore:
        """The store in `directory` (the server's state directory), created if missing."""

        def prepare() -> tuple[Path, Keyring]:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
            path = directory / DB_NAME
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            os.chmod(path, 0o600)
            keyring = keyring_mod.load_or_create(directory)
            conn = _connect(path)
            try:
                with conn:
                    conn.execute(ns_table.SCHEMA)
                    conn.execute(pool_table.SCHEMA)
                    conn.execute(var_table.SCHEMA)
                    for schema in acl_table.SCHEMAS:
                        conn.execute(schema)
            finally:
                conn.close()
            return path, keyring

        path, keyring = await trio.to_thread.run_sync(prepare)
        return cls(path, keyring, index)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def in_thread() -> T:
            conn = _connect(self.path)
            try:
                with conn:
                    conn.execute("BEGIN IMMEDIATE")
                    return fn(conn)
            finally:
                conn.close()

        return await trio.to_thread.run_sync(in_thread, limiter=self._limiter)

    async def _write(self, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        """`fn(conn, index)` with the next server index (a change of the server's: see
        `IndexSource.change`)."""
        async with self._index.change() as index:
            return await self._run(lambda conn: fn(conn, index))

    # ------------------------------------------------------------------ namespaces

    async def namespaces(self) -> list[Namespace]:
        return await self._run(ns_table.list_all)

    async def namespace(self, name: str) -> Namespace | None:
        return await self._run(partial(ns_table.get, name=name))

    async def put_namespace(self, ns: Namespace) -> Namespace:
        return await self._write(lambda conn, index: ns_table.put(conn, ns, index))

    async def delete_namespace(self, name: str, refusal: Callable[[bool], str | None]
                               ) -> str | None:
        """Delete `name` unless `refusal(has_variables)` says why not (then that text).
        The check and the delete are one transaction: no variable sneaks in between."""

        def delete(conn: sqlite3.Connection, index: int) -> str | None:
            why = refusal(var_table.any_in(conn, name))
            if why is None:
                ns_table.delete(conn, name)
            return why

        return await self._write(delete)

    # ------------------------------------------------------------------ node pools

    async def node_pools(self) -> list[NodePool]:
        """The stored and built-in pools (the API adds those of registered nodes)."""
        return await self._run(pool_table.list_all)

    async def node_pool(self, name: str) -> NodePool | None:
        return await self._run(partial(pool_table.get, name=name))

    async def put_node_pool(self, pool: NodePool) -> NodePool:
        return await self._write(lambda conn, index: pool_table.put(conn, pool, index))

    async def delete_node_pool(self, name: str, refusal: Callable[[bool], str | None]
                               ) -> str | None:
        """Delete `name` unless `refusal(stored)` says why not (then that text)."""

        def delete(conn: sqlite3.Connection, index: int) -> str | None:
            why = refusal(pool_table.get(conn, name) is not None)
            if why is None:
                pool_table.delete(conn, name)
            return why

        return await self._write(delete)

    # ------------------------------------------------------------------ variables

    async def variables(self, namespace: str | None, prefix: str) -> list[VariableMetadata]:
        return await self._run(partial(var_table.list_metadata, namespace=namespace,
                                       prefix=prefix))

    async def variable(self, namespace: str, path: str) -> Variable | None:
        return await self._run(partial(var_table.get, keyring=self._keyring,
                                       namespace=namespace, path=path))

    async def put_variable(self, var: Variable, cas: int | None) -> Variable | Conflict:
        now = time.time_ns()
        return await self._write(lambda conn, index: var_table.put(
            conn, self._keyring, var, index=index, now=now, cas=cas))

    async def delete_variable(self, namespace: str, path: str, cas: int | None
                              ) -> Conflict | None:
        return await self._write(lambda conn, index: var_table.delete(
            conn, self._keyring, namespace, path, cas=cas))

    # ------------------------------------------------------------------ ACL

    @property
    def acl_generation(self) -> int:
        return self._acl_generation

    async def _acl_write(self, fn: Callable[[sqlite3.Connection, int], T]) -> T:
        try:
            return await self._write(fn)
        finally:
            # Whether or not it committed: a cache never keeps what was read before.
            self._acl_generation += 1

    async def acl_policies(self, prefix: str = "") -> list[AclPolicy]:
        return await self._run(partial(acl_table.list_policies, prefix=prefix))

    async def acl_policy(self, name: str) -> AclPolicy | None:
        return await self._run(partial(acl_table.get_policy, name=name))

    async def acl_policies_named(self, names: Collection[str]) -> list[AclPolicy]:
        return await self._run(partial(acl_table.get_policies, names=names))

    async def put_acl_policy(self, policy: AclPolicy) -> AclPolicy:
        return await self._acl_write(lambda conn, index: acl_table.put_policy(conn, policy,
                                                                              index))

    async def delete_acl_policy(self, name: str) -> None:
        await self._acl_write(lambda conn, index: acl_table.delete_policy(conn, name))

    async def acl_tokens(self, prefix: str = "") -> list[AclToken]:
        return await self._run(partial(acl_table.list_tokens, prefix=prefix))

    async def acl_token(self, accessor: str) -> AclToken | None:
        return await self._run(partial(acl_table.get_token, accessor=accessor))

    async def acl_token_by_secret(self, secret: str) -> AclToken | None:
        return await self._run(partial(acl_table.token_by_secret, secret=secret))

    async def put_acl_token(self, token: AclToken, *, min_ttl_ns: int, max_ttl_ns: int
                            ) -> AclToken:
        now = self.now_ns()
        return await self._acl_write(lambda conn, index: acl_table.put_token(
            conn, token, index, now_ns=now, min_ttl_ns=min_ttl_ns, max_ttl_ns=max_ttl_ns))

    async def delete_acl_token(self, accessor: str) -> None:
        now = self.now_ns()
        await self._acl_write(lambda conn, index: acl_table.delete_token(conn, accessor, now))

    async def acl_roles(self, prefix: str = "") -> list[AclRole]:
        return await self._run(partial(acl_table.list_roles, prefix=prefix))

    async def acl_role(self, role_id: str) -> AclRole | None:
        return await self._run(partial(acl_table.get_role, role_id=role_id))

    async def acl_role_by_name(self, name: str) -> AclRole | None:
        return await self._run(partial(acl_table.role_by_name, name=name))

    async def acl_roles_by_id(self, ids: Collection[str]) -> list[AclRole]:
        return await self._run(partial(acl_table.get_roles, ids=ids))

    async def put_acl_role(self, role: AclRole) -> AclRole:
        return await self._acl_write(lambda conn, index: acl_table.put_role(conn, role, index))

    async def delete_acl_role(self, role_id: str) -> None:
        await self._acl_write(lambda conn, index: acl_table.delete_role(conn, role_id))

    async def acl_bootstrap(self, secret: str = "") -> AclToken:
        """One transaction: of two bootstraps at once, the second sees the first's mark."""
        now = self.now_ns()
        directory = self.path.parent

        def bootstrap(conn: sqlite3.Connection, index: int) -> AclToken:
            return acl_table.bootstrap(conn, index, now_ns=now, secret=secret,
                                       reset_index=read_bootstrap_reset(directory))

        return await self._acl_write(bootstrap)

    async def create_one_time_token(self, accessor: str) -> OneTimeToken:
        now = self.now_ns()
        return await self._acl_write(lambda conn, index: acl_table.create_one_time(
            conn, accessor, index, now_ns=now))

    async def exchange_one_time_token(self, secret: str) -> AclToken:
        now = self.now_ns()
        return await self._acl_write(lambda conn, index: acl_table.exchange_one_time(
            conn, secret, now_ns=now))


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: transactions are the explicit BEGIN IMMEDIATE above.
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA synchronous = FULL")
    return conn

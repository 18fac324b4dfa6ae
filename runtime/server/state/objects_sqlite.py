"""`ObjectStore`: namespaces and variables on disk, in `<data-dir>/server/objects.db`.

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
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path
from typing import Final, Protocol, TypeVar, final

import trio

from yurt.runtime.server import keyring as keyring_mod
from yurt.runtime.server import namespaces as ns_table
from yurt.runtime.server import variables as var_table
from yurt.runtime.server.keyring import Keyring
from yurt.runtime.server.namespaces import Namespace
from yurt.runtime.server.variables import Conflict
from yurt.runtime.structs.variables import Variable, VariableMetadata

DB_NAME: Final = "objects.db"
T = TypeVar("T")


class IndexSource(Protocol):
    """The server's one index counter (LocalServer)."""

    def change(self) -> AbstractAsyncContextManager[int]:
        """The next index, persisted before the block, for a change committed within it;
        visible when it ends."""


class Objects(Protocol):
    """What the API reads and writes namespaces and variables through: this module's store
    (one node), or a cluster's in etcd (runtime/server/state/objects_etcd.py)."""

    async def namespaces(self) -> list[Namespace]: ...
    async def namespace(self, name: str) -> Namespace | None: ...
    async def put_namespace(self, ns: Namespace) -> Namespace: ...
    async def delete_namespace(self, name: str, refusal: Callable[[bool], str | None]
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
                    conn.execute(var_table.SCHEMA)
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


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: transactions are the explicit BEGIN IMMEDIATE above.
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    conn.execute("PRAGMA synchronous = FULL")
    return conn

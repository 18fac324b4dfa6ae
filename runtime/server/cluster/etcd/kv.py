"""`KV`: the slice of etcd's API the cluster code uses, as a Protocol.

Two implementations satisfy it: `EtcdClient` (client.py, the real thing over etcd's JSON
gateway) and `MemoryKV` (memkv.py, an in-process etcd for tests under the mock clock). Code
that stores cluster state (runtime/server/state/etcd.py) takes a `KV`, so the same code runs
against both and the same tests prove both behave alike.

The request types (`Compare`, `Op`) and results (`KeyValue`, `TxnResult`, `WatchEvent`) are
client.py's own: a second vocabulary would only add a translation that could drift.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from yurt.runtime.server.cluster.etcd.client import Compare, KeyValue, Op, TxnResult, WatchEvent


class KV(Protocol):
    """etcd's key-value, lease and watch calls (see `EtcdClient` for each one's meaning)."""

    #: Requests made through this handle (a watch counts once per opening).
    requests: int

    async def get(self, key: bytes) -> tuple[KeyValue | None, int]: ...

    async def get_prefix(self, prefix: bytes) -> tuple[list[KeyValue], int]: ...

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int: ...

    async def delete(self, key: bytes) -> int: ...

    async def txn(self, compare: list[Compare], success: list[Op],
                  failure: list[Op] | None = None) -> TxnResult: ...

    async def lease_grant(self, ttl: int) -> int: ...

    async def lease_keepalive(self, lease: int) -> int: ...

    async def lease_revoke(self, lease: int) -> None: ...

    def watch(self, prefix: bytes, start_revision: int
              ) -> AsyncGenerator[tuple[int, list[WatchEvent]], None]: ...

    async def aclose(self) -> None: ...

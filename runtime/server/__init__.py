"""The server side a client syncs with.

`Server` is the contract the agent's client side uses; `LocalServer` (embedded, single node,
state in SQLite) implements it today, and a cluster backend (etcd) is meant to implement it
later without the client side changing.
"""

from __future__ import annotations

from typing import Protocol

import trio

from yurt.runtime.structs import Allocation


class Server(Protocol):
    @property
    def changed(self) -> trio.Event:
        """Set (and replaced) whenever allocations for this node may have changed."""

    def allocs_for_node(self) -> list[Allocation]:
        """The server copies of this node's allocations (desired state)."""

    async def update_allocs(self, batch: list[Allocation]) -> None:
        """Receive the client's view of allocations (alloc sync)."""

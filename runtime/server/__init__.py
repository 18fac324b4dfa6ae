"""The server side a client syncs with (Nomad's `nomad/`).

`Server` is the contract the agent's client side uses. Two implementations: `LocalServer`
(local.py: embedded, single node, state in SQLite) and, in cluster mode, the client's
`RemoteServer` (runtime/client/remote.py) speaking to `yurt server` processes whose state is in
etcd (cluster/). The pure scheduler is `scheduler/`, both state backends are `state/`.
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

"""`SimNode`: one client node of the real client code, running simulated allocations.

What a `yurt agent --servers` runs to talk to its servers, and nothing of what it runs on the
machine:

    SimNode.run (one nursery)
    ├─ Client            the runners nursery; runners from the simulated factory
    ├─ RemoteServer      register (own SecretID), heartbeat, blocking allocation pulls
    ├─ AllocSyncer       Nomad's batched, prioritised alloc sync (or the caller's syncer)
    └─ server watch      pulled allocations → Client.sync_allocs, as the agent's watch

No API, no drivers, no state DB on disk, no garbage collector: a runner is destroyed when the
servers no longer list its allocation. Cancelling `run` is a crash of the whole node: its
allocations die with it (nothing outlives a simulated node's nursery). A `SimNode` made again
with the same node and secret is the node coming back: it registers as itself and starts
afresh what the servers still want running there.

Requests go through the `NodeTransport` given: one HTTP client shared by every node of a
`yurt nodesim`, or the in-process network of the whole-cluster simulation.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, final

import trio

from yurt.runtime.client.allocrunner.simulated import AllocProfile, simulated_factory
from yurt.runtime.client.allocsync import AllocSyncer
from yurt.runtime.client.client import Client
from yurt.runtime.client.remote import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_WAIT,
    JobKey,
    NodeTransport,
    RemoteServer,
)
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.structs import AcknowledgedState, Allocation, Job, Node
from yurt.store.memory import MemoryStateDB


class Syncer(Protocol):
    """What the node needs of its alloc sync (`AllocSyncer`, or a naive one to compare)."""

    servers_contacted: trio.Event
    #: What the servers acknowledged, per allocation (what `forget` drops).
    acked: dict[str, AcknowledgedState]

    def add(self, alloc: Allocation) -> None: ...

    def forget(self, alloc_id: str) -> None: ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None: ...


SyncerFactory = Callable[[Callable[[list[Allocation]], Awaitable[None]]], Syncer]


@final
class SimNode:
    """One simulated client node; start `run` in a nursery, cancel it to crash the node.

    Args:
        node: the node as it registers (its ID, resources, drivers, attributes).
        servers: the servers' URLs, tried in order (`RemoteServer`).
        secret: the node's SecretID.
        transport: how requests reach the servers.
        profile: how its allocations behave.
        rng: every random draw of the node (runners, heartbeat stagger, sync retry stagger).
        broker: where client events go (shared: nothing of a simulated node reads it).
        unix_clock: wall time of events, in ns (the simulation's own under a mock clock).
        syncer: makes the alloc sync from the send function (default `AllocSyncer`).
        on_update: every client view of an allocation, as the node's sync gets it.
        token: the cluster's token, sent with a registration (`RemoteServer`).
        jobs: decoded jobs shared with other nodes of the process (`RemoteServer`): a
            thousand nodes running one job hold one copy of it.
    """

    def __init__(self, node: Node, servers: Sequence[str], *, secret: str,
                 transport: NodeTransport, profile: AllocProfile, rng: random.Random,
                 broker: EventBroker, unix_clock: Callable[[], int] = time.time_ns,
                 syncer: SyncerFactory | None = None,
                 on_update: Callable[[Allocation], None] | None = None,
                 wait: float = DEFAULT_WAIT,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 backoff_base: float = BACKOFF_BASE, backoff_cap: float = BACKOFF_CAP,
                 token: str = "", jobs: dict[JobKey, Job] | None = None) -> None:
        self.node = node
        self.remote = RemoteServer(node, servers, secret, token=token, rng=rng,
                                   transport=transport, jobs=jobs,
                                   wait=wait, request_timeout=request_timeout,
                                   backoff_base=backoff_base, backoff_cap=backoff_cap)
        if syncer is None:
            self.syncer: Syncer = AllocSyncer(self.remote.update_allocs, MemoryStateDB(),
                                              unix_clock=unix_clock, rng=rng)
        else:
            self.syncer = syncer(self.remote.update_allocs)
        self._on_update = on_update
        self.client = Client(None, broker, on_alloc_update=self._updated,
                             factory=simulated_factory(profile, rng, unix_clock=unix_clock),
                             publish_alloc_updates=False)

    @property
    def id(self) -> str:
        return self.node.id

    def _updated(self, alloc: Allocation) -> None:
        self.syncer.add(alloc)
        if self._on_update is not None:
            self._on_update(alloc)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.client.run)
            await nursery.start(self.syncer.run)
            await nursery.start(self.remote.run)
            nursery.start_soon(self._watch_server)
            task_status.started()

    async def _watch_server(self) -> None:
        """The agent's watch: every pull brought in line with the runners (Nomad's
        `runAllocs`), never before the first pull (an empty cache would stop everything)."""
        await self.remote.pulled.wait()
        while True:
            changed = self.remote.changed
            self.client.sync_allocs(self.remote.allocs_for_node())
            # What the servers dropped is destroyed here: its acknowledged state goes too.
            if self.syncer.acked:
                for alloc_id in [a for a in self.syncer.acked if a not in self.client.runners]:
                    self.syncer.forget(alloc_id)
            self.syncer.servers_contacted.set()
            await changed.wait()

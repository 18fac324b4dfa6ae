"""`SimCluster`: servers, simulated nodes and the network between them, in one Trio run.

    SimCluster.run (one nursery, under trio.testing.MockClock)
    ├─ server s0..sS-1   each in its own cancel scope (cancel it = the server crashes):
    │    ClusterServer over its own MemoryKV client of one shared key space (the etcd all
    │    servers share), its `follow`, a LeaderElection(EtcdLeaseBackend) and the lead loop
    │    of serverproc._campaign (lead while elected; an etcd error or a conflict restarts
    │    the term's work)
    ├─ observer          a follower `ClusterServer` that never leads and never answers a
    │                    node: it checks every commit as it applies it (check.py)
    └─ node n0..nN-1     `SimNode`s (node.py: the real client code, simulated runners), each
                         in its own cancel scope (cancel it = the node crashes); a node that
                         returns is a new `SimNode` with the same ID and secret

Nodes reach servers only through `SimNetwork` (network.py). The shared key space outlives
every server, as etcd outlives a `yurt server`: a server that restarts is a new
`ClusterServer` that loads the state and follows it, as `yurt server` does.

A server that dies of an exception (one `yurt server` would exit with) is recorded in
`failures` and left crashed: the run fails with it. Every client view a node's runners
report goes through `check.runner_update`, which catches an allocation starting to run
while another node runs it, at that instant.

Every random draw comes from a `random.Random` derived from the seed and the component's
name (`rng(name)`), so nothing depends on which component drew first; every ID the servers
make comes from the seeded `uuid.uuid4` the scenario installs (scenario.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, final

import trio

from yurt.runtime.client.allocrunner.simulated import AllocProfile
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.cluster.etcd.client import EtcdError
from yurt.runtime.server.cluster.etcd.memkv import MemoryKV
from yurt.runtime.server.cluster.leader import EtcdLeaseBackend, LeaderElection
from yurt.runtime.server.cluster.server import ClusterServer, HeartbeatConfig
from yurt.runtime.server.state.etcd import ClusterStore, StoreConflict
from yurt.runtime.sim.check import ObserverServer, runner_update
from yurt.runtime.sim.network import ServerEndpoint, SimNetwork
from yurt.runtime.sim.node import SimNode
from yurt.runtime.structs import (
    DriverInfo,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
)

PREFIX: Final = b"/yurt/"
#: The simulation's wall clock starts here (2026-01-01T00:00:00Z), whatever the real date.
EPOCH_NS: Final = 1_767_225_600 * 10**9


@dataclass(frozen=True)
class SimConfig:
    """The cluster's shape and timings, shortened so a scenario is seconds of simulated
    time (every timing keeps Nomad's ratios: heartbeat every TTL, grace, request timeout
    well under the TTL)."""

    servers: int = 3
    nodes: int = 3
    node_cpu: int = 4000
    node_memory: int = 4096
    heartbeat: HeartbeatConfig = field(default_factory=lambda: HeartbeatConfig(
        min_ttl=4.0, max_per_second=50.0, grace=2.0, failover_ttl=6.0))
    leader_ttl: int = 3
    latency: tuple[float, float] = (0.001, 0.02)
    loss: float = 0.0
    request_timeout: float = 1.0
    wait: float = 5.0
    backoff_base: float = 0.1
    backoff_cap: float = 1.0
    profile: AllocProfile = field(default_factory=lambda: AllocProfile(
        start_delay=(0.05, 0.5), run_time=(0.5, 4.0), failure_probability=0.0))


def unix_clock() -> int:
    """The simulation's wall time, in ns: the epoch plus the trio (mock) clock."""
    return EPOCH_NS + int(trio.current_time() * 1e9)


@final
class SimServer:
    """One server's slot: its address, and the `ClusterServer` while it runs."""

    def __init__(self, name: str, endpoint: ServerEndpoint) -> None:
        self.name = name
        self.endpoint = endpoint
        self.server: ClusterServer | None = None
        self.election: LeaderElection | None = None
        self.scope: trio.CancelScope | None = None
        self.starts = 0
        self.terms = 0

    @property
    def url(self) -> str:
        return self.endpoint.url

    @property
    def up(self) -> bool:
        return self.server is not None

    @property
    def leading(self) -> bool:
        return self.server is not None and self.server.leading


@final
class SimNodeSlot:
    """One node's identity (kept across crashes) and its current incarnation."""

    def __init__(self, node: Node, secret: str) -> None:
        self.node = node
        self.secret = secret
        self.sim: SimNode | None = None
        self.scope: trio.CancelScope | None = None
        self.starts = 0

    @property
    def id(self) -> str:
        return self.node.id

    @property
    def up(self) -> bool:
        return self.sim is not None


@final
class SimCluster:
    """S servers, N nodes and the network (see the module header). Start `run` in a
    nursery; crash and restart parts with the methods below."""

    def __init__(self, config: SimConfig, seed: int, log: Callable[[str], None]) -> None:
        self.config = config
        self.seed = seed
        self.log = log
        self.space = MemoryKV()
        self.broker = EventBroker()
        self.network = SimNetwork(self.rng("network"), latency=config.latency,
                                  loss=config.loss, log=log)
        self.servers = [SimServer(f"s{i}", self.network.add_server(f"http://s{i}.sim:4646"))
                        for i in range(config.servers)]
        ids = self.rng("identity")
        self.nodes = [SimNodeSlot(self._node(i, ids), f"{ids.getrandbits(128):032x}")
                      for i in range(config.nodes)]
        self.observer: ObserverServer | None = None
        #: Servers that died of an exception (a bug: the run fails with it).
        self.failures: list[str] = []
        self._nursery: trio.Nursery | None = None

    def rng(self, name: str) -> random.Random:
        """The RNG of one component: from the seed and the name only (a str seed is hashed
        with SHA-512 by `random`, never with the process's string hash)."""
        return random.Random(f"{self.seed}:{name}")

    def _node(self, i: int, ids: random.Random) -> Node:
        node_id = f"{ids.getrandbits(128):032x}"
        node_id = "-".join((node_id[:8], node_id[8:12], node_id[12:16], node_id[16:20],
                            node_id[20:]))
        healthy = DriverInfo(detected=True, healthy=True)
        return Node(id=node_id, name=f"n{i}", datacenter="dc1", node_class="sim",
                    attributes={"unique.network.ip-address": f"10.0.0.{i + 1}",
                                "kernel.name": "linux"},
                    drivers={"mock_driver": healthy, "raw_exec": healthy},
                    node_resources=NodeResources(
                        cpu=NodeCpuResources(cpu_shares=self.config.node_cpu),
                        memory=NodeMemoryResources(memory_mb=self.config.node_memory)))

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            kv = self.space.client()
            self.observer = ObserverServer(EventBroker(), ClusterStore(kv, PREFIX), kv, PREFIX,
                                           heartbeat=self.config.heartbeat,
                                           unix_clock=unix_clock, rng=self.rng("observer"))
            await self.observer.load()
            await nursery.start(self.observer.follow)
            for server in self.servers:
                await self.start_server(server)
            for slot in self.nodes:
                await self.start_node(slot)
            task_status.started()

    def _spawn(self) -> trio.Nursery:
        assert self._nursery is not None, "the cluster is not running"
        return self._nursery

    async def start_server(self, slot: SimServer) -> None:
        assert not slot.up
        slot.starts += 1
        self.log(f"server {slot.name} start #{slot.starts}")
        await self._spawn().start(self._run_server, slot)

    def crash_server(self, slot: SimServer) -> None:
        assert slot.scope is not None, "the server is not running"
        self.log(f"server {slot.name} crash (leading={slot.leading})")
        slot.endpoint.crash()
        slot.scope.cancel()
        slot.server = slot.election = slot.scope = None

    async def _run_server(self, slot: SimServer, *,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                          ) -> None:
        """One server's life; an exception out of it (the process would exit) is a
        failure of the run, recorded in `failures` with the server marked crashed."""
        try:
            await self._serve(slot, task_status=task_status)
        except Exception as e:  # any exception is a finding of the run
            failure = e.exceptions[0] if isinstance(e, ExceptionGroup) else e
            while isinstance(failure, ExceptionGroup):
                failure = failure.exceptions[0]
            self.failures.append(f"server {slot.name} died: {type(failure).__name__}: "
                                 f"{failure}")
            self.log(f"server {slot.name} died: {type(failure).__name__}")
            slot.endpoint.crash()
            slot.server = slot.election = slot.scope = None

    async def _serve(self, slot: SimServer, *,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            kv = self.space.client()
            server = ClusterServer(EventBroker(), ClusterStore(kv, PREFIX), kv, PREFIX,
                                   heartbeat=self.config.heartbeat, unix_clock=unix_clock,
                                   rng=self.rng(f"server:{slot.name}:{slot.starts}"))
            await server.load()
            ttl = self.config.leader_ttl
            election = LeaderElection(EtcdLeaseBackend(kv, PREFIX), "leader", slot.url, ttl)
            async with trio.open_nursery() as nursery:
                await nursery.start(server.follow)
                await nursery.start(election.run)
                slot.server, slot.election, slot.scope = server, election, scope
                slot.endpoint.server = server
                task_status.started()
                # serverproc._campaign's lead loop.
                while True:
                    async with election.leading():
                        slot.terms += 1
                        self.log(f"server {slot.name} leads (term {election.term})")
                        try:
                            await server.lead()
                        except* (EtcdError, StoreConflict) as group:
                            self.log(f"server {slot.name} leading restarts: "
                                     f"{type(group.exceptions[0]).__name__}")
                            await trio.sleep(ttl / 3)
                    self.log(f"server {slot.name} no longer leads")

    async def start_node(self, slot: SimNodeSlot) -> None:
        assert not slot.up
        slot.starts += 1
        self.log(f"node {slot.node.name} start #{slot.starts}")
        await self._spawn().start(self._run_node, slot)

    def crash_node(self, slot: SimNodeSlot) -> None:
        assert slot.scope is not None, "the node is not running"
        self.log(f"node {slot.node.name} crash")
        slot.scope.cancel()
        slot.sim = slot.scope = None

    async def _run_node(self, slot: SimNodeSlot, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        rng = self.rng(f"node:{slot.node.name}:{slot.starts}")
        urls = [s.url for s in self.servers]
        rng.shuffle(urls)  # nodes spread over the servers, as behind a load balancer
        cfg = self.config
        sim = SimNode(slot.node, urls, secret=slot.secret,
                      transport=self.network.transport(slot.node.name), profile=cfg.profile,
                      rng=rng, broker=self.broker, unix_clock=unix_clock, wait=cfg.wait,
                      request_timeout=cfg.request_timeout, backoff_base=cfg.backoff_base,
                      backoff_cap=cfg.backoff_cap,
                      on_update=lambda alloc: runner_update(self, slot.id, alloc))
        with trio.CancelScope() as scope:
            slot.sim, slot.scope = sim, scope
            await sim.run(task_status=task_status)

    # ------------------------------------------------------------------ views

    def up_servers(self) -> list[SimServer]:
        return [s for s in self.servers if s.up]

    def leader(self) -> SimServer | None:
        return next((s for s in self.servers if s.leading), None)

    def node_slot(self, name: str) -> SimNodeSlot:
        return next(s for s in self.nodes if s.node.name == name)

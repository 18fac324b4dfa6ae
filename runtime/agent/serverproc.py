"""`yurt server`: one control-plane process of a cluster whose state lives in etcd.

It serves the whole Nomad HTTP API for the cluster from its watched view (reads are never
forwarded), the node RPC its agents call (runtime/api/noderpc.py), and campaigns for
leadership: the leader runs the scheduler and watches node liveness
(runtime/server/cluster/server.py). Any number of servers may run against one etcd; each
announces itself under `<prefix>servers/<name>` with a lease, which is what
`/v1/status/peers` and `/v1/agent/members` list.

A composition root, beside `Agent` (agent.py): it builds the `ClusterServer` from `server/`
and the API from `api/`, and owns the nursery they run in. The API sees it as it sees an
agent (runtime/api/view.py `AgentView`, implemented structurally): a server, its state and
its object store in etcd, and no client side (`client_side` is None: it runs no allocation,
so every allocation the API shows is the server copy). The node RPC's routes see it as a
`ClusterProcess` (runtime/api/noderpc.py).

`cli/server.py` takes what it names from here (the CLI imports no server module): the
process, its configuration, the heartbeat settings and the etcd error it reports.
"""

from __future__ import annotations

import json
import logging
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import urlsplit

import httpx2
import trio

from yurt.runtime.agent.aclsetup import make_resolver
from yurt.runtime.agent.agent import AgentConfig
from yurt.runtime.api.origin import parse_allowed_host
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.acl.identity import TokenResolver
from yurt.runtime.server.acl.settings import AclSettings
from yurt.runtime.server.cluster.etcd.client import EtcdCompacted, EtcdError
from yurt.runtime.server.cluster.server import ClusterServer, HeartbeatConfig
from yurt.runtime.server.state.etcd import StoreConflict
from yurt.runtime.server.state.objects_etcd import ClusterObjectStore
from yurt.runtime.structs import NODE_STATUS_DOWN, Node

if TYPE_CHECKING:
    from yurt.runtime.server.cluster.etcd.client import EtcdClient
    from yurt.runtime.server.state.objects_sqlite import Objects

__all__ = ["EtcdError", "HeartbeatConfig", "ServerConfig", "ServerProcess",
           "parse_allowed_host"]

log = logging.getLogger("yurt.server")

#: Nomad's default leader lease: a dead leader is replaced within this plus one pass.
DEFAULT_LEADER_TTL: Final = 5


@dataclass(frozen=True)
class ServerConfig:
    etcd: tuple[str, ...]
    name: str
    bind: str = "127.0.0.1"
    port: int = 4646
    data_dir: Path = Path(".")
    token: str = ""
    prefix: str = "/yurt/"
    #: The URL nodes and servers reach this one at (default: where it listens).
    advertise: str = ""
    leader_ttl: int = DEFAULT_LEADER_TTL
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    #: Names requests may carry in Host besides the server's own (canonical: see
    #: runtime/api/origin.py `parse_allowed_host`), e.g. a DNS alias nodes reach it at.
    allowed_hosts: tuple[str, ...] = ()
    #: Nomad's agent `acl` block, as `AgentConfig` has it (runtime/server/acl/settings.py).
    acl: AclSettings = field(default_factory=AclSettings)


@final
class ServerProcess:
    def __init__(self, config: ServerConfig) -> None:
        self.server_config = config
        #: What the API reads of an agent's configuration (runtime/api/view.py `ApiConfig`).
        self.config = AgentConfig(
            data_dir=config.data_dir, bind=config.bind, port=config.port, token=config.token,
            node_name=config.name, acl=config.acl)
        self.broker = EventBroker()
        self.ready = trio.Event()
        #: What the API answers as this process's node: a server is none, so it has the
        #: server's name and no ID (the cluster's nodes are `server.nodes()`).
        self.node = Node(id="", name=config.name, status=NODE_STATUS_DOWN)
        self.started_at = time.time()
        self.address = ""
        self.prefix = config.prefix.encode()
        self._stop = trio.Event()
        self.server: ClusterServer
        self.kv: EtcdClient
        self.node_http: httpx2.AsyncClient
        self.election: Any = None
        #: Namespaces and variables: the cluster's, in etcd (made by `run`).
        self.objects: ClusterObjectStore | None = None
        self._acl_resolver: TokenResolver | None = None

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ the API's view

    @property
    def server_state(self) -> ClusterServer:
        return self.server

    @property
    def client_side(self) -> None:
        """None: a server runs no allocations (runtime/api/view.py)."""
        return None

    async def state_failure(self) -> str | None:
        await trio.lowlevel.checkpoint()
        return None

    async def acl_resolver(self) -> TokenResolver:
        """Who the API admits (runtime/agent/aclsetup.py), made on first use."""
        await trio.lowlevel.checkpoint()
        if self._acl_resolver is None:
            store = await self.object_store() if self.server_config.acl.enabled else None
            self._acl_resolver = make_resolver(self.server_config.acl, self.config.token,
                                               store)
        return self._acl_resolver

    async def object_store(self) -> Objects:
        await trio.lowlevel.checkpoint()
        if self.objects is None:  # the API answers state routes only once `ready`
            raise RuntimeError("the server's object store is opened by `run`")
        return self.objects

    # ------------------------------------------------------------------ cluster views

    def server_urls(self) -> list[str]:
        return sorted(self._peers.values()) if self._peers else [self.address]

    def leader_address(self) -> str | None:
        if self.election is None:
            return None
        address: str | None = self.election.leader_address()
        return address

    def members(self) -> list[dict[str, Any]]:
        leader = self.leader_address()
        return [{"name": name, "address": address, "leader": address == leader}
                for name, address in sorted(self._peers.items())]

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        from yurt.runtime.api import noderpc, serve_api
        from yurt.runtime.server.cluster.etcd.client import EtcdClient
        from yurt.runtime.server.state.etcd import ClusterStore

        self._peers: dict[str, str] = {}
        self.kv = EtcdClient(self.server_config.etcd)
        # Forwards of node-local routes (noderpc.py `to_node`): no deadline past the connect,
        # a log follow lasts as long as the caller wants it.
        self.node_http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(None, connect=5.0, pool=5.0),
            limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=50),
            follow_redirects=False, trust_env=False)
        store = ClusterStore(self.kv, self.prefix)
        self.server = ClusterServer(self.broker, store, self.kv, self.prefix,
                                    heartbeat=self.server_config.heartbeat)
        self.objects = ClusterObjectStore(self.server, self.server_config.data_dir)
        stop_api = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                # Nodes and the other servers reach this one at its advertise address.
                advertised = urlsplit(self.server_config.advertise).hostname
                listening = await nursery.start(partial(
                    serve_api, self, stop_api, front=noderpc.routes(self),
                    allowed_hosts=((advertised,) if advertised else ())
                    + self.server_config.allowed_hosts))
                self.address = self.server_config.advertise or listening
                await self.server.load()
                await nursery.start(self.server.follow)
                await nursery.start(self._announce)
                await nursery.start(self._campaign)
                self.ready.set()
                log.info("server %s serving on %s (etcd %s, prefix %s)", self.server_config.name,
                         self.address, ",".join(self.server_config.etcd), self.server_config.prefix)
                task_status.started(self.address)
                await self._stop.wait()
                stop_api.set()
                nursery.cancel_scope.cancel()
        finally:
            # The election's own cancellation revoked its lease: another server takes over
            # at once.
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await self.kv.aclose()
                await self.node_http.aclose()

    async def _announce(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> None:
        """This server under `<prefix>servers/`, bound to a lease kept alive; the others as
        the watch sees them come and go."""
        key = self.prefix + b"servers/" + self.server_config.name.encode()
        ttl = self.server_config.leader_ttl
        lease = await self.kv.lease_grant(ttl)
        await self.kv.put(key, json.dumps({"name": self.server_config.name,
                                           "address": self.address}).encode(), lease=lease)
        revision = await self._read_peers()
        task_status.started()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_peers, revision)
            while True:
                await trio.sleep(ttl / 3)
                try:
                    if await self.kv.lease_keepalive(lease) == 0:
                        lease = await self.kv.lease_grant(ttl)
                        await self.kv.put(key, json.dumps({
                            "name": self.server_config.name,
                            "address": self.address}).encode(), lease=lease)
                except EtcdError as e:  # etcd away for a while: try again next period
                    log.warning("cannot renew this server's entry: %s", e)

    async def _follow_peers(self, revision: int) -> None:
        prefix = self.prefix + b"servers/"
        while True:
            try:
                async with aclosing(self.kv.watch(prefix, revision + 1)) as changes:
                    async for _, events in changes:
                        for event in events:
                            name = event.kv.key[len(prefix):].decode()
                            if event.type == "DELETE":
                                self._peers.pop(name, None)
                            else:
                                self._peers[name] = json.loads(event.kv.value)["address"]
            except EtcdCompacted:  # a quiet watch outlived etcd's history: read it again
                revision = await self._read_peers()

    async def _read_peers(self) -> int:
        while True:
            try:
                kvs, revision = await self.kv.get_prefix(self.prefix + b"servers/")
            except EtcdError as e:
                log.warning("cannot read the servers: %s", e)
                await trio.sleep(1)
                continue
            self._peers = {}
            for kv in kvs:
                entry = json.loads(kv.value)
                self._peers[entry["name"]] = entry["address"]
            return revision

    async def _campaign(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> None:
        """Campaign for leadership forever; lead (schedule, watch node liveness) while
        elected, stopping the moment the term ends."""
        from yurt.runtime.server.cluster.leader import EtcdLeaseBackend, LeaderElection

        self.election = LeaderElection(EtcdLeaseBackend(self.kv, self.prefix), "leader",
                                       self.address, self.server_config.leader_ttl)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.election.run)
            task_status.started()
            while True:
                async with self.election.leading():
                    log.info("server %s leads (term %d)", self.server_config.name,
                             self.election.term)
                    try:
                        await self.server.lead()
                    except* (EtcdError, StoreConflict) as group:
                        # etcd went away under the scheduler, or another server wrote while
                        # a leader-only decision was being committed: lead again from the
                        # current state (the election steps down if the lease cannot be
                        # kept meanwhile).
                        log.warning("leading restarts: %s", group.exceptions[0])
                        await trio.sleep(self.server_config.leader_ttl / 3)
                log.info("server %s no longer leads", self.server_config.name)

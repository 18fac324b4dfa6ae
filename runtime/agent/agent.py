"""`Agent`: the daemon behind `yurt agent`, assembled from the parts it owns.

    Agent.run (one nursery)
    ├─ state DB writer            <data-dir>/client/state.db (client state, re-attach)
    ├─ Client                     the alloc-runners nursery
    ├─ server watch               server changes → Client.sync_allocs (Nomad's runAllocs)
    ├─ AllocSyncer                client views → server, Nomad's batching and priorities
    ├─ LocalServer.run            pending evaluations, blocked ones retried on capacity
    ├─ AllocGarbageCollector      terminal allocations destroyed when room is needed
    ├─ burst freezer              the long-lived heap out of the collector's way (heap.py)
    └─ HTTP API                   hypercorn's trio worker, Nomad's paths (runtime/api/)

The embedded `LocalServer` keeps jobs, evaluations and allocations in `<data-dir>/server/server.db`.

Client mode (`servers` set: `yurt agent --servers URL,...`): no server.db, no scheduler, no
periodic dispatcher, no node drain. `RemoteServer` (runtime/client/remote.py) stands where
`LocalServer.run` was: it registers the node, heartbeats, pulls this node's allocations from
the servers and takes the syncer's updates to them. The client side is the same code either
way. What the embedded server gave the rest of the agent is answered by
runtime/agent/clientmode.py: server routes of the API are forwarded to a server,
templates reading Nomad services or variables fail with a clear error, service registrations
are not sent, workload identities are signed with a key of the agent's own
(`<data-dir>/identity`).

The API (runtime/api/) sees the agent through `AgentView` (runtime/api/view.py), which
`Agent` implements structurally and the API never imports: `server` is what every route may
read of a server (the embedded one, or in client mode `RemoteServer`), `server_state` the
embedded server the server routes answer from (None in client mode, where the routes that
need it are forwarded: the agent hands the API that forward, `ClientModeMiddleware`),
`client_side` the agent itself (its client, restore, collector, devices, identity key, node
control), `object_store()` the embedded server's namespaces and variables, opened on first
use. A `yurt server` process is the other implementation (serverproc.py).

Start: the API binds first, so a restarted agent answers at once (`/v1/agent/self`; every
other request waits for `ready`); behind it the server loads its state and the client restores
every allocation the state DB knows (running tasks are re-attached, terminal ones queued for
collection), then syncs with the server. Stop (SIGTERM/SIGINT, or `stop()`): the API stops
accepting, runners shut down with their tasks left running, state is flushed; the next start
re-attaches.

Memory: what a restore or a burst of starts leaves alive lives as long as its allocations,
so it is frozen out of the cyclic collector's reach (`memory.freeze_long_lived`): after the
restore, and once a burst of at least `BURST_ALLOCS` new allocations has gone `BURST_QUIET`
seconds without an allocation update. Nothing of this runs while the node is idle.

Faults: a full disk does not stop the agent (both databases open and load, writes are kept in
memory and retried, log output is dropped and counted). A client state DB deleted under the
agent stops new work: server changes are no longer run and API changes get a 503 with the
reason (`state_failure`, `runtime/api/stateguard.py`), while what runs stays supervised.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, final

import trio

from yurt.runtime.agent.aclsetup import AclStart, end_dev_session, make_resolver, start_acl
from yurt.runtime.agent.heap import Frozen, freeze_long_lived, freezing_survivors
from yurt.runtime.agent.log import AllocEvents
from yurt.runtime.client.allocdir import make_data_dir
from yurt.runtime.client.allocrunner.health import restored_alloc
from yurt.runtime.client.fingerprint import advertise, computed_class, fingerprint_node
from yurt.runtime.client.gc import AllocGarbageCollector, GCConfig
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.heartbeatstop import watch_heartbeat_stop
from yurt.runtime.client.restore import RestoreProgress, reattach_all
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.lib.logfields import fields
from yurt.runtime.lib.nofile import raise_nofile_limit
from yurt.runtime.server.acl.identity import TokenResolver
from yurt.runtime.server.acl.settings import AclSettings, open_to_local_users
from yurt.runtime.structs import (
    Allocation,
    ClientHostVolumeConfig,
    DriverInfo,
    Node,
    NodeDeviceInstance,
    NodeDeviceResource,
    is_client_terminal,
)

if TYPE_CHECKING:
    from yurt.runtime.agent.proxy import ServerProxy
    from yurt.runtime.client.allocsync import AllocSyncer
    from yurt.runtime.client.client import Client
    from yurt.runtime.client.devices.manager import DeviceManager
    from yurt.runtime.client.devices.protocol import DeviceGroup
    from yurt.runtime.client.pluginmanager.drivers import (
        DriverFactory,
        DriverManager,
        DriverTaskEvent,
    )
    from yurt.runtime.client.remote import RemoteServer
    from yurt.runtime.server import Server
    from yurt.runtime.server.local import LocalServer
    from yurt.runtime.server.nodestate import NodeControl
    from yurt.runtime.server.state.objects_sqlite import Objects
    from yurt.runtime.server.workload_keys import WorkloadSigner
    from yurt.store.protocol import StateDB
    from yurt.store.sqlite import SQLiteStateDB

# What the API does not need loads behind it, in a worker thread (`_load_parts`): the alloc
# and task runners, the stores with sqlite_utils, the drivers and devices are about half of
# the start-up imports, and a restarted agent answers while they load.
PARTS = ("yurt.runtime.client.allocrunner.runner", "yurt.runtime.client.client",
         "yurt.runtime.client.devices.fake", "yurt.runtime.client.devices.manager",
         "yurt.runtime.client.devices.nvidia", "yurt.runtime.client.drivers.protocol",
         "yurt.runtime.client.pluginmanager.drivers", "yurt.runtime.server.local",
         "yurt.runtime.server.state.sqlite", "yurt.runtime.client.allocsync", "yurt.store",
         "yurt.store.sqlite")


def _load_parts() -> None:
    for name in PARTS:
        importlib.import_module(name)


log = logging.getLogger("yurt.agent")
#: One line per allocation and task event (runtime/agent/log.py): what an operator searches.
alloc_log = logging.getLogger("yurt.alloc")
plugin_log = logging.getLogger("yurt.plugins")

SHUTDOWN_TIMEOUT = 30.0
#: New allocations that make a burst worth a freeze once it has settled.
BURST_ALLOCS = 32
#: A burst has settled when no allocation was updated for this long (seconds).
BURST_QUIET = 2.0


def _is_sqlite(db: StateDB) -> TypeGuard[SQLiteStateDB]:
    from yurt.store.sqlite import SQLiteStateDB  # loaded by then: `db` is one of its kind

    return isinstance(db, SQLiteStateDB)


@dataclass(frozen=True)
class AgentConfig:
    data_dir: Path
    bind: str = "127.0.0.1"
    port: int = 4646
    token: str = ""  # ACL: when set, every request must carry it as X-Nomad-Token
    #: Nomad's dev mode: on stop, destroy every allocation (tasks killed, state removed)
    #: instead of leaving tasks running for the next start to re-attach.
    dev_mode: bool = False
    #: Devices the fake device plugin reports (tests, demos); none: no fake plugin.
    fake_devices: tuple[DeviceGroup, ...] = ()
    #: How long the agent waits for plugins' first fingerprints before serving.
    device_wait: float = 10.0
    #: Drivers: all installed ones (`yurt.drivers` entry points) unless `driver_factories`
    #: is given; then `driver_allow` (only these) and `driver_block` (never these).
    driver_factories: dict[str, DriverFactory] | None = None
    driver_allow: tuple[str, ...] = ()
    driver_block: tuple[str, ...] = ()
    driver_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    node_name: str | None = None
    datacenter: str = "dc1"
    node_class: str = ""  # Nomad's client `node_class`, `node_pool` and `meta`
    node_pool: str = "default"
    meta: dict[str, str] = field(default_factory=dict)
    gc: GCConfig = field(default_factory=GCConfig)
    #: Seconds an idle keep-alive connection stays open. Nomad's HTTP server sets no idle
    #: limit of its own, and clients pool connections between polls (python-nomad polls every
    #: 5 s, hypercorn's own default); five minutes keeps their pools alive and still closes
    #: connections a client abandoned.
    http_idle_timeout: float = 300.0
    #: Dynamic ports and reserved ports (server/scheduler/ports.py), as Nomad's client config has
    #: them.
    min_dynamic_port: int = 20000
    max_dynamic_port: int = 32000
    reserved_ports: str = ""
    #: Nomad's client `host_volume` blocks (config.py `FileConfig.host_volumes`): the node's
    #: `HostVolumes`, paths absolute and checked to exist.
    host_volumes: dict[str, ClientHostVolumeConfig] = field(default_factory=dict)
    artifact: ArtifactConfig = field(default_factory=ArtifactConfig)  # the client's limits
    #: Client mode (`--servers`): the servers' node RPC URLs. Empty: the embedded server.
    servers: tuple[str, ...] = ()
    #: Names requests may carry in `Host` besides the agent's own (config `[ui]
    #: allowed_hosts`; runtime/api/origin.py).
    allowed_hosts: tuple[str, ...] = ()
    #: The `acl` block (runtime/server/acl/settings.py); off unless the CLI or the caller
    #: turns it on.
    acl: AclSettings = field(default_factory=AclSettings)
    #: The node's address (`attr.unique.network.ip-address`: the address task ports are
    #: bound on and services, checks and templates see): the `network_interface`'s, loopback
    #: with `--dev` (runtime/cli/agent.py). Empty: the default route's interface's.
    node_ip: str = ""
    #: Nomad's `advertise` block, each `host:port` (runtime/agent/config.py): `http` is the
    #: node's `HTTPAddr` (empty: where the API listens); `rpc` the name the embedded server
    #: gives itself (/v1/status/leader, peers, members: runtime/api/status.py); `serf` is
    #: checked and kept, as yurt has no gossip.
    advertise_http: str = ""
    advertise_rpc: str = ""
    advertise_serf: str = ""
    #: `--dev` without a data dir: `data_dir` is a new temporary directory, removed when the
    #: agent stops (runtime/cli/agent.py).
    temporary_data_dir: bool = False
    #: Nomad's client `state_dir` and `alloc_dir` (`-state-dir`, `-alloc-dir`): where the
    #: client's state database and the allocations' directories live; None: the data dir's
    #: `client/` and `alloc/`.
    state_dir: Path | None = None
    alloc_dir: Path | None = None
    #: Nomad's client `host_volumes_dir` (`-host-volumes-dir`): where the `mkdir` plugin makes
    #: dynamic host volumes; None: the data dir's `host_volumes/`.
    host_volumes_dir: Path | None = None
    #: Nomad's client `host_volume_plugin_dir` (`-host-volume-plugin-dir`): the external
    #: host volume plugins' executables; None: the data dir's `host_volume_plugins/`.
    host_volume_plugin_dir: Path | None = None
    #: Nomad's client `network_speed` (`-network-speed`): the link speed in Mbit/s the node
    #: reports; 0: the kernel's (client/fingerprint.py).
    network_speed: int = 0
    #: Nomad's `log_include_location`: the agent's log lines name their caller (read where
    #: the log is set up, runtime/cli/agent.py).
    log_include_location: bool = False

    @property
    def client_state_dir(self) -> Path:
        return self.state_dir or self.data_dir / "client"

    @property
    def alloc_root(self) -> Path:
        return self.alloc_dir or self.data_dir / "alloc"

    @property
    def host_volumes_root(self) -> Path:
        return self.host_volumes_dir or self.data_dir / "host_volumes"

    @property
    def host_volume_plugins_root(self) -> Path:
        return self.host_volume_plugin_dir or self.data_dir / "host_volume_plugins"


@final
class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.broker = EventBroker()
        self.started_at = time.time()
        self.node: Node
        #: The server the client side syncs with: the embedded one, or in client mode the
        #: servers (`remote`, this same object: see `_open_remote`).
        self.server: LocalServer | RemoteServer
        #: The embedded server, whose state the API's server routes answer from; None in
        #: client mode, which forwards those routes (runtime/agent/clientmode.py).
        self.server_state: LocalServer | None = None
        #: In client mode, the servers.
        self.remote: RemoteServer | None = None
        #: In client mode, where the API sends the servers' routes (runtime/agent/proxy.py).
        self.proxy: ServerProxy | None = None
        self.node_control: NodeControl
        self.client: Client
        self.syncer: AllocSyncer
        self.gc: AllocGarbageCollector
        self.db: StateDB
        self.devices: DeviceManager
        self.drivers: DriverManager
        self.workload_signer: WorkloadSigner  # signs tasks' identity tokens (hooks/identity.py)
        self._node_published = False
        self.address = ""
        self._stop = trio.Event()
        #: Set once the API is bound (`address`), before the state loads.
        self.api_up = trio.Event()
        #: Set once the state is loaded and the parts the API calls exist; until then the
        #: API answers `/v1/agent/self` only, and every other request waits for it.
        self.ready = trio.Event()
        self.restoring = RestoreProgress()
        self._new_allocs = 0  # runners added since the last freeze
        self._gone_allocs = 0  # runners destroyed since the last freeze
        self._burst = trio.Event()  # set when either count reaches BURST_ALLOCS
        self._activity = trio.Event()  # set by every allocation update
        self.freezes = 0  # how many times the long-lived heap was frozen (tests, logs)
        self.frozen = trio.Event()  # set, then replaced, by each freeze
        self.last_freeze: Frozen | None = None  # what the last freeze did (tests, logs)
        self._alloc_events = AllocEvents()  # which allocation updates deserve a log line
        #: Device group → (instances, healthy ones) as last logged.
        self._devices_logged: dict[str, tuple[int, int]] = {}
        self._objects: Objects | None = None
        self._objects_opening = trio.Lock()
        self._acl_resolver: TokenResolver | None = None
        #: Set once the ACL state is loaded and the start's ACL work is done (aclsetup.py).
        self._acl_loaded = trio.Event()
        #: What that work did, for the operator (runtime/cli/agent.py prints it).
        self.acl_start = AclStart()

    def stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ the API's view

    @property
    def client_side(self) -> Agent:
        """The agent is its own client side (runtime/api/view.py `ClientSide`): its client,
        restore, collector, devices, identity key and node control."""
        return self

    def effective_acl(self) -> AclSettings:
        """The `acl` block this agent acts on. A client-only agent (`--servers`) keeps no ACL
        state: its servers' would be asked, and a `yurt server` has no ACL system yet, so it
        admits as an agent with ACLs disabled does (its token, if one is configured)."""
        if self.config.servers:
            return replace(self.config.acl, enabled=False)
        return self.config.acl

    def open_to_local_users(self, address: str) -> str | None:
        """The warning owed when any local user can run commands as root through this agent
        (runtime/server/acl/settings.py `open_to_local_users`), None when they cannot."""
        healthy = [name for name, info in self.node.drivers.items() if info.healthy]
        return open_to_local_users(self.effective_acl(), self.config.token, healthy,
                                   os.geteuid(), address)

    async def acl_resolver(self) -> TokenResolver:
        """Who the API admits (runtime/agent/aclsetup.py), made on first use. With ACLs on,
        a request waits until the ACL state is loaded (with the server's, before `ready`)."""
        await trio.lowlevel.checkpoint()
        if self._acl_resolver is None:
            settings = self.effective_acl()
            if settings.enabled:
                await self._acl_loaded.wait()
            if self._acl_resolver is None:
                store = await self.object_store() if settings.enabled else None
                self._acl_resolver = make_resolver(settings, self.config.token, store)
        return self._acl_resolver

    async def object_store(self) -> Objects:
        """The embedded server's namespaces and variables, opened on first use: the store's
        module, and the cryptography it carries, load behind the API, not before it binds
        (tests/test_import_weight.py). A client-only agent keeps none (its API forwards
        those routes, its templates say so: runtime/agent/clientmode.py)."""
        from yurt.runtime.server.state.objects_sqlite import ObjectStore

        async with self._objects_opening:
            if self._objects is None:
                if self.server_state is None:
                    raise RuntimeError("a client-only agent keeps no namespaces or variables")
                self._objects = await ObjectStore.open(self.config.data_dir / "server",
                                                       self.server_state)
            return self._objects

    async def state_failure(self) -> str | None:
        """Why the agent refuses new work (its state DB was deleted), or None."""
        db = getattr(self, "db", None)
        if db is not None and _is_sqlite(db):
            return await db.verify()
        await trio.lowlevel.checkpoint()
        return None

    async def _open_host_volumes(self, local: LocalServer) -> None:
        """Dynamic host volumes (Nomad's client/hostvolumemanager/, nomad/
        host_volume_endpoint.go): the node's plugins fingerprinted, the volumes it made before
        offered again, then the server's book of them, reconciled with the node."""
        from yurt.runtime.client.hostvolume_plugins import discover
        from yurt.runtime.client.hostvolumes import HostVolumeManager
        from yurt.runtime.server.hostvolumes import HostVolumeBook

        external = await discover(self.config.host_volume_plugins_root,
                                  self.config.host_volumes_root, self.node.node_pool)
        manager = HostVolumeManager(self.config.host_volumes_root,
                                    self.config.client_state_dir / "host_volumes",
                                    self._host_volume_changed, external)
        for plugin, version in manager.plugins.items():
            self.node.attributes[f"plugins.host_volume.{plugin}.version"] = version
        self.node.computed_class = computed_class(self.node)  # attributes are part of it
        await manager.restore()
        store = await self.object_store()

        async def namespace_exists(name: str) -> bool:
            return await store.namespace(name) is not None

        async def pool_exists(name: str) -> bool:
            return await store.node_pool(name) is not None

        book = HostVolumeBook(local, self.config.data_dir / "server", manager,
                              namespace_exists=namespace_exists, pool_exists=pool_exists)
        local.host_volumes = book
        await book.load()

    def _host_volume_changed(self, name: str, volume: ClientHostVolumeConfig | None) -> None:
        """The node gained or lost a dynamic host volume (`HostVolumeNodeUpdater`); a static
        volume of the same name is never replaced (placement skips such a node)."""
        current = self.node.host_volumes.get(name)
        if current is not None and not current.id:
            return
        if volume is None:
            self.node.host_volumes.pop(name, None)
        else:
            self.node.host_volumes[name] = volume
        if self._node_published:
            self.server.node_updated()

    def _driver_info(self, name: str, info: DriverInfo) -> None:
        previous = self.node.drivers.get(name)
        self.node.drivers[name] = info
        for key, value in info.attributes.items():
            self.node.attributes[key] = value
        self.node.computed_class = computed_class(self.node)
        # A fingerprint that finds the driver as it was is no node change (no new index):
        # Nomad updates the node only when a driver's health or attributes change.
        same = previous is not None and (
            (previous.detected, previous.healthy, previous.health_description,
             previous.attributes)
            == (info.detected, info.healthy, info.health_description, info.attributes))
        if self._node_published and not same:
            self.server.node_updated()

    async def _route_driver_event(self, event: DriverTaskEvent) -> None:
        from yurt.runtime.client.allocrunner.runner import real

        runner = real(self.client.runners.get(event.alloc_id))
        tr = runner.task_runners.get(event.task) if runner is not None else None
        if tr is None:
            await trio.lowlevel.checkpoint()
            return
        await tr.driver_event(event.message, event.timestamp, event.annotations)

    def _devices_changed(self, groups: list[DeviceGroup]) -> None:
        self.node.node_resources.devices = [
            NodeDeviceResource(vendor=g.vendor, type=g.type, name=g.name,
                               attributes=dict(g.attributes),
                               instances=[NodeDeviceInstance(
                                   id=i.id, healthy=i.healthy,
                                   health_description=i.health_description)
                                   for i in g.instances])
            for g in groups]
        self.node.computed_class = computed_class(self.node)
        if self._node_published:
            self.server.node_updated()
        # A plugin may fingerprint again and again with nothing new: a line only per change.
        summary = {f"{g.vendor}/{g.type}/{g.name}":
                   (len(g.instances), sum(1 for i in g.instances if i.healthy)) for g in groups}
        for device in sorted(summary.keys() | self._devices_logged.keys()):
            now = summary.get(device, (0, 0))
            if now != self._devices_logged.get(device):
                plugin_log.info("device state changed",
                                extra=fields(device=device, instances=now[0], healthy=now[1]))
        self._devices_logged = summary

    def _alloc_updated(self, alloc: Allocation) -> None:
        for level, message, values in self._alloc_events.observe(alloc):
            alloc_log.log(level, message, extra=fields(**values))
        self._activity.set()
        self.syncer.add(alloc)
        if is_client_terminal(alloc.client_status):
            self.gc.mark(alloc.id)

    async def _destroy(self, alloc_id: str) -> None:
        await self.client.destroy_alloc(alloc_id)
        self.syncer.forget(alloc_id)
        self._alloc_events.forget(alloc_id)
        # A wave of destroys is a burst too: what it left frozen is freed by the next freeze.
        self._gone_allocs += 1
        self._activity.set()
        if self._gone_allocs >= BURST_ALLOCS:
            self._burst.set()

    async def _watch_server(self, server: Server) -> None:
        """The client side sees the server only through the `Server` contract."""
        await self.restoring.done.wait()  # a change never races an allocation's restore
        if self.remote is not None:
            # Before the first pull the cache is empty, and syncing with it would stop every
            # restored allocation: a server that does not answer stops nothing.
            await self.remote.pulled.wait()
        refused = False
        while True:
            changed = server.changed
            gone = self.db.gone if _is_sqlite(self.db) else None
            if gone is None:
                before = len(self.client.runners)
                self.client.sync_allocs(server.allocs_for_node())
                self._new_allocs += max(0, len(self.client.runners) - before)
                if self._new_allocs >= BURST_ALLOCS:
                    self._burst.set()
            elif not refused:  # nothing new may start that a restart could not find again
                log.error("not running server changes: %s", gone)
                refused = True
            self.syncer.servers_contacted.set()
            await changed.wait()

    def _freeze(self) -> None:
        released = self._gone_allocs > 0
        self._new_allocs = self._gone_allocs = 0
        self.freezes += 1
        self.last_freeze = frozen = freeze_long_lived(released=released)
        log.info("froze %d long-lived objects in %.0f ms", frozen.frozen,
                 frozen.seconds * 1000)
        self.frozen.set()
        self.frozen = trio.Event()

    async def _freeze_when_restored(self) -> None:
        """Freeze what the restore brought back, once it is all there (a full collection
        blocks the loop once, so not before the API serves)."""
        await self.restoring.done.wait()
        self._freeze()

    async def _freeze_after_bursts(self) -> None:
        """Freeze the heap once each burst of new allocations has settled."""
        while True:
            await self._burst.wait()
            self._burst = trio.Event()
            settled = False
            while not settled:
                self._activity = activity = trio.Event()
                with trio.move_on_after(BURST_QUIET) as quiet:
                    await activity.wait()
                settled = quiet.cancelled_caught
            self._freeze()

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Run until `stop()`; `task_status.started` gets the API's address."""
        from yurt.runtime.api import serve_api  # the HTTP stack loads only for the daemon

        forward = None
        if self.config.servers:  # client mode: the servers' routes go to a server
            from yurt.runtime.agent.clientmode import ClientModeMiddleware

            forward = partial(ClientModeMiddleware, agent=self)

        data = self.config.data_dir
        make_data_dir(data)  # 0711: every local user reaches it, none lists or reads it
        if self.config.alloc_dir is not None:  # as the data dir: tasks of other users enter
            make_data_dir(self.config.alloc_dir)
        # Before anything is opened: trio holds a pidfd and the log pumps four FIFO ends per
        # task, and running out of descriptors fails starts (see client/fingerprint.py).
        nofile = raise_nofile_limit()
        self.node = fingerprint_node(data, name=self.config.node_name,
                                     datacenter=self.config.datacenter, nofile=nofile,
                                     node_class=self.config.node_class, meta=self.config.meta,
                                     ip_address=self.config.node_ip or None,
                                     network_speed=self.config.network_speed)
        self.node.node_pool = self.config.node_pool
        self.node.computed_class = computed_class(self.node)  # the pool is part of it
        self.node.node_resources.min_dynamic_port = self.config.min_dynamic_port
        self.node.node_resources.max_dynamic_port = self.config.max_dynamic_port
        self.node.reserved_resources.networks.reserved_host_ports = self.config.reserved_ports
        self.node.host_volumes = dict(self.config.host_volumes)
        stop_api = trio.Event()
        # Cancelled once the tasks are shut down, before the state stores close: an open
        # event stream or log follow would otherwise hold the server's graceful shutdown
        # (seconds) while handlers still ran against closed stores.
        api_scope = trio.CancelScope()

        async def serve(*, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
                        ) -> None:
            with api_scope:
                await serve_api(self, stop_api, forward=forward,
                                allowed_hosts=self.config.allowed_hosts, task_status=task_status)

        error: Exception | None = None
        async with trio.open_nursery() as front:
            # The API first: it answers while the state loads and allocations re-attach;
            # requests that need the loaded state wait for `ready` (runtime/api/app.py).
            try:
                self.address = await front.start(serve)
                advertise(self.node, self.address, self.config.advertise_http)
                self.api_up.set()
                await self._run_behind_api(stop_api, api_scope, task_status)
            except Exception as e:  # raised as itself below, not inside the API's group
                error = e
                front.cancel_scope.cancel()
            finally:
                stop_api.set()
        if error is not None:
            raise error

    async def _run_behind_api(self, stop_api: trio.Event, api_scope: trio.CancelScope,
                              task_status: trio.TaskStatus[str]) -> None:
        await trio.to_thread.run_sync(_load_parts)
        from yurt.runtime.agent.templatedata import AgentTemplateData
        from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig
        from yurt.runtime.client.allocsync import AllocSyncer
        from yurt.runtime.client.checks.registration import Catalogue, ServiceDeps, expected_checks
        from yurt.runtime.client.checks.runner import CheckRunner
        from yurt.runtime.client.client import Client
        from yurt.runtime.client.devices.fake import FakeDevicePlugin
        from yurt.runtime.client.devices.manager import DeviceManager
        from yurt.runtime.client.devices.nvidia import NvidiaDevicePlugin
        from yurt.runtime.client.devices.protocol import DevicePlugin
        from yurt.runtime.client.pluginmanager.drivers import DriverManager, discover
        from yurt.runtime.client.templating.data import TemplateData
        from yurt.runtime.server import workload_keys
        from yurt.runtime.server.local import LocalServer
        from yurt.runtime.server.periodic_dispatcher import PeriodicDispatcher
        from yurt.runtime.server.state.sqlite import ServerStore
        from yurt.store import open_state_db

        data = self.config.data_dir
        plugins: list[DevicePlugin] = [NvidiaDevicePlugin()]
        if self.config.fake_devices:
            plugins.append(FakeDevicePlugin(list(self.config.fake_devices)))
        self.devices = DeviceManager(plugins, on_change=self._devices_changed)
        client_mode = bool(self.config.servers)
        store = None if client_mode else await ServerStore.open(data / "server")
        # A client-only agent signs its tasks' identities with a key of its own (its JWKS
        # is still served here): the servers' keys do not reach clients over the node RPC.
        self.workload_signer = await trio.to_thread.run_sync(
            workload_keys.load_or_create, data / ("identity" if client_mode else "server"))
        try:
            # Inside a burst of starts, full collections traverse only what is new.
            with freezing_survivors():
                async with (open_state_db(self.config.client_state_dir) as db,
                            trio.open_nursery() as outer):
                    self.drivers = DriverManager(
                        self.config.driver_factories or discover(), state_db=db,
                        unix_clock=time.time_ns, on_info=self._driver_info,
                        route_event=self._route_driver_event, allow=self.config.driver_allow,
                        block=self.config.driver_block, plugin_config=self.config.driver_config)
                    await outer.start(self.drivers.run)
                    await outer.start(self.devices.run)
                    with trio.move_on_after(self.config.device_wait):
                        await self.drivers.first_fingerprints.wait()
                        await self.devices.first_fingerprints.wait()
                    self.db = db
                    template_data: TemplateData
                    catalogue: Catalogue
                    local: LocalServer | None = None
                    if client_mode:
                        from yurt.runtime.agent.clientmode import (
                            ClientTemplateData,
                            UnsentCatalogue,
                        )
                        remote = await self._open_remote()
                        template_data, catalogue = ClientTemplateData(remote), UnsentCatalogue()
                    else:
                        assert store is not None
                        # One index space: the server numbers every event.
                        local = LocalServer(self.node, self.broker, store, owns_events=True,
                                            reschedule=True)
                        self.server = self.server_state = local
                        await local.load()
                        # Indexes kept outside server.db are observed before any new one.
                        from yurt.runtime.server import schedconfig
                        await schedconfig.attach(local, data / "server")
                        from yurt.runtime.server.nodestate import NodeControl  # node drain
                        self.node_control = NodeControl(local,
                                                        data / "server" / "node-state.json")
                        await self.node_control.load()
                        await self._open_host_volumes(local)
                        template_data = AgentTemplateData(self, local.services.query)
                        catalogue = local.services
                        # Before `ready`: nobody reaches the bootstrap endpoint first.
                        self.acl_start = await start_acl(
                            self.config.acl, data, await self.object_store(),
                            dev_mode=self.config.dev_mode)
                    self._acl_loaded.set()
                    self.syncer = AllocSyncer(self.server.update_allocs, db,
                                              unix_clock=time.time_ns,
                                              on_acknowledged=lambda: self.gc.wake())
                    # Every service check of the agent, in one loop (runtime/client/checks/).
                    self.checks = CheckRunner()
                    await outer.start(self.checks.run)
                    self.client = Client(AllocRunnerConfig(
                        state_db=db, drivers=self.drivers.drivers, unix_clock=time.time_ns,
                        alloc_root=self.config.alloc_root, node=self.node,
                        device_manager=self.devices,
                        sign_identity=self.workload_signer.sign,
                        template_data=template_data, artifact=self.config.artifact,
                        services=ServiceDeps(catalogue, self.checks, self.node),
                        expected_checks=expected_checks),
                        self.broker,
                        on_alloc_update=self._alloc_updated,
                        # The server publishes allocations as it commits them: with the
                        # index they took, the one the API answers.
                        publish_alloc_updates=False)
                    self.gc = AllocGarbageCollector(
                        self._destroy, lambda: len(self.client.runners), self.config.alloc_root,
                        self.config.gc, ready=self.syncer.acknowledged_terminal)
                    async with trio.open_nursery() as nursery:
                        await nursery.start(self.client.run)
                        await nursery.start(self._restore)  # re-attaching goes on behind the API
                        nursery.start_soon(self._freeze_when_restored)
                        nursery.start_soon(self._freeze_after_bursts)
                        await nursery.start(self.syncer.run)
                        if self.remote is not None:
                            # Registers, heartbeats and pulls; what was restored runs on
                            # whether or not a server answers.
                            await nursery.start(self.remote.run)
                            # disconnect { stop_on_client_after }: without servers, stop
                            # what asks for it (Nomad's heartbeatStop).
                            nursery.start_soon(watch_heartbeat_stop, self.client,
                                               self._last_server_contact)
                        elif local is not None:
                            # Pending evaluations left by an earlier agent, then blocked
                            # ones retried as capacity frees up.
                            await nursery.start(local.run)
                        await nursery.start(self.gc.run)
                        if local is not None:
                            await nursery.start(self.node_control.run)
                            await nursery.start(PeriodicDispatcher(local).run)
                        nursery.start_soon(self._watch_server, self.server)
                        if local is not None:
                            await local.number_node()  # registered before ready
                        self._node_published = True
                        self.ready.set()
                        self.restoring.serving.set()
                        task_status.started(self.address)
                        await self._stop.wait()
                        stop_api.set()
                        with trio.move_on_after(SHUTDOWN_TIMEOUT, shield=True):
                            await self.restoring.done.wait()  # no runner half restored
                            if self.config.dev_mode:
                                await self.client.destroy_all()
                            else:
                                await self.client.shutdown()
                        if self.acl_start.session_secret:  # `--dev`'s token ends with it
                            with trio.move_on_after(5, shield=True):
                                await end_dev_session(await self.object_store(),
                                                      self.acl_start.session_secret)
                        api_scope.cancel()
                        nursery.cancel_scope.cancel()
                    outer.cancel_scope.cancel()
        finally:
            if store is not None:
                await store.aclose()
            if self.proxy is not None:
                with trio.CancelScope(shield=True), trio.move_on_after(1):
                    await self.proxy.aclose()

    def _last_server_contact(self) -> float | None:
        return self.remote.last_contact if self.remote is not None else None

    async def _open_remote(self) -> RemoteServer:
        """Client mode: the servers, as the `Server` the client side syncs with."""
        from yurt.runtime.agent.proxy import ServerProxy
        from yurt.runtime.api.request import MAX_BODY
        from yurt.runtime.client.remote import RemoteServer, load_or_create_secret

        secret = await trio.to_thread.run_sync(load_or_create_secret, self.config.data_dir)
        # A cluster with a token admits only nodes that know it: the agent's own token.
        remote = RemoteServer(self.node, self.config.servers, secret, token=self.config.token)
        self.server = self.remote = remote
        self.proxy = ServerProxy(remote, max_body=MAX_BODY)
        # No `server_state`: `ClientModeMiddleware` (runtime/agent/clientmode.py) forwards
        # every route that needs more of a server than `RemoteServer` has (the API's
        # `ServerView`: `allocs`, `allocs_for_node`, `visible_index`, `changed`) to a
        # server before any handler runs.
        return remote

    async def _restore(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                       ) -> None:
        """Re-attach to what an earlier agent ran (see runtime/client/restore.py).

        `task_status.started` once all state is read (one transaction): from then on the API
        may answer while allocations re-attach; `self.restoring.done` once every allocation is
        restored and the tasks an interrupted start left behind are reaped."""
        snapshot = await self.db.get_all_state()
        for alloc_id, error in snapshot.errors.items():
            log.error("allocation %s cannot be restored: %s", alloc_id, error)
        self.syncer.load_acknowledged({a.id: snapshot.acknowledged[a.id]
                                       for a in snapshot.allocations
                                       if a.id in snapshot.acknowledged})
        # Oldest first: an allocation that waits for a previous or preempted one finds its
        # runner already restored. The server copy is the desired state; the client view is
        # in the store.
        stored = sorted(snapshot.allocations, key=lambda a: (a.create_index, a.name))
        allocs = [restored_alloc(self.server.allocs.get(a.id, a), a) for a in stored]
        for alloc in stored:  # the client's view as stored: its history is not news
            self._alloc_events.known(alloc)
        self.restoring.begin(stored)
        task_status.started()
        await self.restoring.serving.wait()
        for runner in await reattach_all(self.client, allocs, snapshot.tasks, self.restoring):
            state = runner.alloc_state()
            if is_client_terminal(state.client_status):
                self.gc.mark(runner.id)
            else:
                alloc_log.info("allocation re-attached", extra=fields(
                    alloc_id=runner.id, job=runner.alloc.job_id,
                    group=runner.alloc.task_group, client_status=state.client_status,
                    tasks=sorted(state.task_states)))
        # Tasks a crash left without a persisted handle: stop them, or they would run twice.
        from yurt.runtime.client.drivers.protocol import reconcile_drivers

        if reaped := await reconcile_drivers(self.drivers.drivers.values(),
                                             self.config.alloc_root):
            log.warning("stopped %d task(s) that an interrupted start had left behind", reaped)
        self.restoring.done.set()

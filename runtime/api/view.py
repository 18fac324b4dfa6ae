"""`AgentView`: what the HTTP API's handlers reach of the process they answer for.

Two processes serve this API: `yurt agent` (runtime/agent/agent.py `Agent`: an embedded server
and a client, or a client alone with `--servers`) and `yurt server` (runtime/agent/serverproc.py
`ServerProcess`: a cluster's server, no client). Both implement `AgentView` structurally; the
API imports neither (tests/test_layers.py: api never imports agent), so the agent is free to
build the API and hand it what only it knows (the client mode's forward, app.py `build_app`).

What is here, and why each part is what it is:
- `server`: what every route may read of a server (its index and change event, the
  allocations it holds). The embedded and the cluster server have it, and so has a client-only
  agent's `RemoteServer` (runtime/client/remote.py: this node's allocations, as the servers
  last answered them), which is what its node-local routes (`/v1/client/...`) look up.
- `server_state`: the server the server routes answer from and change. It is the concrete
  `LocalServer` (a cluster's `ClusterServer` is one), not a protocol: the handlers hand it to
  the server's own functions (the scheduler's plan, the periodic launch, the object store),
  which take it whole, and api may import server. None on a client-only agent, whose server
  routes are forwarded to a server before any handler runs (runtime/agent/clientmode.py).
- `client_side`: the allocations this process runs and the parts beside them (the restore in
  progress, the garbage collector, the devices, the workload identity key, the node's drain
  and eligibility). None on a `yurt server`, which runs none: every allocation it shows is
  the server copy.
- `object_store()`: the namespaces and variables (one node's in SQLite, a cluster's in etcd),
  opened by their owner on first use.
- `acl_resolver()`: what turns a request's token into its identity: the ACL system's when ACLs
  are enabled, else one that admits everything, or only the configured token.

Every member is read-only here: the API never replaces a part of the process it answers for.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import trio

from yurt.runtime.client.restore import RestoreProgress
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.acl.settings import AclSettings
from yurt.runtime.structs import Allocation, Node

if TYPE_CHECKING:  # loaded behind the API (the API binds first: tests/test_import_weight.py)
    from yurt.runtime.client.allocrunner.interface import AllocRunner
    from yurt.runtime.client.devices.protocol import DeviceGroup, InstanceStats
    from yurt.runtime.server.acl.identity import TokenResolver
    from yurt.runtime.server.local import LocalServer
    from yurt.runtime.server.state.objects_sqlite import Objects


class ApiConfig(Protocol):
    """What the API reads of the process's configuration (runtime/agent/agent.py
    `AgentConfig`)."""

    @property
    def data_dir(self) -> Path: ...
    @property
    def bind(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def token(self) -> str: ...
    @property
    def datacenter(self) -> str: ...
    @property
    def servers(self) -> tuple[str, ...]:
        """Client mode's servers; empty: the process is (or embeds) a server."""
        ...
    @property
    def http_idle_timeout(self) -> float: ...
    @property
    def advertise_rpc(self) -> str:
        """The agent's `advertise.rpc` (`host:port`), "" when not configured."""
        ...
    @property
    def acl(self) -> AclSettings:
        """The `acl` block: enabled, cache TTLs, token TTL bounds (server/acl/settings.py)."""
        ...


class ServerView(Protocol):
    """What every route may read of the server (see the header)."""

    @property
    def visible_index(self) -> int: ...
    @property
    def changed(self) -> trio.Event: ...
    @property
    def allocs(self) -> Mapping[str, Allocation]: ...
    def allocs_for_node(self) -> list[Allocation]: ...


class ClientView(Protocol):
    """The client's runner look-ups (runtime/client/client.py `Client`)."""

    @property
    def runners(self) -> Mapping[str, AllocRunner]: ...


class Collector(Protocol):
    """The garbage collector of terminal allocations (runtime/client/gc.py)."""

    async def collect(self, alloc_id: str) -> bool: ...
    async def collect_all(self) -> int: ...


class Devices(Protocol):
    """The node's devices and their cached stats (runtime/client/devices/manager.py)."""

    async def refresh_stats(self) -> None: ...
    def stats(self, ids: set[str] | None = None) -> dict[str, InstanceStats]: ...
    def all_groups(self) -> list[DeviceGroup]: ...


class IdentitySigner(Protocol):
    """The key that signs the tasks' workload identities (runtime/server/workload_keys.py)."""

    def jwks(self) -> dict[str, Any]: ...


class NodeControl(Protocol):
    """The node's drain and eligibility, as the embedded server keeps them
    (runtime/server/nodestate.py)."""

    async def set_eligibility(self, eligibility: str) -> int: ...
    async def set_drain(self, deadline: int | None, ignore_system_jobs: bool = False,
                        mark_eligible: bool = False, meta: dict[str, str] | None = None
                        ) -> int: ...
    async def purge(self) -> int: ...


class ClientSide(Protocol):
    """The allocations a process runs, and the parts beside them (see the header)."""

    @property
    def client(self) -> ClientView: ...
    @property
    def restoring(self) -> RestoreProgress: ...
    @property
    def gc(self) -> Collector: ...
    @property
    def devices(self) -> Devices: ...
    @property
    def workload_signer(self) -> IdentitySigner: ...
    @property
    def node_control(self) -> NodeControl: ...


class AgentView(Protocol):
    """The process the API answers for (see the header)."""

    @property
    def config(self) -> ApiConfig: ...
    @property
    def node(self) -> Node:
        """The node this process answers as (a `yurt server`: its name, and no node ID)."""
        ...
    @property
    def started_at(self) -> float: ...
    @property
    def ready(self) -> trio.Event:
        """Set once the state is loaded; until then only the routes that need none answer
        (app.py `needs_state`)."""
        ...
    @property
    def broker(self) -> EventBroker: ...
    @property
    def server(self) -> ServerView: ...
    @property
    def server_state(self) -> LocalServer | None: ...
    @property
    def client_side(self) -> ClientSide | None: ...

    async def state_failure(self) -> str | None:
        """Why the process refuses changes now (its state DB is gone), or None."""
        ...

    async def object_store(self) -> Objects:
        """The namespaces and variables, opened on first use."""
        ...

    async def acl_resolver(self) -> TokenResolver:
        """What turns a request's token into its identity (runtime/server/acl/identity.py),
        made on first use."""
        ...

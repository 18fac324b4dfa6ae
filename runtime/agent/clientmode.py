"""What an agent run with `--servers` puts where the embedded server's parts would be.

An embedded agent answers the whole of Nomad's API from its own `LocalServer`, and its tasks'
templates and service registrations read and write that server's catalogue and variables. A
client-only agent has no such state, and the node RPC (runtime/client/remote.py) carries only
the node and its allocations. Each part here says so rather than pretending:

- `ClientModeMiddleware`: the agent's HTTP API answers its node-local routes itself (agent
  self and health, `/v1/client/...`: file system, logs, exec, stats, checks, restart,
  signal, gc; the metrics; the JWKS of the key that signs this node's workload identities;
  the web UI's page and assets, which hold no data) and forwards every other route to a
  server (`ServerProxy`, runtime/agent/proxy.py), as
  Nomad's client agent forwards them over RPC: the client's own copies would be partial.
- `ClientTemplateData`: a template that reads a Nomad service or variable fails with a
  clear error (the task fails to start, "Template failed: ..."); templates that read only
  the task's environment render as usual.
- `UnsentCatalogue`: service registrations are not sent anywhere (the node RPC has no
  ServiceRegistration.Upsert yet); checks still run here and their results show in
  `/v1/client/allocation/<id>/checks` and in deployment health. Logged once per service.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, Protocol, final

import trio
from starlette.types import ASGIApp, Receive, Scope, Send

from yurt.runtime.agent.templatedata import IndexedServer
from yurt.runtime.api.ui import is_ui_path
from yurt.runtime.gotemplate.parse import TemplateError
from yurt.runtime.structs.noderpc import FORWARDED_HEADER
from yurt.runtime.structs.service import ServiceRegistration
from yurt.runtime.structs.variables import Variable, VariableMetadata

_FORWARDED: Final = FORWARDED_HEADER.lower().encode()

if TYPE_CHECKING:
    from yurt.runtime.agent.proxy import ServerProxy

log = logging.getLogger("yurt.cluster.clientmode")

#: What the client answers itself, what concerns this node only: these paths, and every
#: path under `/v1/client/`.
NODE_LOCAL_PATHS: Final = frozenset({"/v1/agent/self", "/v1/agent/health", "/v1/metrics",
                                     "/.well-known/jwks.json",
                                     # this agent's own log (api/agent.py `agent_monitor`)
                                     "/v1/agent/monitor"})
NODE_LOCAL_PREFIX: Final = "/v1/client/"


def node_local(path: str) -> bool:
    return path in NODE_LOCAL_PATHS or path.startswith(NODE_LOCAL_PREFIX)


def alloc_ref(path: str) -> str | None:
    """The allocation ID (or prefix) a node-local route is about, if any."""
    parts = path.split("/")
    if path.startswith("/v1/client/fs/") and len(parts) >= 6:
        return parts[5]
    if path.startswith("/v1/client/allocation/") and len(parts) >= 5:
        return parts[4]
    return None


class ForwardingAgent(Protocol):
    """What the middleware reads of the agent (agent.py `Agent`); and its `client`, once the
    agent made it behind the API (`_elsewhere`)."""

    @property
    def ready(self) -> trio.Event: ...
    @property
    def proxy(self) -> ServerProxy | None:
        """Where the servers' routes go; made with the agent's parts, by `ready`."""
        ...


@final
class ClientModeMiddleware:
    """Node-local routes to the agent's app; every other one to the servers (see above)."""

    def __init__(self, app: ASGIApp, agent: ForwardingAgent) -> None:
        self.app = app
        self.agent = agent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] not in ("http", "websocket") or is_ui_path(path) or (
                node_local(path) and not self._elsewhere(scope)):
            await self.app(scope, receive, send)
            return
        await self.agent.ready.wait()  # the proxy exists once the agent's parts do
        proxy = self.agent.proxy
        assert proxy is not None, "client mode without a proxy"
        await proxy(scope, receive, send)


    def _elsewhere(self, scope: Scope) -> bool:
        """Whether a node-local route is about an allocation another node runs: the server
        forwards it there (runtime/api/noderpc.py `to_node`), so any agent answers for any
        allocation, as Nomad's do."""
        ref = alloc_ref(scope.get("path", ""))
        client = getattr(self.agent, "client", None)
        # A server's forward is answered here, known or not: never sent back (a loop).
        forwarded = any(k.lower() == _FORWARDED for k, _ in scope.get("headers", []))
        if not ref or client is None or forwarded:
            return False
        return not any(alloc_id.startswith(ref) for alloc_id in client.runners)


@final
class ClientTemplateData:
    """`TemplateData` for a client-only agent: no services, no variables (see the header)."""

    def __init__(self, server: IndexedServer) -> None:
        self._server = server

    async def services(self, namespace: str, name: str) -> list[ServiceRegistration]:
        await trio.lowlevel.checkpoint()
        raise TemplateError(f"nomadService {name!r}: {_NO_CATALOGUE}")

    async def all_services(self, namespace: str) -> list[ServiceRegistration]:
        await trio.lowlevel.checkpoint()
        raise TemplateError(f"nomadServices: {_NO_CATALOGUE}")

    async def variable(self, namespace: str, path: str) -> Variable | None:
        await trio.lowlevel.checkpoint()
        raise TemplateError(f"nomadVar {path!r}: {_NO_VARIABLES}")

    async def variable_list(self, namespace: str, prefix: str) -> list[VariableMetadata]:
        await trio.lowlevel.checkpoint()
        raise TemplateError(f"nomadVarList {prefix!r}: {_NO_VARIABLES}")

    def index(self) -> int:
        return self._server.visible_index

    async def wait_changed(self, after: int) -> int:
        while self._server.visible_index <= after:
            await self._server.changed.wait()
        return self._server.visible_index


_NO_CATALOGUE: Final = ("a client-only agent (--servers) has no Nomad service catalogue "
                        "to read")
_NO_VARIABLES: Final = "a client-only agent (--servers) has no Nomad variables to read"


@final
class UnsentCatalogue:
    """The service hooks' catalogue for a client-only agent: registrations go nowhere."""

    def __init__(self) -> None:
        self._logged: set[str] = set()

    async def upsert(self, regs: list[ServiceRegistration]) -> int | None:
        await trio.lowlevel.checkpoint()
        for reg in regs:
            if reg.service_name not in self._logged:
                self._logged.add(reg.service_name)
                log.warning("service %r is not registered: a client-only agent (--servers) "
                            "does not send service registrations to the servers yet",
                            reg.service_name)
        return None

    async def deregister(self, ids: list[str]) -> int | None:
        await trio.lowlevel.checkpoint()
        return None

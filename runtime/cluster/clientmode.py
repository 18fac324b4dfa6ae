"""What an agent run with `--servers` puts where the embedded server's parts would be.

An embedded agent answers the whole of Nomad's API from its own `LocalServer`, and its tasks'
templates and service registrations read and write that server's catalogue and variables. A
client-only agent has no such state, and the node RPC (runtime/cluster/remote.py) carries only
the node and its allocations. Each part here says so rather than pretending:

- `ClientModeMiddleware`: the agent's HTTP API answers its node-local routes (agent self and
  health, `/v1/client/...`: file system, logs, exec, stats, checks, restart, signal, gc; the
  metrics; the JWKS of the key that signs this node's workload identities) and 501 with a
  JSON error naming `--servers` for every server route (jobs, allocations, nodes,
  evaluations, deployments, services, variables, operator, search, events): those are the
  servers' to answer, and a stale or partial answer from the client would mislead.
  Forwarding them to the current server is possible later (a streaming proxy); refusing is
  the honest answer until then.
- `ClientTemplateData`: a template that reads a Nomad service or variable fails with a
  clear error (the task fails to start, "Template failed: ..."); templates that read only
  the task's environment render as usual.
- `UnsentCatalogue`: service registrations are not sent anywhere (the node RPC has no
  ServiceRegistration.Upsert yet); checks still run here and their results show in
  `/v1/client/allocation/<id>/checks` and in deployment health. Logged once per service.
"""

from __future__ import annotations

import logging
from typing import Final, final

import msgspec
import trio
from starlette.types import ASGIApp, Receive, Scope, Send

from yurt.runtime.gotemplate.parse import TemplateError
from yurt.runtime.server.variables import Variable, VariableMetadata
from yurt.runtime.structs.service import ServiceRegistration

log = logging.getLogger("yurt.cluster.clientmode")

#: Paths the client answers itself: what concerns this node only.
NODE_LOCAL_PREFIXES: Final = ("/v1/client/", "/v1/agent/self", "/v1/agent/health",
                              "/v1/metrics", "/.well-known/jwks.json")

NO_SERVER_STATE: Final = ("this agent runs as a client of the servers given with --servers "
                          "and holds no server state; ask a server for this")


def node_local(path: str) -> bool:
    return any(path == p.rstrip("/") or path.startswith(p) for p in NODE_LOCAL_PREFIXES)


@final
class ClientModeMiddleware:
    """501 with `{"error": ...}` for every HTTP request to a server route; websockets to a
    server route (the event stream) are closed with 1011 and the same reason."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or node_local(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1011, "reason": NO_SERVER_STATE})
            return
        body = msgspec.json.encode({"error": NO_SERVER_STATE})
        await send({"type": "http.response.start", "status": 501,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _Changes:
    """What `ClientTemplateData` needs of the remote server: its index and change event."""

    visible_index: int

    @property
    def changed(self) -> trio.Event:
        raise NotImplementedError


@final
class ClientTemplateData:
    """`TemplateData` for a client-only agent: no services, no variables (see the header)."""

    def __init__(self, server: object) -> None:
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
        index: int = getattr(self._server, "visible_index", 0)
        return index

    async def wait_changed(self, after: int) -> int:
        while self.index() <= after:
            changed: trio.Event = getattr(self._server, "changed")  # noqa: B009
            await changed.wait()
        return self.index()


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

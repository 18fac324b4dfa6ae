"""An agent whose tokens are the test's own policies, and probes that tell a refusal from any
other answer, over HTTP and websockets (layer 2: an in-process agent on a real socket).

`PolicyResolver` is a `TokenResolver` (runtime/server/acl/identity.py): each secret it hands
out resolves to `Identity(token, compile_acl([parse_policy(text)]))`, so every check runs
against real policies through the real parser and compiler; "" is the anonymous token (no
policy), an unknown secret is `ACL token not found`, as the ACL system's resolver answers.

A refusal is what the guard (runtime/api/authz.py) or a handler answers for a need not met or
a token that cannot act: 403 over HTTP; a websocket accepted and closed with 1008 and Nomad's
text as the reason (`Permission denied`, `ACL token not found`).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx2
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    TextMessage,
)
from wsproto.events import Request as WsRequest

from tests.agent_support import mock_job
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.server.acl.acl import MANAGEMENT_ACL, compile_acl
from yurt.runtime.server.acl.identity import AclTokenError, Identity, TokenResolver
from yurt.runtime.server.acl.policy import parse_policy
from yurt.runtime.server.acl.settings import BOOTSTRAP_MANUAL, AclSettings
from yurt.runtime.structs.acl import AclToken

#: What a refusal says (nomad/structs/errors.go): a need not met, a token that is not known.
REFUSALS: Final = ("Permission denied", "ACL token not found", "ACL token expired")
NOT_A_TOKEN: Final = "00000000-0000-4000-8000-000000000000"


@dataclass
class PolicyResolver:
    """Secrets of the test's policies (see the header)."""

    identities: dict[str, Identity] = field(default_factory=dict)
    _serial: itertools.count[int] = field(default_factory=itertools.count)

    def token(self, policy: str) -> str:
        """A new secret acting under `policy` (HCL or JSON, Nomad's policy language)."""
        secret = f"secret-{next(self._serial)}"
        self.identities[secret] = Identity(
            AclToken(accessor_id=f"accessor-{secret}", secret_id=secret,
                     policies=[f"policy-{secret}"]),
            compile_acl([parse_policy(policy, name=f"policy-{secret}")]))
        return secret

    def management(self) -> str:
        secret = f"secret-{next(self._serial)}"
        self.identities[secret] = Identity(
            AclToken(accessor_id=f"accessor-{secret}", secret_id=secret, type="management"),
            MANAGEMENT_ACL)
        return secret

    async def resolve(self, secret: str) -> Identity:
        await trio.lowlevel.checkpoint()
        if not secret:
            return Identity(None, compile_acl([]))
        found = self.identities.get(secret)
        if found is None:
            raise AclTokenError("ACL token not found")
        return found


@dataclass
class AclAgent:
    agent: Agent
    address: str
    resolver: PolicyResolver
    #: Acts under the management token.
    admin: httpx2.AsyncClient

    @property
    def host_port(self) -> tuple[str, int]:
        host, port = self.address.removeprefix("http://").rsplit(":", 1)
        return host, int(port)


@asynccontextmanager
async def acl_agent(data_dir: Path) -> AsyncIterator[AclAgent]:
    """An agent in dev mode whose API resolves tokens with a `PolicyResolver`."""
    # ACLs on, so that the ACL endpoints reach their own checks; never bootstrapped: every
    # identity is the test resolver's.
    agent = Agent(AgentConfig(data_dir=data_dir, port=0, dev_mode=True,
                              acl=AclSettings(enabled=True, bootstrap=BOOTSTRAP_MANUAL)))
    resolver = PolicyResolver()

    async def acl_resolver() -> TokenResolver:
        await trio.lowlevel.checkpoint()
        return resolver

    # The seam the agent hands its routes' guard (runtime/api/app.py `build_app`), read when
    # the app is built: the test's resolver instead of the agent's.
    agent.acl_resolver = acl_resolver  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        address = await nursery.start(agent.run)
        headers = {"X-Nomad-Token": resolver.management()}
        async with httpx2.AsyncClient(base_url=address, headers=headers, timeout=20) as admin:
            try:
                yield AclAgent(agent, address, resolver, admin)
            finally:
                agent.stop()


@dataclass(frozen=True)
class Answer:
    status: int
    #: The body of a refusal (403 or 1008), "" for any other answer (not read: it may be a
    #: stream that never ends).
    text: str

    @property
    def refused(self) -> bool:
        return self.status in (403, 1008) and self.text.strip() in REFUSALS


async def http_answer(client: httpx2.AsyncClient, method: str, url: str, secret: str | None,
                      body: bytes | None = None) -> Answer:
    """The status of `method url` with `secret` (None: no token header at all), and its
    text when it is a 403."""
    headers = {} if secret is None else {"X-Nomad-Token": secret}
    async with client.stream(method, url, headers=headers, content=body) as response:
        if response.status_code == 403:
            return Answer(403, (await response.aread()).decode(errors="replace"))
        return Answer(response.status_code, "")


async def ws_answer(host: str, port: int, target: str, secret: str | None,
                    message: str | None = None) -> Answer:
    """Opens a websocket at `target` with `secret` and answers how the server went on.

    Without `message`, the socket is closed at once and the answer is the code and reason of
    the server's close: the guard's refusal (sent right after the accept, before the server
    reads anything) arrives before the echo of ours. With `message` (for a handler that
    checks after the accept, and answers the message when it lets the session run), the
    message is sent and the answer is the server's first frame: its close, or 101 for a
    message."""
    ws = WSConnection(ConnectionType.CLIENT)
    headers = [] if secret is None else [(b"X-Nomad-Token", secret.encode())]
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(ws.send(WsRequest(host=f"{host}:{port}", target=target,
                                                extra_headers=headers)))
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return Answer(1006, "")
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    await stream.send_all(ws.send(
                        CloseConnection(code=1000) if message is None
                        else TextMessage(data=message)))
                elif isinstance(event, RejectConnection):
                    return Answer(event.status_code, "")
                elif isinstance(event, Ping):
                    await stream.send_all(ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    return Answer(event.code, event.reason or "")
                elif isinstance(event, Message):
                    await stream.send_all(ws.send(CloseConnection(code=1000)))
                    return Answer(101, "")


def rolled_out(job_id: str, namespace: str = "default") -> dict[str, Any]:
    """A mock job whose first version is a deployment (health set by hand: it stays)."""
    doc = mock_job(job_id)
    doc["Job"]["Namespace"] = namespace
    doc["Job"]["TaskGroups"][0]["Update"] = {"MaxParallel": 1, "HealthCheck": "manual"}
    return doc

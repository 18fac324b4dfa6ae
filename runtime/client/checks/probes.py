"""The probes of Nomad-provider service checks: one execution of an http, tcp or script check,
judged as Nomad's checker does (client/serviceregistration/checks/client.go).

- http: `<protocol>://<address>:<port><path>` with the check's method, headers and body. 200
  is success with output "nomad: http ok"; any other status below 400 is success and 400 or
  above failure, both with the first KiB of the body as output; a request that fails is a
  failure with "nomad: <error>".
- tcp: a connection that opens is success, "nomad: tcp ok"; one that does not, a failure
  with the error.
- script: the command through the task's exec path (the driver's `exec_task`, as `alloc
  exec` runs); exit 0 is success, anything else failure, the output its combined output.

One `HttpProber` serves every http check of the agent, with kept-alive connections reused
across probes and no thread hop: plain http through http1.py's lean exchange (see there why
not httpx2), https through one pooled httpx2 client, imported when the first https check
runs (the daemon does not load the HTTP client otherwise).
Timeouts are the caller's cancel scope (runner.py), not a parameter here.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import trio

from yurt.runtime.client.checks.http1 import MAX_DRAIN, ConnectionPool, ResponseError, build_request
from yurt.runtime.structs.checks import CHECK_FAILURE, CHECK_SUCCESS

if TYPE_CHECKING:
    import httpx2

#: How much of a response body becomes a result's output.
MAX_OUTPUT: Final = 1024
#: Connections the pooled client keeps (the runner bounds probes in flight below this).
POOL_SIZE: Final = 64
USER_AGENT: Final = "Nomad/yurt check"


@dataclass(frozen=True)
class Outcome:
    status: str
    output: str
    status_code: int = 0


@dataclass(frozen=True)
class HttpTarget:
    host: str
    port: int
    path: str
    method: str = "GET"
    protocol: str = "http"
    headers: dict[str, list[str]] = field(default_factory=dict)
    body: str = ""

    @functools.cached_property
    def request(self) -> bytes:
        """The request, built once for every probe of the check."""
        return build_request(self.method or "GET", self.host, self.port, self.path,
                             self.headers, self.body, USER_AGENT)

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        path = self.path if self.path.startswith("/") else "/" + self.path
        return f"{self.protocol or 'http'}://{host}:{self.port}{path}"


#: A script check's command run beside its task: (exit code, combined output).
ScriptRunner = Callable[[], Awaitable[tuple[int, str]]]


class HttpProber:
    """Every http probe of the agent: plain http over one pool of kept-alive connections
    (http1.py), https over one pooled httpx2 client. `aclose` closes both."""

    def __init__(self) -> None:
        self._client: httpx2.AsyncClient | None = None
        self._pool = ConnectionPool()

    def _pooled(self) -> httpx2.AsyncClient:
        if self._client is None:
            import httpx2  # only an agent with https checks pays for the import

            self._client = httpx2.AsyncClient(
                limits=httpx2.Limits(max_connections=POOL_SIZE,
                                     max_keepalive_connections=POOL_SIZE),
                timeout=None, follow_redirects=False, trust_env=False)
        return self._client

    async def probe(self, target: HttpTarget) -> Outcome:
        if (target.protocol or "http") == "http":
            try:
                code, body = await self._pool.exchange(
                    target.host, target.port, target.request, max_body=MAX_OUTPUT,
                    head_only=target.method == "HEAD")
            except (OSError, trio.BrokenResourceError, ResponseError) as e:
                return Outcome(CHECK_FAILURE, f"nomad: {_describe(e, target)}")
            return _judge(code, body)
        return await self._probe_https(target)

    def forget(self, target: HttpTarget) -> None:
        """No check probes `target`'s host and port any more: drop its idle connections."""
        self._pool.forget(target.host, target.port)

    async def _probe_https(self, target: HttpTarget) -> Outcome:
        import httpx2

        client = self._pooled()
        headers = [(k, v) for k, values in target.headers.items() for v in values]
        if not any(k.lower() == "user-agent" for k, _ in headers):
            headers.append(("User-Agent", USER_AGENT))
        try:
            async with client.stream(target.method or "GET", target.url(), headers=headers,
                                     content=target.body.encode() or None) as response:
                code = response.status_code
                # Read to the end when the body is small, so the connection goes back to the
                # pool; a larger one is cut off and its connection closed.
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_DRAIN:
                        break
        except httpx2.HTTPError as e:
            return Outcome(CHECK_FAILURE, f"nomad: {e or type(e).__name__}")
        return _judge(code, bytes(body))

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + 5
            await self._pool.aclose()
            if self._client is not None:
                client, self._client = self._client, None
                await client.aclose()


def _judge(code: int, body: bytes) -> Outcome:
    if code == 200:
        return Outcome(CHECK_SUCCESS, "nomad: http ok", code)
    status = CHECK_SUCCESS if code < 400 else CHECK_FAILURE
    return Outcome(status, body[:MAX_OUTPUT].decode(errors="replace"), code)


def _describe(e: Exception, target: HttpTarget) -> str:
    """Go's wording, roughly: what failed, on which URL."""
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
    return f'{target.method or "GET"} "{target.url()}": {reason}'


async def probe_tcp(host: str, port: int) -> Outcome:
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError as e:
        return Outcome(CHECK_FAILURE, f"dial tcp {host}:{port}: {e.strerror or e}")
    await stream.aclose()
    return Outcome(CHECK_SUCCESS, "nomad: tcp ok")


async def probe_script(run: ScriptRunner) -> Outcome:
    try:
        code, output = await run()
    except Exception as e:  # the task is gone, its driver refused: a failing check
        return Outcome(CHECK_FAILURE, str(e))
    return Outcome(CHECK_SUCCESS if code == 0 else CHECK_FAILURE, output[-MAX_OUTPUT:])

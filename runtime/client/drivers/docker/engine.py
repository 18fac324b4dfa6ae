"""`DockerEngine`: the Docker Engine API over its unix socket (or TCP), with httpx2 under Trio.

Why httpx2 and not docker-py: docker-py is synchronous (requests), so every call would cost a
worker thread, and a `follow` stream or a container `wait` would hold one for the task's whole
life; httpx2 is already yurt's HTTP client (the CLI, the node RPC, etcd), speaks HTTP/1.1 over
a unix socket (`uds=`), and is cancellable under Trio. The Engine API is plain JSON over HTTP,
so what docker-py would add is a few hundred lines of typed wrappers we do not need.

The daemon's address is Nomad's (drivers/docker/config.go `endpoint`; fingerprint.go reads
`DOCKER_HOST` when it is unset): `unix:///path`, `tcp://host:port` or `http://host:port`.
Requests name the API version the daemon negotiated once (`/vX.Y/...`, the lower of the
daemon's and `API_VERSION`), as the docker CLI does.

Invariants: an Engine API error (status >= 400) raises `DockerError` carrying Docker's own
`message` (so a Driver Failure event says what Docker said), and a daemon that cannot be
reached raises `DockerUnreachable` (recoverable: the daemon may come back); nothing here
retries — the caller's restart policy or fingerprint loop does.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import httpx2

from yurt.runtime.errors import DriverError

DEFAULT_ENDPOINT: Final = "unix:///var/run/docker.sock"
#: The newest Engine API this client was written against; an older daemon's is used instead.
API_VERSION: Final = "1.41"
DEFAULT_TIMEOUT: Final = 30.0


class DockerError(DriverError):
    """The Engine API answered with an error: `status`, and Docker's `message`."""

    def __init__(self, status: int, message: str, *, recoverable: bool = False) -> None:
        super().__init__(message, recoverable=recoverable)
        self.status = status


class DockerUnreachable(DockerError):
    """The daemon did not answer at all (not running, socket gone, refused)."""

    def __init__(self, endpoint: str, cause: str) -> None:
        super().__init__(0, f"cannot reach the docker daemon at {endpoint}: {cause}",
                         recoverable=True)


def endpoint_from(configured: str, environ: Mapping[str, str] = os.environ) -> str:
    """The daemon to talk to: the plugin's `endpoint`, else `$DOCKER_HOST`, else the default
    socket (drivers/docker/driver.go `newDockerClient`)."""
    return configured or environ.get("DOCKER_HOST", "") or DEFAULT_ENDPOINT


def _transport(endpoint: str) -> tuple[httpx2.AsyncHTTPTransport, str, str | None]:
    """The transport, the base URL and the unix socket path (None for TCP) of `endpoint`."""
    if endpoint.startswith("unix://"):
        path = endpoint.removeprefix("unix://")
        return httpx2.AsyncHTTPTransport(uds=path), "http://docker", path
    if endpoint.startswith(("tcp://", "http://")):
        address = endpoint.split("://", 1)[1]
        return httpx2.AsyncHTTPTransport(), f"http://{address}", None
    raise DriverError(f"docker endpoint {endpoint!r}: expected unix://PATH or tcp://HOST:PORT")


def _error_message(response: httpx2.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or f"HTTP {response.status_code}"
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return response.text.strip()


class DockerEngine:
    """One daemon's Engine API. `request` for JSON calls, `stream` for bodies read as they
    come (logs, pulls, stats, attach)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        transport, base, self.socket_path = _transport(endpoint)
        self._client = httpx2.AsyncClient(transport=transport, base_url=base,
                                          timeout=DEFAULT_TIMEOUT)
        self._version: str | None = None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def api_version(self) -> str:
        """The API version requests use: the lower of the daemon's and `API_VERSION`."""
        if self._version is None:
            version = await self.request("GET", "/version", versioned=False)
            theirs = str(version.get("ApiVersion", API_VERSION))
            as_tuple = lambda v: tuple(int(p) for p in v.split("."))  # noqa: E731
            self._version = min(theirs, API_VERSION, key=as_tuple)
        return self._version

    async def _url(self, path: str, versioned: bool) -> str:
        return f"/v{await self.api_version()}{path}" if versioned else path

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: object = None,
                      content: bytes | AsyncIterable[bytes] | None = None,
                      headers: Mapping[str, str] | None = None,
                      read_timeout: float | None = DEFAULT_TIMEOUT,
                      versioned: bool = True) -> Any:
        """Call the API; the decoded JSON answer (None when empty). `read_timeout` bounds
        each wait for a byte (httpx's read timeout: None for a call such as a container
        `wait` that answers only when something happens); the caller's cancel scopes bound
        the whole call.

        Raises:
            DockerError: the daemon answered with an error (its message).
            DockerUnreachable: the daemon did not answer.
        """
        try:
            response = await self._client.request(
                method, await self._url(path, versioned), params=params,
                content=json.dumps(body).encode() if body is not None else content,
                headers={"Content-Type": "application/json", **(headers or {})}
                if body is not None else headers,
                timeout=httpx2.Timeout(DEFAULT_TIMEOUT, read=read_timeout))
        except httpx2.TransportError as e:
            raise DockerUnreachable(self.endpoint, str(e) or type(e).__name__) from e
        if response.status_code >= 400:
            raise DockerError(response.status_code, _error_message(response))
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text

    @asynccontextmanager
    async def stream(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                     body: object = None,
                     content: bytes | AsyncIterable[bytes] | None = None,
                     read_timeout: float | None = None
                     ) -> AsyncIterator[AsyncIterator[bytes]]:
        """A response body read as it arrives (no read timeout by default: a follow stream
        is quiet for as long as its container is).

        Raises:
            DockerError, DockerUnreachable: as `request`.
        """
        try:
            async with self._client.stream(
                    method, await self._url(path, True), params=params,
                    content=json.dumps(body).encode() if body is not None else content,
                    headers={"Content-Type": "application/json"} if body is not None else None,
                    timeout=httpx2.Timeout(DEFAULT_TIMEOUT, read=read_timeout)) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise DockerError(response.status_code, _error_message(response))
                yield response.aiter_bytes()
        except httpx2.TransportError as e:
            raise DockerUnreachable(self.endpoint, str(e) or type(e).__name__) from e

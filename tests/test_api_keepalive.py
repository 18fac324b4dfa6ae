"""Idle keep-alive connections (layer 2, real sockets, real clock).

Clients that poll pool their connections: python-nomad polls every 5 s, which is exactly
hypercorn's default idle limit, and its pooled connections were reset under it. The agent keeps
an idle connection open for `http_idle_timeout` (five minutes unless configured) and closes it
after that; it serves any number of requests on one connection; and a body answered unread
does not cost the client its connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from yurt.runtime.agent.agent import Agent, AgentConfig

REQUEST = b"GET /v1/agent/self HTTP/1.1\r\nHost: localhost\r\n\r\n"


async def _answer(stream: trio.SocketStream) -> bytes:
    """One whole response to `REQUEST` (its body is sized by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        assert chunk, "the agent closed the connection"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += await stream.receive_some(65536)
    return head


@asynccontextmanager
async def _connection(tmp_path: Path, **settings: float) -> AsyncIterator[trio.SocketStream]:
    """A raw connection to a fresh agent (stopped when the block ends)."""
    agent = Agent(AgentConfig(data_dir=tmp_path, port=0, dev_mode=True, **settings))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(agent.run)
        host, port = address.removeprefix("http://").rsplit(":", 1)
        try:
            async with await trio.open_tcp_stream(host, int(port)) as stream:
                yield stream
        finally:
            agent.stop()


async def _exchange(stream: trio.SocketStream, request: bytes) -> bytes:
    await stream.send_all(request)
    return await _answer(stream)


async def _still_open_after(tmp_path: Path, idle_for: float, **settings: float) -> bool:
    """Whether a connection left idle for `idle_for` seconds after one request answers a
    second one (False: the agent closed it meanwhile)."""
    async with _connection(tmp_path, **settings) as stream:
        assert (await _exchange(stream, REQUEST)).startswith(b"HTTP/1.1 200")
        with trio.move_on_after(idle_for):
            assert await stream.receive_some(1) == b"", "bytes nobody asked for"
            return False
        return (await _exchange(stream, REQUEST)).startswith(b"HTTP/1.1 200")


async def test_an_idle_connection_outlives_the_five_seconds_clients_poll_at(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        assert await _still_open_after(tmp_path, 6.0)


async def test_an_idle_connection_closes_after_the_configured_timeout(tmp_path: Path) -> None:
    with trio.fail_after(30):
        assert not await _still_open_after(tmp_path, 10.0, http_idle_timeout=1.0)


async def test_a_body_answered_unread_leaves_the_connection_usable(tmp_path: Path) -> None:
    """A 405 or a 404 given before the body is read: the next request on the same
    connection is still answered (hypercorn alone closed it without a word)."""
    body = b"x" * 300_000
    with trio.fail_after(30):
        async with _connection(tmp_path) as stream:
            for method, path in (("PATCH", "/v1/jobs"), ("GET", "/v1/job/nope"),
                                 ("DELETE", "/v1/agent/self")):
                head = await _exchange(stream, (
                    f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
                assert head.split(b" ")[1] in (b"404", b"405"), head
                assert b"connection: close" not in head.lower(), head
            assert (await _exchange(stream, REQUEST)).startswith(b"HTTP/1.1 200")


async def test_a_body_too_slow_to_drop_is_answered_with_connection_close(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with _connection(tmp_path) as stream:
            # Declares far more than it sends: the answer cannot wait for the rest.
            head = await _exchange(stream, b"PATCH /v1/jobs HTTP/1.1\r\nHost: localhost\r\n"
                                   b"Content-Length: 100000000\r\n\r\npartial")
            assert head.startswith(b"HTTP/1.1 405"), head
            assert b"connection: close" in head.lower(), head


async def test_a_connection_serves_more_than_a_thousand_requests(tmp_path: Path) -> None:
    """hypercorn's default closes a connection after 1,000 requests; Nomad's server never."""
    with trio.fail_after(60):
        async with _connection(tmp_path) as stream:
            for _ in range(1001):
                head = await _exchange(stream, REQUEST)
                assert head.startswith(b"HTTP/1.1 200"), head
                assert b"connection: close" not in head.lower(), head

"""Plain-http health probes over kept-alive trio streams: the request bytes are built once
per check, the response's status line and framing headers read with a few byte searches.

Why not the pooled httpx2 client for these: `scripts/bench_checks` measured it at about
0.5 ms of agent CPU per probe, 5 % of a core for 1,000 checks at 10 s, against a target of
well under 1 %; h11 alone (the parser under httpx) costs ~40 µs per exchange, as much as the
socket round trip. A health probe needs only the status code, the first KiB of the body and
whether the connection can be reused, so this reads exactly that: HTTPS checks still go
through httpx2 (probes.py), where TLS costs more than parsing anyway.

What is understood: HTTP/1.0 and 1.1 status lines, interim 1xx responses (skipped), bodies
framed by Content-Length, chunked bodies, bodies that end with the connection, and no body
for HEAD, 204 and 304. A connection goes back to the pool only when its response was read to
its end within `MAX_DRAIN` bytes and neither side asked to close it; anything else (a
timeout's cancellation included) closes it. A kept-alive connection the server closed
meanwhile is retried once on a fresh one, as HTTP clients do.
"""

from __future__ import annotations

from typing import Final, final

import trio

#: Largest response head accepted.
MAX_HEAD: Final = 16 * 1024
#: The most of a body read to keep its connection for the next probe.
MAX_DRAIN: Final = 64 * 1024
#: Idle connections kept per target: as many as probes may be in flight (runner.py's
#: DEFAULT_CONCURRENCY), or checks sharing a target would keep opening connections.
MAX_IDLE: Final = 32


class ResponseError(Exception):
    """The server's answer is not HTTP/1.x as this reader understands it."""


def build_request(method: str, host: str, port: int, path: str,
                  headers: dict[str, list[str]], body: str, user_agent: str) -> bytes:
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"{method} {path if path.startswith('/') else '/' + path} HTTP/1.1"]
    names = {k.lower() for k in headers}
    if "host" not in names:
        lines.append(f"Host: {authority}")
    if "user-agent" not in names:
        lines.append(f"User-Agent: {user_agent}")
    lines += [f"{k}: {v}" for k, values in headers.items() for v in values]
    payload = body.encode()
    if payload or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(payload)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


class _Reader:
    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.eof = False

    async def more(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            self.eof = True
        self.buf += data


def _dechunk(data: bytes) -> tuple[bytes, bool]:
    """The body of a chunked `data`, and whether its last chunk was seen."""
    out = bytearray()
    pos = 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return bytes(out), False
        try:
            size = int(data[pos:end].split(b";", 1)[0], 16)
        except ValueError:
            raise ResponseError("malformed chunked encoding") from None
        if size == 0:
            return bytes(out), data.find(b"\r\n", end + 2) >= 0
        out += data[end + 2:end + 2 + size]
        pos = end + 2 + size + 2
        if pos > len(data):
            return bytes(out), False


async def read_response(stream: trio.abc.ReceiveStream, *, head_only: bool,
                        max_body: int) -> tuple[int, bytes, bool]:
    """(status code, up to `max_body` bytes of body, whether the connection may be reused)."""
    r = _Reader(stream)
    while True:
        while (end := r.buf.find(b"\r\n\r\n")) < 0:
            if len(r.buf) > MAX_HEAD:
                raise ResponseError("response header too large")
            await r.more()
            if r.eof:
                raise ResponseError("EOF")
        head = bytes(r.buf[:end]).decode("latin-1")
        del r.buf[:end + 4]
        status, *lines = head.split("\r\n")
        version, _, rest = status.partition(" ")
        if not version.startswith("HTTP/1.") or not rest[:3].isdigit():
            raise ResponseError(f"malformed HTTP response {status[:40]!r}")
        code = int(rest[:3])
        if 100 <= code < 200 and code != 101:
            continue  # an interim response: the real one follows
        break
    fields: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip().lower()
    connection = fields.get("connection", "")
    reusable = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
    if head_only or code in (204, 304):
        return code, b"", reusable
    if "chunked" in fields.get("transfer-encoding", ""):
        while True:
            body, done = _dechunk(bytes(r.buf))
            if done or r.eof or len(r.buf) > MAX_DRAIN:
                return code, body[:max_body], reusable and done and not r.eof
            await r.more()
    if "content-length" in fields:
        try:
            length = int(fields["content-length"])
        except ValueError:
            raise ResponseError("malformed Content-Length") from None
        want = length if length <= MAX_DRAIN else max_body
        while len(r.buf) < want and not r.eof:
            await r.more()
        complete = len(r.buf) == length
        return code, bytes(r.buf[:max_body]), reusable and complete
    while not r.eof and len(r.buf) <= MAX_DRAIN:  # the body ends with the connection
        await r.more()
    return code, bytes(r.buf[:max_body]), False


@final
class ConnectionPool:
    """Idle kept-alive connections per (host, port)."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[trio.SocketStream]] = {}

    async def exchange(self, host: str, port: int, request: bytes, *, head_only: bool,
                       max_body: int) -> tuple[int, bytes]:
        """Send `request`, read the response: (status code, the start of its body)."""
        idle = self._idle.get((host, port))
        if idle:
            stream = idle.pop()
            try:
                return await self._exchange(stream, host, port, request, head_only, max_body)
            except (trio.BrokenResourceError, ResponseError, OSError):
                pass  # closed by the server while idle: once more on a new connection
        stream = await trio.open_tcp_stream(host, port)
        return await self._exchange(stream, host, port, request, head_only, max_body)

    async def _exchange(self, stream: trio.SocketStream, host: str, port: int,
                        request: bytes, head_only: bool, max_body: int) -> tuple[int, bytes]:
        keep = False
        try:
            await stream.send_all(request)
            code, body, keep = await read_response(stream, head_only=head_only,
                                                   max_body=max_body)
        finally:
            if keep:
                idle = self._idle.setdefault((host, port), [])
                if len(idle) < MAX_IDLE:
                    idle.append(stream)
                else:
                    keep = False
            if not keep:
                await trio.aclose_forcefully(stream)
        return code, body

    def forget(self, host: str, port: int) -> None:
        """Close the idle connections to a target no check uses any more (sockets are
        closed synchronously: nothing to flush on an idle HTTP connection)."""
        for stream in self._idle.pop((host, port), []):
            stream.socket.close()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for streams in idle.values():
            for stream in streams:
                await trio.aclose_forcefully(stream)

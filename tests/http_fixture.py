"""A tiny local HTTP server for check tests (real sockets): `/ok` answers 200, `/redirect`
302, `/fail` 500 with a body, `/slow` never answers, and `state.healthy = False` turns `/ok`
into a 503. Keep-alive connections are served until the client closes them."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio


@dataclass
class HttpState:
    healthy: bool = True
    hits: int = 0
    connections: int = 0
    open_connections: int = 0
    #: Set (and replaced) whenever a connection ends.
    closed: trio.Event = field(default_factory=trio.Event)
    paths: list[str] = field(default_factory=list)


async def _handle(stream: trio.SocketStream, state: HttpState) -> None:
    buffer = b""
    try:
        while True:
            while b"\r\n\r\n" not in buffer:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            path = head.split(b" ")[1].decode()
            state.hits += 1
            state.paths.append(path)
            if path == "/slow":  # never answers; ends when the client closes
                while await stream.receive_some(65536):
                    pass
                return
            if path == "/ok" and state.healthy:
                status, body = "200 OK", b"fine"
            elif path == "/redirect":
                status, body = "302 Found", b"elsewhere"
            else:
                status, body = "503 Service Unavailable", b"not healthy"
            await stream.send_all(
                f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    except trio.BrokenResourceError:
        return


async def serve_http(state: HttpState, *,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve on 127.0.0.1; `task_status.started(port)` once listening."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def handler(stream: trio.SocketStream) -> None:
        state.connections += 1
        state.open_connections += 1
        try:
            await _handle(stream, state)
        finally:
            state.open_connections -= 1
            state.closed.set()
            state.closed = trio.Event()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handler, listeners)
        task_status.started(port)

"""/v1/client/fs/logs/<alloc>: a task's stdout or stderr, framed as Nomad frames it, or plain.

The log reader (runtime/client/logs/reader.py) reads files in worker threads and is imported inside
the
handler, like the alloc runner. A framed stream sends `{}` every `LOG_HEARTBEAT` while following
and idle; `FramedLogResponse` says why its reader runs in a nursery the response owns.

Where this differs from Nomad: Nomad's `follow` runs until the client goes away, even after the
task is long dead, so `nomad alloc logs -f` on a finished allocation waits for nothing until
Ctrl-C. Here a followed stream ends once its output is complete: the allocation is terminal,
the task's runner is done (the task is dead for good, its log pumps drained) and everything
written has been sent. A client that follows sees the same bytes either way, then an ordinary
end of the response. An agent shutting down does not complete a stream: it breaks off.

What a task writes is never a page of the agent's origin: plain logs and framed streams carry
`UNTRUSTED_CONTENT` (`nosniff`, and `Content-Security-Policy: sandbox`: no script runs, should a
browser render one anyway).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any, Final, Protocol, final

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, no_head, query_bool, query_int
from yurt.runtime.structs import is_client_terminal

LOG_HEARTBEAT: Final = 1.0
#: The headers of every answer whose body a task wrote (here, and runtime/api/fs.py).
UNTRUSTED_CONTENT: Final = {"X-Content-Type-Options": "nosniff",
                            "Content-Security-Policy": "sandbox"}
_encoder = msgspec.json.Encoder()


async def logs(ctx: Context, request: Request) -> Response:
    no_head(request)
    alloc_id = ctx.find_alloc_id(request.path_params["alloc_id"])
    task = request.query_params.get("task", "")
    stream = request.query_params.get("type", "")
    origin = request.query_params.get("origin", "start")
    if not task:
        raise ApiError(400, "must include task name")
    if stream not in ("stdout", "stderr"):
        raise ApiError(400, "must include a valid log type (stdout or stderr)")
    if origin not in ("start", "end"):
        raise ApiError(400, 'origin must be "start" or "end"')
    follow, plain = query_bool(request, "follow"), query_bool(request, "plain")
    offset = query_int(request, "offset")
    runner = await ctx.restored_runner(alloc_id)
    tr = runner.task_runners.get(task)
    if tr is None:
        raise ApiError(400, f'unknown task name "{task}"')
    if tr.state.started_at.year == 1 and tr.handle is None:
        raise ApiError(404, f'task "{task}" not started yet. No logs available')
    if runner.alloc_dir is None:
        raise ApiError(404, f'task "{task}" keeps no logs (it has no alloc dir)')
    from yurt.runtime.client.logs.reader import read_log

    def finished() -> bool:
        # The task runner is done only once its log pumps drained (or their grace ran out);
        # a runner that never ran (restored terminal) is marked done by its teardown.
        if not (tr.done.is_set() or runner.wait_done.is_set()):
            return False
        # An agent that shuts down ends its runners too, the allocation still running: that
        # stream must break off (its client learns the agent went), not end as complete.
        return runner.alloc.is_terminal() or is_client_terminal(runner.client_status())

    chunks = read_log(runner.alloc_dir.logs, task, stream, offset=offset, origin=origin,
                      follow=follow, finished=finished)
    if plain:
        return StreamingResponse(plain_body(chunks), media_type="text/plain",
                                 headers=UNTRUSTED_CONTENT)
    return FramedLogResponse(chunks, follow)


async def plain_body(chunks: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        yield chunk.data


class Chunks(Protocol):
    """What a framed stream sends: chunks, and `aclose` for what the reader holds open."""

    def __aiter__(self) -> AsyncIterator[Any]: ...

    async def aclose(self) -> None: ...


def frame(chunk: Any) -> dict[str, Any]:
    """Nomad's `StreamFrame` for a chunk (its empty fields left out, as Nomad's are)."""
    out: dict[str, Any] = {"Offset": chunk.offset + len(chunk.data)}
    if chunk.data:
        out["Data"] = base64.b64encode(chunk.data).decode()
    out["File"] = chunk.file
    if chunk.event:
        out["FileEvent"] = chunk.event
    return out


@final
class FramedLogResponse(StreamingResponse):
    """Nomad's framed log stream: `{"Offset", "Data" (base64), "File"}` objects, and `{}`
    heartbeats every second while following and idle.

    A heartbeat must go out while the log reader waits, so the reader runs in a task of its
    own. That task lives in a nursery this response owns while it is sent (ASGI `__call__`),
    not in an async generator: a generator that yields inside a nursery hands its caller a
    cancel scope it cannot see, and a consumer that stops iterating corrupts it. Beside the
    reader, a task watches for the client's `http.disconnect` and ends the stream.
    """

    def __init__(self, chunks: Chunks, follow: bool,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(iter(()), media_type="application/json",
                         headers=headers or UNTRUSTED_CONTENT)
        self._chunks = chunks
        self._follow = follow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        frames_in, frames_out = trio.open_memory_channel[Any](0)

        async def read_chunks() -> None:
            # aclosing: the reader may hold a file open (fs stream), even if never started.
            async with frames_in, aclosing(self._chunks):
                async for chunk in self._chunks:
                    await frames_in.send(chunk)

        async def watch_disconnect(scope: trio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            scope.cancel(reason="the client went away")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_chunks)
            nursery.start_soon(watch_disconnect, nursery.cancel_scope)
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async with frames_out:
                while True:
                    with trio.move_on_after(LOG_HEARTBEAT if self._follow else float("inf")
                                            ) as idle:
                        try:
                            chunk = await frames_out.receive()
                        except trio.EndOfChannel:
                            break
                    body = b"{}" if idle.cancelled_caught else _encoder.encode(frame(chunk))
                    await send({"type": "http.response.body", "body": body,
                                "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            nursery.cancel_scope.cancel(reason="the stream is complete")

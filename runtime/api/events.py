"""/v1/event/stream (newline-delimited JSON) and /v1/event/ws (a websocket): the event broker.

Streams never block the agent: each reads from a per-subscriber bounded buffer (overflow drops
the oldest and marks the next record with `"Lost": n`) and the stream sends a heartbeat `{}`
when idle. Event records are encoded once for all subscribers, and a stream sends what has piled
up in one chunk, then waits `STREAM_COALESCE` (eventstream.py). A subscription is closed however
its stream ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import trio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from yurt.runtime.api.context import Context
from yurt.runtime.api.request import no_head, query_duration, query_int
from yurt.runtime.eventstream import as_line, as_text, topic_filter

HEARTBEAT: Final = 30.0
#: After an event stream sends, it lets records pile up this long before it wakes again: a
#: subscriber then costs the agent a few wake-ups a second, whatever the event rate (200
#: subscribers each woken per record cost most of a core), for at most this much more lag.
STREAM_COALESCE: Final = 0.1
#: The subprotocol the web UI's event socket asks for beside its token.
UI_SUBPROTOCOL: Final = "yurt-events"


async def event_stream(ctx: Context, request: Request) -> Response:
    no_head(request)
    matches = topic_filter(request.query_params.getlist("topic"))
    index = query_int(request, "index")
    heartbeat = query_duration(request, "heartbeat", HEARTBEAT)
    # Nomad: index 0 starts from the oldest event kept, any other from that index on.
    subscription = ctx.agent.broker.subscribe(from_index=index)

    async def body() -> AsyncIterator[bytes]:
        try:
            yield b"{}\n"
            while True:
                with trio.move_on_after(heartbeat) as idle:
                    records = await subscription.receive_encoded(matches)
                if idle.cancelled_caught:
                    yield b"{}\n"
                    continue
                if records:  # everything buffered, in one chunk
                    yield b"".join(as_line(r) for r in records)
                    await trio.sleep(STREAM_COALESCE)
        except trio.EndOfChannel:
            return
        finally:
            subscription.close()

    return StreamingResponse(body(), media_type="application/json")


async def event_ws(ctx: Context, websocket: WebSocket) -> None:
    matches = topic_filter(websocket.query_params.getlist("topic"))
    raw_index = websocket.query_params.get("index")
    # A browser that offers subprotocols (the web UI: its token rides in one, app.py) drops a
    # connection whose answer names none, so the plain one it offers is chosen.
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=UI_SUBPROTOCOL if UI_SUBPROTOCOL in offered else None)
    subscription = ctx.agent.broker.subscribe(
        from_index=int(raw_index) if raw_index and raw_index.isdigit() else None)

    async def watch_disconnect(scope: trio.CancelScope) -> None:
        # The only way to learn that a client went away is to read: sends to a closed
        # socket are dropped silently, and the subscription would live forever.
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
        finally:
            scope.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_disconnect, nursery.cancel_scope)
            while True:
                for r in await subscription.receive_encoded(matches):
                    await websocket.send_text(as_text(r))
                await trio.sleep(STREAM_COALESCE)
    except* (WebSocketDisconnect, trio.EndOfChannel):
        pass
    finally:
        subscription.close()

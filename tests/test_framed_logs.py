"""The framed log stream as an ASGI response, fed from memory (layer 1, `autojump_clock`):
frames, heartbeats while idle, and a client that goes away ends the stream and its reader."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import trio
from trio.testing import MockClock

from yurt.runtime.api import FramedLogResponse
from yurt.runtime.client.logs.reader import Chunk


async def test_frames_heartbeats_and_disconnect_close_the_reader(autojump_clock: MockClock
                                                                 ) -> None:
    reader_closed = trio.Event()
    gone = trio.Event()
    sent: list[dict[str, Any]] = []

    async def chunks() -> AsyncIterator[Chunk]:
        try:
            yield Chunk("alloc/logs/t.stdout.0", 0, b"hello\n")
            await trio.sleep_forever()  # following: nothing more is written
            yield Chunk("never", 0, b"")  # pragma: no cover
        finally:
            reader_closed.set()

    async def receive() -> dict[str, Any]:
        if not sent:
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message.get("body") == b"{}":  # a heartbeat: the client hangs up now
            gone.set()
        await trio.lowlevel.checkpoint()

    response = FramedLogResponse(chunks(), follow=True)
    with trio.fail_after(10):
        await response({"type": "http"}, receive, send)  # type: ignore[arg-type]
        await reader_closed.wait()
    assert sent[0]["type"] == "http.response.start"
    frame = json.loads(sent[1]["body"])
    assert (frame["Offset"], base64.b64decode(frame["Data"]), frame["File"]) == (
        6, b"hello\n", "alloc/logs/t.stdout.0")
    assert sent[2]["body"] == b"{}"
    assert trio.current_time() >= 1.0  # the heartbeat waited for a second of silence


async def test_without_follow_the_stream_ends_with_the_log(autojump_clock: MockClock) -> None:
    sent: list[dict[str, Any]] = []

    async def chunks() -> AsyncIterator[Chunk]:
        for i in range(3):
            yield Chunk("alloc/logs/t.stdout.0", i * 2, b"x\n")

    async def receive() -> dict[str, Any]:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        await trio.lowlevel.checkpoint()

    with trio.fail_after(10):
        await FramedLogResponse(chunks(), follow=False)(
            {"type": "http"}, receive, send)  # type: ignore[arg-type]
    assert [json.loads(m["body"])["Offset"] for m in sent[1:-1]] == [2, 4, 6]
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}

"""Talking to the exec websocket as Nomad's client does, for the exec tests."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from trio_websocket import ConnectionClosed, WebSocketConnection, open_websocket_url

from tests.agent_support import Running


@dataclass
class Session:
    frames: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str | None = None

    def data(self, stream: str) -> bytes:
        return b"".join(base64.b64decode(f[stream]["data"]) for f in self.frames
                        if stream in f and "data" in f[stream])

    @property
    def exit_code(self) -> int | None:
        exits = [f["result"]["exit_code"] for f in self.frames if f.get("exited")]
        return exits[0] if exits else None


def exec_url(a: Running, alloc_id: str, params: dict[str, str]) -> str:
    return (a.address.replace("http", "ws", 1) + f"/v1/client/allocation/{alloc_id}/exec?"
            + urlencode(params))


def stdin(data: bytes = b"", close: bool = False) -> str:
    body: dict[str, Any] = {"close": True} if close else {
        "data": base64.b64encode(data).decode()}
    return json.dumps({"stdin": body})


async def collect(ws: WebSocketConnection, *, wait_close: bool = False) -> Session:
    """Every frame until the exit frame (then the caller closes, as clients do) or, with
    `wait_close` or without an exit, until the server closes."""
    session = Session()
    try:
        while True:
            session.frames.append(json.loads(await ws.get_message()))
            if session.exit_code is not None and not wait_close:
                return session
    except ConnectionClosed as e:
        if e.reason is not None:
            session.close_code, session.close_reason = e.reason.code, e.reason.reason
    return session


async def run_exec(a: Running, alloc_id: str, command: list[str], *, task: str = "t",
                   tty: bool = False, send: Sequence[str] = (), wait_close: bool = False
                   ) -> Session:
    params = {"task": task, "command": json.dumps(command), "tty": str(tty).lower()}
    async with open_websocket_url(exec_url(a, alloc_id, params)) as ws:
        for frame in send:
            await ws.send_message(frame)
        return await collect(ws, wait_close=wait_close)

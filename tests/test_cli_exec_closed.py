"""`yurt alloc exec` when the agent closes the session before the CLI is done sending: the
close reason is reported as "failed to exec into task", never a traceback.

The order that made this flaky (the CLI's stdin close frame sent after the agent's close
arrived, before `receive` saw it) is forced here with a scripted websocket connection whose
close is seen by the reader only after a send has failed."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_websocket
from trio_websocket import CloseReason, ConnectionClosed

from yurt.runtime.cli import exec as cli_exec

REASON = "exec refused: task not running"


class _ClosedByServer:
    """A connection the server closed with 1011 before reading anything: every send fails,
    and the reader learns of the close only after the first failed send."""

    def __init__(self) -> None:
        self.sends: list[str] = []
        self.send_failed = trio.Event()
        self.reason = CloseReason(1011, REASON)

    async def send_message(self, frame: str) -> None:
        await trio.lowlevel.checkpoint()
        self.sends.append(frame)
        self.send_failed.set()
        raise ConnectionClosed(self.reason)

    async def get_message(self) -> str:
        await self.send_failed.wait()
        raise ConnectionClosed(self.reason)


async def test_a_close_before_stdin_is_sent_reports_the_reason(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conn = _ClosedByServer()

    @asynccontextmanager
    async def fake_open(url: str, **kwargs: Any) -> AsyncIterator[_ClosedByServer]:
        await trio.lowlevel.checkpoint()
        yield conn

    monkeypatch.setattr(trio_websocket, "open_websocket_url", fake_open)
    read_end, write_end = os.pipe()
    os.close(write_end)  # stdin at its end: the CLI sends its close frame at once
    with os.fdopen(read_end, "rb", buffering=0) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        with trio.fail_after(10), pytest.raises(cli_exec._Failed, match=REASON):
            await cli_exec._session("ws://127.0.0.1:1/x", [], tty=False, stdin=True,
                                    escape="")
    assert conn.sends == ['{"stdin": {"close": true}}']

"""`Gate`: a door task runners wait at until their lifecycle stage is open.

Unlike a `trio.Event`, a gate can close again (an alloc-wide restart sends the coordinator back
to `init`), so waiters re-check after every wake-up.
"""

from __future__ import annotations

from typing import final

import trio


@final
class Gate:
    def __init__(self) -> None:
        self._open = False
        self._event = trio.Event()

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> None:
        self._open = True
        self._event.set()

    def close(self) -> None:
        self._open = False
        if self._event.is_set():
            self._event = trio.Event()

    async def wait_open(self) -> None:
        """Return once the gate is open (a checkpoint even if it already is)."""
        await trio.lowlevel.checkpoint()
        while not self._open:
            await self._event.wait()

"""Task output in `yurt run`: every task's stdout and stderr as it comes, one line at a time
behind the task's name, as `docker compose up` shows its services.

Where the bytes come from: the rotated log files the task's log pumps write in the
allocation's `alloc/logs` (the same files `yurt alloc logs` serves), read by the log reader
(runtime/client/logs/reader.py) in follow mode. Reading the files rather than tapping the pumps
keeps
the task runner unaware of the printing: a slow terminal slows only these readers, never a
pump, so a task never blocks on its pipe because stdout is slow. The cost is the reader's
poll (100 ms): a line may show up to that long after it was written.

When a follower ends: `finished` says the task's output is complete (its runner is done, its
pumps drained); the reader then reads once more and ends, so the last lines of a task are
printed before the run's final table.

Time order: the event printer, before it prints a task's event, asks that task's follower to
catch up (`TaskFollower.catch_up`): the follower stops waiting for its next poll, reads to the
end of what is written and prints it, then answers. So "report | done" comes before "report
Terminated", as it happened. A line still inside the log pump when the task exits is not in
the file yet: for "Terminated" the printer waits for the follower's end instead (the runner
is done once its pumps drained), bounded by the caller (a task that restarts does not end).

Lines: bytes are held up to a newline so two tasks never mix within a line; a line longer
than `MAX_LINE` is cut there (a task that never writes a newline still shows its output);
bytes that are not UTF-8 are shown replaced, never fail the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

import trio

from yurt.runtime.client.logs.reader import read_log

#: A longer run of bytes without a newline is printed as a line of its own.
MAX_LINE: Final = 64 * 1024
STREAMS: Final = ("stdout", "stderr")


#: How long a follower waits at the end of its output before it looks again.
POLL: Final = 0.1


@final
class CatchUp:
    """One stream's follower, seen from a printer that wants it at the end of what is
    written: `wait` returns once the follower has read (and printed) everything written
    before the call, or has ended."""

    def __init__(self) -> None:
        self._kick = trio.Event()
        self._waiting: list[trio.Event] = []
        self._ended = False

    async def idle(self) -> None:
        """The reader's pause at the end of the output: answer who waited, then wait for
        the next poll or the next request."""
        self._answer()
        with trio.move_on_after(POLL):
            await self._kick.wait()
        self._kick = trio.Event()

    def end(self) -> None:
        self._ended = True
        self._answer()

    def _answer(self) -> None:
        for event in self._waiting:
            event.set()
        self._waiting = []

    async def wait(self) -> None:
        if self._ended:
            return
        done = trio.Event()
        self._waiting.append(done)
        self._kick.set()
        await done.wait()


@dataclass(frozen=True)
class TaskOutput:
    """One task's output to follow: where its logs are and when they are complete."""

    label: str  # what the lines are prefixed with (the task's name, or group[i]/task)
    alloc_id: str
    logs_dir: Path
    task: str
    finished: Callable[[], bool]
    origin: str = "start"  # "end" for a re-attached task: only what it writes from now on


def prefixed(prefix: str, data: bytes) -> str:
    """`data`'s lines, each behind `prefix`; `data` ends with a newline or is one line. Pure."""
    text = data.decode("utf-8", errors="replace")
    if text.endswith("\n"):
        text = text[:-1]
    return "".join(f"{prefix}{line}\n" for line in text.split("\n"))


@final
class TaskFollower:
    """Prints one task's stdout and stderr (`run`) and catches up on request (`catch_up`)."""

    def __init__(self, source: TaskOutput) -> None:
        self.source = source
        self._streams = {stream: CatchUp() for stream in STREAMS}
        #: Set once both streams are printed to their end (the task's output is complete).
        self.ended = trio.Event()

    async def catch_up(self) -> None:
        """Until everything the task wrote before this call is printed (or the follower
        ended); the caller bounds the wait."""
        for catch_up in self._streams.values():
            await catch_up.wait()

    async def run(self, width: int, write: Callable[[str], Awaitable[None]]) -> None:
        """Print both streams through `write` until the task's output is complete."""
        prefix = f"{self.source.label:<{width}} | "
        try:
            async with trio.open_nursery() as nursery:
                for stream, catch_up in self._streams.items():
                    nursery.start_soon(self._follow, stream, catch_up, prefix, write)
        finally:
            self.ended.set()

    async def _follow(
        self, stream: str, catch_up: CatchUp, prefix: str, write: Callable[[str], Awaitable[None]]
    ) -> None:
        source = self.source
        pending = b""
        chunks = read_log(
            source.logs_dir,
            source.task,
            stream,
            origin=source.origin,
            follow=True,
            finished=source.finished,
            idle=catch_up.idle,
        )
        try:
            async with aclosing(chunks):
                async for chunk in chunks:
                    pending += chunk.data
                    cut = pending.rfind(b"\n") + 1
                    if not cut and len(pending) >= MAX_LINE:
                        cut = len(pending)
                    if cut:
                        await write(prefixed(prefix, pending[:cut]))
                        pending = pending[cut:]
            if pending:  # the task's last line had no newline
                await write(prefixed(prefix, pending))
        finally:
            catch_up.end()

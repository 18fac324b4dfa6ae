"""Task output in `yurt run`: every task's stdout and stderr as it comes, one line at a time
behind the task's name, as `docker compose up` shows its services.

Where the bytes come from: the rotated log files the task's log pumps write in the
allocation's `alloc/logs` (the same files `yurt alloc logs` serves), read by the log reader
(runtime/logs/reader.py) in follow mode. Reading the files rather than tapping the pumps keeps
the task runner unaware of the printing: a slow terminal slows only these readers, never a
pump, so a task never blocks on its pipe because stdout is slow. The cost is the reader's
poll (100 ms): a line may show up to that long after it was written.

When a follower ends: `finished` says the task's output is complete (its runner is done, its
pumps drained); the reader then reads once more and ends, so the last lines of a task are
printed before the run's final table.

Lines: bytes are held up to a newline so two tasks never mix within a line; a line longer
than `MAX_LINE` is cut there (a task that never writes a newline still shows its output);
bytes that are not UTF-8 are shown replaced, never fail the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

from yurt.runtime.logs.reader import read_log

#: A longer run of bytes without a newline is printed as a line of its own.
MAX_LINE: Final = 64 * 1024
STREAMS: Final = ("stdout", "stderr")


@dataclass(frozen=True)
class TaskOutput:
    """One task's output to follow: where its logs are and when they are complete."""

    label: str  # what the lines are prefixed with (the task's name, or group[i]/task)
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


async def follow_task_output(
    source: TaskOutput, width: int, write: Callable[[str], Awaitable[None]]
) -> None:
    """Print both of the task's streams through `write` until its output is complete."""
    prefix = f"{source.label:<{width}} | "
    async with trio.open_nursery() as nursery:
        for stream in STREAMS:
            nursery.start_soon(_follow_stream, source, stream, prefix, write)


async def _follow_stream(
    source: TaskOutput, stream: str, prefix: str, write: Callable[[str], Awaitable[None]]
) -> None:
    pending = b""
    chunks = read_log(
        source.logs_dir,
        source.task,
        stream,
        origin=source.origin,
        follow=True,
        finished=source.finished,
    )
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

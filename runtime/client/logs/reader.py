"""Reading rotated task logs for the API: Nomad's `/v1/client/fs/logs` semantics.

A task's stream is the concatenation of its files `<task>.<type>.<N>`, oldest index first.
`origin=start` counts `offset` forward from the start of the oldest file; `origin=end` counts
backward from the end of the newest, across files (clamped to what exists). Without `follow`,
reading stops at the end of the file that was newest when the request came; with `follow` it
waits for more (a poll every 100 ms: rotation can add files at any time) until the caller
stops, or until `finished` says no more output can come (the task runner is done, its log
pumps drained): then one last read after that answer picks up what was written before it, and
the stream ends, so a follower of a task that ended sees all of its output and then the end.
File reads run in worker threads, 64 KiB at a time.

The agent may run as root and serves these files over HTTP: a file is opened without following
a link (`O_NOFOLLOW`) and only if it is a regular file, so a link planted in the logs directory
never exposes a file from elsewhere, and a planted FIFO never blocks a reader thread.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import trio

from yurt.runtime.client.logs.pump import existing_files, log_base, open_log_file

CHUNK: Final = 64 * 1024
POLL: Final = 0.1


@dataclass(frozen=True)
class Chunk:
    file: str  # path relative to the alloc dir, as Nomad reports it
    offset: int
    data: bytes
    event: str = ""  # Nomad's FileEvent (`file truncated`, `file deleted`), for fs streams


def _files(logs_dir: Path, task: str, stream: str) -> dict[int, int]:
    if not logs_dir.is_dir():
        return {}
    return existing_files(log_base(logs_dir, task, stream))


def start_position(sizes: dict[int, int], offset: int, origin: str) -> tuple[int, int]:
    """(file index, offset in it) where reading starts. Pure."""
    if not sizes:
        return 0, 0
    order = sorted(sizes)
    if origin == "start":
        remaining = max(offset, 0)
        for index in order:
            if remaining < sizes[index] or index == order[-1]:
                return index, min(remaining, sizes[index])
            remaining -= sizes[index]
    remaining = max(offset, 0)
    for index in reversed(order):
        if remaining <= sizes[index]:
            return index, sizes[index] - remaining
        remaining -= sizes[index]
    return order[0], 0


def _read(path: Path, offset: int) -> bytes:
    try:
        fd = open_log_file(path, os.O_RDONLY)
    except OSError:  # gone (rotated away), or not a plain file: nothing to serve
        return b""
    try:
        return os.pread(fd, CHUNK, offset)
    finally:
        os.close(fd)


async def read_log(logs_dir: Path, task: str, stream: str, *, offset: int = 0,
                   origin: str = "start", follow: bool = False,
                   finished: Callable[[], bool] | None = None,
                   idle: Callable[[], Awaitable[None]] | None = None
                   ) -> AsyncGenerator[Chunk, None]:
    """Yield the stream's bytes from the requested position (see the module docstring).

    Args:
        finished: while following, True once nothing more will be written to the stream.
        idle: while following, awaited at the end of what is written so far, before the
            next look (default: sleep `POLL`); a follower that must catch up on demand
            returns early.
    """
    sizes = await trio.to_thread.run_sync(_files, logs_dir, task, stream)
    index, position = start_position(sizes, offset, origin)
    last_at_start = max(sizes) if sizes else 0
    base = log_base(logs_dir, task, stream)
    # True once `finished` said so before the latest read: an end-of-file after it is final.
    final_read = False
    while True:
        path = base.with_name(f"{base.name}.{index}")
        data = await trio.to_thread.run_sync(_read, path, position)
        if data:
            yield Chunk(f"alloc/logs/{path.name}", position, data)
            position += len(data)
            continue
        sizes = await trio.to_thread.run_sync(_files, logs_dir, task, stream)
        later = sorted(i for i in sizes if i > index)
        if later:
            index, position = later[0], 0
            continue
        if not follow and index >= last_at_start:
            return
        if final_read:
            return
        if finished is not None and finished():
            final_read = True  # read once more: the last chunk may have landed since
            continue
        if idle is not None:
            await idle()
        else:
            await trio.sleep(POLL)

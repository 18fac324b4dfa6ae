"""Output a task wrote while no agent read it: the shim's spill file and the pump's lock.

A task's stream is a FIFO, and a pipe lives only while someone holds it: the log pump (read
end and keeper) while the agent runs, the task and its shim while the task runs. When the task
exits while the agent is down, the shim is the last holder, and what waits in the pipe would
die with it. So the shim, before it exits, moves that output to a spill file, and the next
pump writes the spill to the log before it reads the FIFO: nothing is lost, nothing reordered
(what the pipe held comes after everything the previous pump read).

Who may read the pipe is decided by an advisory lock (`flock`) per stream. A pump holds it for
its whole life, so the kernel releases it when the agent dies, however it dies. The shim takes
it without waiting (`flock -n`): if a pump holds it, the agent is up and its keeper keeps the
pipe alive, and the shim leaves the output to it; otherwise the shim drains the pipe while it
holds the lock, and a pump that starts meanwhile waits for the lock, then for the spill.

Both files sit in the parent of the logs dir (the allocation's shared dir, which tasks cannot
write, so no task can plant a link where the agent writes), named after the stream:
`.<task>.<stream>.spill` and `.<task>.<stream>.lock`. The shim derives the same names from its
FIFO path (`runtime/client/drivers/shim.sh`). A crash between writing the spill to the log and
removing it repeats that output once on the next start; it never loses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import trio

log = logging.getLogger("yurt.logs")

CHUNK: Final = 64 * 1024
#: How long a pump waits for a shim that drains its stream (it takes milliseconds).
LOCK_PATIENCE: Final = 5.0
LOCK_POLL: Final = 0.01


def spill_path(base: Path) -> Path:
    """The spill file of the stream whose rotated files are `<base>.N`."""
    return base.parent.parent / f".{base.name}.spill"


def lock_path(base: Path) -> Path:
    return base.parent.parent / f".{base.name}.lock"


def try_lock(path: Path) -> int | None:
    """An fd holding the exclusive lock on `path`, or None if someone else holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


@asynccontextmanager
async def claimed(base: Path) -> AsyncIterator[None]:
    """Hold the stream's lock for the block, after waiting a bounded while for a shim that
    drains the stream. If it cannot be had in time the block runs anyway (a spill made
    meanwhile is written by the next pump), with a warning."""
    path = lock_path(base)
    fd = None
    with trio.move_on_after(LOCK_PATIENCE):
        # A lock held by another process offers nothing to wait on: poll it.
        while (fd := await trio.to_thread.run_sync(try_lock, path)) is None:  # noqa: ASYNC110
            await trio.sleep(LOCK_POLL)
    if fd is None:
        log.warning("log stream %s: its lock is still held after %.0fs; reading without it",
                    base.name, LOCK_PATIENCE)
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def replay(base: Path, write: Callable[[bytes], None]) -> int:
    """Hand the stream's spill to `write` in chunks, then remove it; the bytes replayed.

    Blocking: call in a worker thread, holding the stream's lock.
    """
    path = spill_path(base)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    total = 0
    with open(fd, "rb") as f:
        while data := f.read(CHUNK):
            write(data)
            total += len(data)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return total

"""Bringing one source's bytes to a file: HTTP(S) streamed through httpx2, `file://` copied.

Neither path ever holds a download in memory: HTTP chunks are gathered into batches of at most
`BATCH` bytes and each batch is hashed and written in one worker-thread hop (the disk write
and the digest are blocking work; one hop per batch keeps a fast link from paying one per
chunk). The running byte count is checked before a batch is kept, so a stream past
`max_bytes` is cut off at once: the connection is closed, the partial file is the caller's to
remove (it lives in the download's staging directory).

Errors are `GetterError`s worded as Go's HTTP client words them (`Get "<url>": …`,
`bad response code: 404`). Nomad's go-getter truncates silently at `http_max_size`; yurt fails
the download instead, because a truncated artifact is never what the task wanted.

A `file://` source (the artifact's file, or a `checksum=file:` listing) is opened by
`open_regular`: only a regular file is ever read (a FIFO would block the copy for ever, a
device may have side effects), judged on the descriptor that is then read. The copy calls its
`check` between chunks, so a kill stops it within one chunk.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Final

import trio

from yurt.runtime.client.getter.access import Reader, may
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.getter.unpack import bounded_chunks, no_check

BATCH: Final = 1 << 20


def _write(out: IO[bytes], chunks: list[bytes], hasher: hashlib._Hash | None) -> None:
    for chunk in chunks:
        if hasher is not None:
            hasher.update(chunk)
        out.write(chunk)


async def fetch_http(url: str, dest: Path, *, headers: dict[str, str] | None, insecure: bool,
                     max_bytes: int, read_timeout: float, hasher: hashlib._Hash | None,
                     limiter: trio.CapacityLimiter) -> int:
    """GET `url` into the new file `dest`, feeding `hasher`; the bytes written.

    `read_timeout` bounds the whole download (Nomad's `http_read_timeout`), `max_bytes`
    (0: none) its size. Raises `GetterError`."""
    # Here, not at the top: the agent imports this module, and only a job with an artifact
    # should pay for the HTTP client's import (tests/test_import_weight.py).
    import httpx2

    total = 0
    out = await trio.to_thread.run_sync(open, dest, "xb", limiter=limiter)
    try:
        with trio.move_on_after(read_timeout) as scope:
            try:
                async with httpx2.AsyncClient(verify=not insecure, follow_redirects=True,
                                              timeout=None) as client, \
                        client.stream("GET", url, headers=headers) as response:
                    if response.status_code not in (200, 206):
                        raise GetterError(f"bad response code: {response.status_code}")
                    batch: list[bytes] = []
                    pending = 0
                    async for chunk in response.aiter_bytes():
                        total += len(chunk)
                        if max_bytes and total > max_bytes:
                            raise GetterError(f"download of {url} exceeds the maximum size of "
                                              f"{max_bytes} bytes (http_max_size)")
                        batch.append(chunk)
                        pending += len(chunk)
                        if pending >= BATCH:
                            await trio.to_thread.run_sync(_write, out, batch, hasher,
                                                          limiter=limiter)
                            batch, pending = [], 0
                    await trio.to_thread.run_sync(_write, out, batch, hasher, limiter=limiter)
            except httpx2.HTTPError as e:
                raise GetterError(f'Get "{url}": {_reason(e)}') from None
        if scope.cancelled_caught:
            raise GetterError(f'Get "{url}": context deadline exceeded')
    finally:
        with trio.CancelScope(shield=True) as cleanup:
            cleanup.deadline = trio.current_time() + 10  # a close never blocks that long
            await trio.to_thread.run_sync(out.close, limiter=limiter)
    return total


def _reason(error: BaseException) -> str:
    """The most telling text of an HTTP error: some (TLS failures) carry it only in their
    cause, a chain of wrappers around the ssl module's error."""
    seen: BaseException | None = error
    while seen is not None:
        if str(seen):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return type(error).__name__


def open_regular(src: Path, *, reader: Reader | None = None) -> int:
    """A descriptor to read the regular file `src` (its links followed, as its name says).

    The file is first opened `O_PATH`: that never blocks and runs no driver's open, where a
    plain `open` of a FIFO waits for a writer for ever (in a worker thread a kill cannot
    interrupt) and one of a device may act on it. Only a regular file, judged on that
    descriptor (and, with a `reader`, readable by the task's user by its mode bits), is then
    reopened for reading, through the descriptor: the very file judged, whatever its name
    says by then. Raises `GetterError`."""
    try:
        path_fd = os.open(src, os.O_PATH | os.O_CLOEXEC)
    except OSError as e:
        raise GetterError(f"{src}: {e.strerror}") from None
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISREG(st.st_mode):
            raise GetterError(f"source path must be a file: {src} is {_kind(st.st_mode)}")
        if reader is not None and not may(st, reader, 4):
            raise GetterError(f"{src}: permission denied for user \"{reader.name}\"")
        return os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise GetterError(f"{src}: {e.strerror}") from None
    finally:
        os.close(path_fd)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def copy_file(src: Path, dest: Path, *, max_bytes: int, hasher: hashlib._Hash | None,
              reader: Reader | None = None, check: Callable[[], None] = no_check) -> int:
    """Copy the local regular file `src` into the new file `dest` (blocking: run it in a
    thread); `check` is called between chunks and may raise to stop (a cancellation)."""
    over = f"{src} exceeds the maximum size of {max_bytes} bytes"
    with os.fdopen(open_regular(src, reader=reader), "rb") as f, open(dest, "xb") as out:
        for chunk in bounded_chunks(f, max_bytes or None, over, check):
            if hasher is not None:
                hasher.update(chunk)
            out.write(chunk)
        return out.tell()

"""/v1/client/fs/{ls,stat,cat,readat,stream}/<alloc>: an allocation's directory, as Nomad serves it.

`path` is relative to the allocation directory (`/` is the directory itself; Nomad's layout:
`alloc/{data,logs,tmp}`, `<task>/{local,secrets,tmp}`). Every path is resolved by
runtime/client/allocfs.py, which never leaves the allocation directory (its docstring says how) and
runs in worker threads behind `FS_THREADS`, so a slow disk never stalls the event loop. Files
are sent 64 KiB at a time from the descriptor the resolution opened, never read whole.

Statuses, Nomad's where Nomad has one: 400 for a missing or malformed parameter, a path that
escapes ("Path escapes the alloc directory") and a directory where a file is wanted; 404 for an
unknown allocation. A missing file ("stat <path>: no such file or directory") is a 404 for
`ls` and `stat` but a 400 for `cat`, `readat` and `stream`, as in Nomad, where those three go
through one streaming call that answers every failed stat with a 400 (python-nomad's own
tests expect that 400 from `stream`). 403 for a read under a task's `secrets/` ("Reading
secret file prohibited: <path>", an error Nomad answers with a 500).

`stream` sends Nomad's frames through `FramedLogResponse` (logs.py), heartbeats included,
and follows by default as Nomad's does.

A file here is whatever a task wrote, so it is served as data, never as a page of the agent's
origin (where a script would read the API as the operator): `cat` and `readat` answer
`application/octet-stream` whatever the bytes look like (Nomad lets Go sniff the type, which
makes `text/html` of a task's HTML), and `cat`, `readat` and `stream` always carry `nosniff`,
`Content-Security-Policy: sandbox` (no script, an opaque origin, should a browser render it
anyway) and `Content-Disposition: attachment` (a browser saves it rather than shows it). API
clients read the body as before (python-nomad as text, `yurt alloc fs` as bytes).

Offsets as Nomad takes them (`strconv.ParseInt`, then a seek: runtime/client/allocfs.py
`open_file`): `readat` refuses a negative one; an offset past the end of the file reads
nothing (200, an empty body, or no frames); one past the largest file the file system allows
is a 400 that names it. `limit` is a byte count, any int64 (0 or less: no limit).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, Final, final
from urllib.parse import quote

import trio
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from yurt.runtime.api.context import Context
from yurt.runtime.api.logs import UNTRUSTED_CONTENT, FramedLogResponse
from yurt.runtime.api.request import ApiError, json_response, no_head, query_bool
from yurt.runtime.client import allocfs

#: Worker threads the file system endpoints use at once (each one call, bounded in time by
#: the disk only): more requests wait here rather than crowd out the agent's own threads.
FS_THREADS: Final = 8
#: One limiter per app (its Context): a limiter belongs to the trio run that uses it.
_limiters: weakref.WeakKeyDictionary[Context, trio.CapacityLimiter] = (
    weakref.WeakKeyDictionary())


def _limiter(ctx: Context) -> trio.CapacityLimiter:
    limiter = _limiters.get(ctx)
    if limiter is None:
        limiter = _limiters[ctx] = trio.CapacityLimiter(FS_THREADS)
    return limiter


async def _in_thread(ctx: Context, fn: Any, *args: Any) -> Any:
    try:
        return await trio.to_thread.run_sync(partial(fn, *args), limiter=_limiter(ctx))
    except allocfs.FsError as e:
        raise ApiError(e.status, str(e)) from None


async def _alloc_dir(ctx: Context, request: Request) -> tuple[Path, list[str]]:
    """The allocation directory and the allocation's task names."""
    runner = await ctx.restored_runner(ctx.find_alloc_id(request.path_params["alloc_id"]))
    if runner.alloc_dir is None:
        raise ApiError(404, f"allocation {runner.alloc.id} has no allocation directory")
    return runner.alloc_dir.path, list(runner.task_runners)


def _path(request: Request) -> str:
    path = request.query_params.get("path", "")
    if not path:
        raise ApiError(400, "must provide a file name")
    return path


def _int64(request: Request, name: str, default: int | None = None) -> int:
    """Go's `strconv.ParseInt(s, 10, 64)`, with Nomad's message."""
    value = request.query_params.get(name, "")
    if value == "" and default is not None:
        return default
    if not _INT.fullmatch(value):
        raise ApiError(400, f'error parsing {name}: strconv.ParseInt: parsing "{value}": '
                            "invalid syntax")
    number = int(value)
    if not -(1 << 63) <= number < (1 << 63):
        raise ApiError(400, f'error parsing {name}: strconv.ParseInt: parsing "{value}": '
                            "value out of range")
    return number


_INT: Final = re.compile(r"[+-]?[0-9]+")


async def fs_ls(ctx: Context, request: Request) -> Response:
    root, _ = await _alloc_dir(ctx, request)
    path = request.query_params.get("path", "") or "/"
    return json_response(await _in_thread(ctx, allocfs.list_dir, root, path))


async def fs_stat(ctx: Context, request: Request) -> Response:
    path = _path(request)
    root, _ = await _alloc_dir(ctx, request)
    return json_response(await _in_thread(ctx, allocfs.stat_path, root, path))


async def _open(ctx: Context, request: Request, path: str, offset: int = 0,
                origin: str = "start") -> allocfs.OpenFile:
    """The file for cat, readat and stream, at `offset` from `origin` (a missing one is a 400
    there: see above)."""
    root, tasks = await _alloc_dir(ctx, request)
    try:
        opened: allocfs.OpenFile = await _in_thread(ctx, allocfs.open_file, root, path, tasks,
                                                    offset, origin)
    except ApiError as e:
        if e.status == 404:
            raise ApiError(400, str(e)) from None
        raise
    return opened


async def fs_cat(ctx: Context, request: Request) -> Response:
    no_head(request)
    path = _path(request)
    opened = await _open(ctx, request, path)
    return await _plain(allocfs.FileChunks(opened, follow=False, limiter=_limiter(ctx)), path)


async def fs_readat(ctx: Context, request: Request) -> Response:
    no_head(request)
    path = _path(request)
    offset = _int64(request, "offset")
    limit = _int64(request, "limit", 0)
    if offset < 0:
        raise ApiError(400, f"can't seek to offset {offset}: invalid argument")
    opened = await _open(ctx, request, path, offset)
    return await _plain(allocfs.FileChunks(opened, follow=False, limit=limit,
                                           limiter=_limiter(ctx)), path)


async def fs_stream(ctx: Context, request: Request) -> Response:
    no_head(request)
    path = _path(request)
    follow = query_bool(request, "follow") if request.query_params.get("follow") else True
    offset = _int64(request, "offset", 0)
    origin = request.query_params.get("origin", "") or "start"
    if origin not in ("start", "end"):
        raise ApiError(400, "origin must be start or end")
    opened = await _open(ctx, request, path, offset, origin)
    chunks = allocfs.FileChunks(opened, follow=follow, limiter=_limiter(ctx))
    return FramedLogResponse(chunks, follow, headers=_file_headers(path))


def _file_headers(path: str) -> dict[str, str]:
    """What a response carrying a task's file says besides its type (see above): saved under
    its own name (`filename*`, percent-encoded but for letters, digits and `_.-~`)."""
    parts = [p for p in path.split("/") if p not in ("", ".", "..")]
    name = quote(parts[-1], safe="") if parts else ""
    disposition = f"attachment; filename*=UTF-8''{name}" if name else "attachment"
    return {**UNTRUSTED_CONTENT, "Content-Disposition": disposition}


async def _plain(chunks: allocfs.FileChunks, path: str) -> Response:
    """The file's bytes as the body, as data (see above). The first read happens before the
    answer starts, so a file that cannot be read is still an error status."""
    try:
        first = await anext(chunks, None)
    except BaseException:
        await chunks.aclose()
        raise
    head = first.data if first is not None else b""
    return _PlainFile(head, chunks, _file_headers(path))


@final
class _PlainFile(StreamingResponse):
    """A file's bytes as the body; the file is closed when the response ends, however."""

    def __init__(self, head: bytes, chunks: allocfs.FileChunks,
                 headers: dict[str, str]) -> None:
        super().__init__(_data(head, chunks), media_type="application/octet-stream",
                         headers=headers)
        self._chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._chunks.aclose()


async def _data(head: bytes, chunks: allocfs.FileChunks) -> AsyncIterator[bytes]:
    if head:
        yield head
    async for chunk in chunks:
        yield chunk.data

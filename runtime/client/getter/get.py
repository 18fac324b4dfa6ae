"""One artifact download, end to end: parse, fetch, verify, unpack, place (Nomad's sandbox
`Get` followed by its inspection and merge).

Theory of operation. Everything lands first in a staging directory, new for each download,
inside the task directory (`.artifact-*`), and reaches the destination only once it is whole
and verified: the fetched file (hashed as it streams), then the unpacked tree, then a merge
into the destination (`place.py`: Nomad's `mergeDirectories`, a directory merges into one
already there, a file replaces what has its name, links in the destination are replaced,
never followed). So a failed or interrupted download leaves the destination as it was;
staging directories an agent crash left behind are removed (`remove_stale_staging`) before
the task's next downloads.

Invariants: the destination is found, when the download is placed, by a walk of descriptors
from the allocation directory that never follows a link (Nomad's `ClientPath` escape check,
made stricter, on the very directories written; a check before the fetch only fails early),
so a task that swaps a directory on the way for a link while the download runs cannot make
the agent write or chown anywhere else, in the allocation directory or out (place.py).
The staging directory is created 0700 in the task directory, which the agent owns (0755,
client/allocdir.py): no task can enter, rename or replace it, so its names are trusted.
Every `file://` read (the source, a `checksum=file:` listing) is judged against the task's
user (access.py) and opened as a regular file only (fetch.py). Blocking work runs in worker
threads behind one `CapacityLimiter` per download, and checks for cancellation between
chunks, so a kill stops a long copy or unpack promptly; the staging directory is removed on
every exit, shielded and bounded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, final

import trio

from yurt.runtime.client.getter.access import Reader, check_readable, reader_of
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.getter.fetch import copy_file, fetch_http
from yurt.runtime.client.getter.place import (
    Target,
    check_destination,
    chown_staged,
    place,
    target_of,
)
from yurt.runtime.client.getter.source import (
    Checksum,
    GetterError,
    Plan,
    Source,
    parse_source,
    pick_checksum,
    plan,
)
from yurt.runtime.client.getter.unpack import copy_tree, unpack

STAGING_PREFIX: Final = ".artifact-"
_CHECKSUM_FILE_MAX: Final = 1 << 20  # a checksum file is text, a few lines per release
_CLEANUP_SECONDS: Final = 30.0


@dataclass(frozen=True)
class ArtifactRequest:
    """One artifact with everything interpolated, and where the task's files live."""

    source: str
    alloc_dir: Path | None
    task_dir: Path | None
    destination: str = "local/"
    mode: str = "any"
    options: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    insecure: bool = False
    #: (uid, gid) to give the destination to (the artifact's `chown` with the task's user).
    owner: tuple[int, int] | None = None
    #: The task's user: a `file://` source must be readable by it (access.py).
    user: str = ""


def remove_stale_staging(task_dir: Path) -> None:
    """Remove staging directories an interrupted download (an agent crash) left behind.
    Call it before a task's downloads start, never beside one: it would take that
    download's staging directory away."""
    with os.scandir(task_dir) as entries:
        for entry in entries:
            if entry.name.startswith(STAGING_PREFIX) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)


def _checksum_mismatch(path: Path, want: Checksum, got: bytes) -> GetterError:
    return GetterError(f"Checksums did not match for {path}.\nExpected: {want.digest.hex()}\n"
                       f"Got: {got.hex()}\n*{want.kind}.digest")


async def _fetch(source: Source, dest: Path, checksum: Checksum | None, config: ArtifactConfig,
                 request: ArtifactRequest, reader: Reader | None,
                 limiter: trio.CapacityLimiter, *, max_bytes: int) -> None:
    """Bring `source`'s bytes to the new file `dest`, verified against `checksum`; a local
    file only if the task's user (`reader`) may read it."""
    hasher = checksum.hasher() if checksum is not None else None
    if source.scheme == "file":
        path = Path(source.path)

        def copy() -> None:
            if reader is not None:
                check_readable(path, reader)
            copy_file(path, dest, max_bytes=max_bytes, hasher=hasher, reader=reader,
                      check=trio.from_thread.check_cancelled)

        await trio.to_thread.run_sync(copy, limiter=limiter)
    else:
        await fetch_http(source.url, dest, headers=request.headers or None,
                         insecure=request.insecure, max_bytes=max_bytes,
                         read_timeout=config.http_read_timeout, hasher=hasher,
                         limiter=limiter)
    if checksum is not None and hasher is not None and hasher.digest() != checksum.digest:
        raise _checksum_mismatch(dest, checksum, hasher.digest())


@final
@dataclass(frozen=True)
class _Prepared:
    """What a download settled before fetching: how the bytes land, where (checked once
    early, walked again when placed), its staging directory, and the task's user to judge
    local reads by (None: no user, or nothing local to read)."""

    alloc_dir: Path
    how: Plan
    target: Target
    stage: Path
    reader: Reader | None


async def get(request: ArtifactRequest, config: ArtifactConfig) -> None:
    """Download one artifact into its destination. Raises `GetterError`."""
    if request.task_dir is None or request.alloc_dir is None:
        raise GetterError("artifacts need a task directory, and this task runs without one")
    task_dir, alloc_dir = request.task_dir, request.alloc_dir
    source = parse_source(request.source, request.options)
    sums = parse_source(source.checksum_url) if source.checksum_url is not None else None
    local = source.scheme == "file" or (sums is not None and sums.scheme == "file")
    limiter = trio.CapacityLimiter(1)

    def prepare() -> _Prepared:
        reader = reader_of(request.user) if request.user and local else None
        if source.scheme == "file" and reader is not None:
            check_readable(Path(source.path), reader)
        # The plan only: copy_tree and copy_file judge what they open themselves.
        source_is_dir = source.scheme == "file" and os.path.isdir(source.path)
        how = plan(source, request.mode, source_is_dir=source_is_dir)
        target = target_of(alloc_dir, task_dir, request.destination, how)
        check_destination(alloc_dir, target)
        stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=task_dir))
        return _Prepared(alloc_dir, how, target, stage, reader)

    try:
        prepared = await trio.to_thread.run_sync(prepare, limiter=limiter)
    except OSError as e:
        raise GetterError(f"failed to prepare the artifact's destination: {e}") from None
    try:
        await _get_staged(request, config, source, sums, prepared, limiter)
    except OSError as e:
        raise GetterError(str(e)) from None
    finally:
        with trio.CancelScope(shield=True) as cleanup:
            cleanup.deadline = trio.current_time() + _CLEANUP_SECONDS
            await trio.to_thread.run_sync(
                lambda: shutil.rmtree(prepared.stage, ignore_errors=True), limiter=limiter)


async def _get_staged(request: ArtifactRequest, config: ArtifactConfig, source: Source,
                      sums: Source | None, prepared: _Prepared,
                      limiter: trio.CapacityLimiter) -> None:
    how, stage, reader = prepared.how, prepared.stage, prepared.reader
    checksum = source.checksum
    if sums is not None and source.checksum_url is not None:
        listing = stage / "checksums"
        await _fetch(sums, listing, None, config, request, reader, limiter,
                     max_bytes=_CHECKSUM_FILE_MAX)
        text = await trio.to_thread.run_sync(
            lambda: listing.read_text(errors="replace"), limiter=limiter)
        checksum = pick_checksum(text, source.path, source.checksum_url)
    out = stage / "out"
    check = trio.from_thread.check_cancelled
    if how.copy_dir:
        await trio.to_thread.run_sync(
            lambda: copy_tree(Path(source.path), out, reader=reader,
                              max_size=config.decompression_size_limit,
                              max_files=config.decompression_file_count_limit, check=check),
            limiter=limiter)
    else:
        download = stage / "download"
        await _fetch(source, download, checksum, config, request, reader, limiter,
                     max_bytes=config.http_max_size)
        if how.unpack is not None and source.archive is not None:
            archive = source.archive
            await trio.to_thread.run_sync(
                lambda: unpack(download, archive, out, as_dir=how.unpack == "dir",
                               max_size=config.decompression_size_limit,
                               max_files=config.decompression_file_count_limit, check=check),
                limiter=limiter)
        else:
            await trio.to_thread.run_sync(download.rename, out, limiter=limiter)

    def finish() -> None:
        if request.owner is not None:
            chown_staged(out, request.owner)
        place(out, prepared.alloc_dir, prepared.target, request.owner, check=check)

    await trio.to_thread.run_sync(finish, limiter=limiter)

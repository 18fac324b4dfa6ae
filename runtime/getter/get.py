"""One artifact download, end to end: parse, fetch, verify, unpack, place (Nomad's sandbox
`Get` followed by its inspection and merge).

Theory of operation. Everything lands first in a staging directory, new for each download,
inside the task directory (`.artifact-*`), and reaches the destination only once it is whole
and verified: the fetched file (hashed as it streams), then the unpacked tree, then a merge
into the destination (Nomad's `mergeDirectories`: a directory merges into one already there,
a file replaces what has its name, links in the destination are replaced, never followed).
So a failed or interrupted download leaves the destination as it was; staging directories an
agent crash left behind are removed (`remove_stale_staging`) before the task's next downloads.

Invariants: the destination, interpolated and joined to the task directory, stays inside the
allocation directory once links are resolved (Nomad's `ClientPath` escape check, made on the
real path); the staging directory is removed on every exit, shielded and bounded; blocking
work runs in worker threads behind one `CapacityLimiter` per download.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio

from yurt.runtime.getter.access import check_readable, reader_of
from yurt.runtime.getter.config import ArtifactConfig
from yurt.runtime.getter.fetch import copy_file, fetch_http
from yurt.runtime.getter.source import (
    Checksum,
    GetterError,
    Plan,
    Source,
    parse_source,
    pick_checksum,
    plan,
)
from yurt.runtime.getter.unpack import copy_tree, unpack

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


def resolve_destination(alloc_dir: Path, task_dir: Path, destination: str) -> Path:
    """The destination as a real path inside the allocation directory (Go's
    `filepath.Join(taskDir, dest)`: an absolute destination is task-relative too)."""
    joined = Path(os.path.normpath(os.path.join(task_dir, destination.lstrip("/"))))
    root = alloc_dir.resolve()
    real = Path(os.path.realpath(joined))
    if real != root and root not in real.parents:
        raise GetterError("artifact destination path escapes alloc directory")
    return real


def remove_stale_staging(task_dir: Path) -> None:
    """Remove staging directories an interrupted download (an agent crash) left behind.
    Call it before a task's downloads start, never beside one: it would take that
    download's staging directory away."""
    with os.scandir(task_dir) as entries:
        for entry in entries:
            if entry.name.startswith(STAGING_PREFIX) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)


def _merge(src: Path, dst: Path) -> None:
    """Move the tree `src` into the directory `dst` (Nomad's `mergeDirectories`)."""
    dst.mkdir(parents=True, exist_ok=True)
    with os.scandir(src) as entries:
        for entry in list(entries):
            target = dst / entry.name
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                os.rename(entry.path, target)
                continue
            src_dir = entry.is_dir(follow_symlinks=False)
            if src_dir and stat.S_ISDIR(st.st_mode):
                _merge(Path(entry.path), target)
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(target)
            elif src_dir:
                os.unlink(target)
            os.replace(entry.path, target)


def _place_file(src: Path, final: Path) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        if stat.S_ISDIR(os.lstat(final).st_mode):
            shutil.rmtree(final)
    except FileNotFoundError:
        pass
    os.replace(src, final)


def _chown_tree(path: Path, owner: tuple[int, int]) -> None:
    """Give the destination tree to the task's user; only root can, and Nomad's
    `chownDestination` quietly does nothing otherwise, as here."""
    if os.geteuid() != 0:
        return
    uid, gid = owner
    os.lchown(path, uid, gid)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _checksum_mismatch(path: Path, want: Checksum, got: bytes) -> GetterError:
    return GetterError(f"Checksums did not match for {path}.\nExpected: {want.digest.hex()}\n"
                       f"Got: {got.hex()}\n*{want.kind}.digest")


async def _fetch(source: Source, dest: Path, checksum: Checksum | None, config: ArtifactConfig,
                 request: ArtifactRequest, limiter: trio.CapacityLimiter, *,
                 max_bytes: int) -> None:
    """Bring `source`'s bytes to the new file `dest`, verified against `checksum`."""
    hasher = checksum.hasher() if checksum is not None else None
    if source.scheme == "file":
        await trio.to_thread.run_sync(
            lambda: copy_file(Path(source.path), dest, max_bytes=max_bytes, hasher=hasher),
            limiter=limiter)
    else:
        await fetch_http(source.url, dest, headers=request.headers or None,
                         insecure=request.insecure, max_bytes=max_bytes,
                         read_timeout=config.http_read_timeout, hasher=hasher,
                         limiter=limiter)
    if checksum is not None and hasher is not None and hasher.digest() != checksum.digest:
        raise _checksum_mismatch(dest, checksum, hasher.digest())


async def get(request: ArtifactRequest, config: ArtifactConfig) -> None:
    """Download one artifact into its destination. Raises `GetterError`."""
    if request.task_dir is None or request.alloc_dir is None:
        raise GetterError("artifacts need a task directory, and this task runs without one")
    task_dir, alloc_dir = request.task_dir, request.alloc_dir
    source = parse_source(request.source, request.options)
    limiter = trio.CapacityLimiter(1)

    def prepare() -> tuple[Path, Path, bool]:
        dest = resolve_destination(alloc_dir, task_dir, request.destination)
        if source.scheme == "file" and request.user:
            check_readable(Path(source.path), reader_of(request.user))
        stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=task_dir))
        return dest, stage, source.scheme == "file" and os.path.isdir(source.path)

    try:
        dest, stage, source_is_dir = await trio.to_thread.run_sync(prepare, limiter=limiter)
    except OSError as e:
        raise GetterError(f"failed to prepare the artifact's destination: {e}") from None
    try:
        await _get_staged(request, config, source, dest, stage, source_is_dir, limiter)
    except OSError as e:
        raise GetterError(str(e)) from None
    finally:
        with trio.CancelScope(shield=True) as cleanup:
            cleanup.deadline = trio.current_time() + _CLEANUP_SECONDS
            await trio.to_thread.run_sync(
                lambda: shutil.rmtree(stage, ignore_errors=True), limiter=limiter)


async def _get_staged(request: ArtifactRequest, config: ArtifactConfig, source: Source,
                      dest: Path, stage: Path, source_is_dir: bool,
                      limiter: trio.CapacityLimiter) -> None:
    checksum = source.checksum
    if source.checksum_url is not None:
        listing = stage / "checksums"
        sums = parse_source(source.checksum_url)
        await _fetch(sums, listing, None, config, request, limiter,
                     max_bytes=_CHECKSUM_FILE_MAX)
        text = await trio.to_thread.run_sync(
            lambda: listing.read_text(errors="replace"), limiter=limiter)
        checksum = pick_checksum(text, source.path, source.checksum_url)
    how: Plan = plan(source, request.mode, source_is_dir=source_is_dir)
    out = stage / "out"
    if how.copy_dir:
        reader = reader_of(request.user) if request.user else None
        await trio.to_thread.run_sync(
            lambda: copy_tree(Path(source.path), out, reader=reader,
                              max_size=config.decompression_size_limit,
                              max_files=config.decompression_file_count_limit),
            limiter=limiter)
    else:
        download = stage / "download"
        await _fetch(source, download, checksum, config, request, limiter,
                     max_bytes=config.http_max_size)
        if how.unpack is not None and source.archive is not None:
            archive = source.archive
            await trio.to_thread.run_sync(
                lambda: unpack(download, archive, out, as_dir=how.unpack == "dir",
                               max_size=config.decompression_size_limit,
                               max_files=config.decompression_file_count_limit),
                limiter=limiter)

    def place() -> None:
        if not how.copy_dir and how.unpack is None:
            (stage / "download").rename(out)
        if how.copy_dir or how.unpack == "dir":
            _merge(out, dest)
        else:
            _place_file(out, dest / how.target if how.target else dest)
        if request.owner is not None:
            _chown_tree(dest, request.owner)

    await trio.to_thread.run_sync(place, limiter=limiter)

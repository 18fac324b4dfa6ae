"""An allocation directory as Nomad's /v1/client/fs reads it, confined to that directory.

The agent may run as root while the directory it serves is shared with the tasks, which can
create any name, link or directory in it at any moment. A check of the path followed by an
`open` of the same path (`realpath`, then `open`) loses that race: the task swaps a component
for a link between the two. So a path is never handed to the kernel whole. `open_confined`
walks it one component at a time from a descriptor of the allocation directory, opening each
component relative to the descriptor of its parent with `O_PATH | O_NOFOLLOW`: a link is never
followed by the kernel, it is read (`readlinkat` on the link's own descriptor) and its target
resolved by the same walk, `..` included, which pops the walk's own stack of descriptors and
can never rise above the allocation directory. What the caller reads is the descriptor the
walk ended on, so a link swapped in afterwards changes nothing for that request.

Nomad's rules, kept: the requested path is cleaned lexically first, as Go's `filepath.Join`
does, and a path whose `..` rises above the allocation directory is refused ("Path escapes the
alloc directory"), as is a link whose target leads outside (an absolute target is allowed when
it names a place inside the allocation directory). `/` is the allocation directory itself, so
`/etc/passwd` is `<alloc dir>/etc/passwd`. Listing and stat work everywhere, `secrets/`
included; reading a file under a task's `secrets/` is refused ("Reading secret file
prohibited"), as Nomad refuses it. Only regular files are read: a FIFO (the log pipes live in
`alloc/logs`) would block a reader thread forever, a device file could have side effects.
Hard links are no way out either: the kernel's `protected_hardlinks` keeps a task from linking
a file it could not read itself (and a task running as root reads anything without the API).

Offsets are Nomad's (`AllocDir.ReadAt` in client/allocdir/alloc_dir.go opens the file and seeks):
`open_file` seeks the descriptor to where reading starts, so an offset past the end of the file
reads nothing, and one past the largest file the file system allows (the kernel's EINVAL from
`lseek`) or past what an `off_t` holds is refused with a 400 naming the offset. A read never asks
for bytes past the largest `off_t` either (`pread` at such a position is an EINVAL too).

Every function here blocks (file system calls): the API runs them in worker threads. `FileChunks`
reads an opened file 64 KiB at a time, following it (as `tail -f`) when asked; it owns the
descriptor and closes it in `aclose`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, final

import trio

from yurt.runtime.client.logs.reader import Chunk

CHUNK: Final = 64 * 1024
#: The largest file position there is (`off_t`, signed 64 bits).
MAX_POSITION: Final = (1 << 63) - 1
POLL: Final = 0.1
#: Links followed in one walk before it is refused, as the kernel's own limit (ELOOP).
MAX_LINKS: Final = 40
ESCAPES: Final = "Path escapes the alloc directory"
TRUNCATED: Final = "file truncated"
DELETED: Final = "file deleted"

_WALK_FLAGS: Final = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class FsError(Exception):
    """A request the allocation directory cannot answer: an HTTP status and Nomad's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def clean_parts(path: str) -> list[str]:
    """The components of `path` below the allocation directory, cleaned as Go's `filepath.Join`
    cleans them (`.` and empty parts dropped, `a/..` removed); a `..` above the top: refused."""
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise FsError(400, ESCAPES)
            parts.pop()
            continue
        parts.append(part)
    return parts


@final
@dataclass
class Opened:
    """Where a walk ended: an `O_PATH` descriptor (the caller closes it), its stat, and the
    names from the allocation directory down to it, links resolved."""

    fd: int
    st: os.stat_result
    resolved: tuple[str, ...]


def _os_error(e: OSError, shown: str) -> FsError:
    if e.errno == errno.ENOENT:
        return FsError(404, f"stat {shown}: no such file or directory")
    if e.errno in (errno.EACCES, errno.EPERM):
        return FsError(403, f"stat {shown}: permission denied")
    return FsError(400, f"stat {shown}: {e.strerror or 'invalid path'}")


def open_confined(root: Path, path: str) -> Opened:
    """Resolve `path` (relative to the allocation directory `root`) without ever leaving it.

    Raises:
        FsError: 400 for a path or link that leads outside, or through a non-directory;
            404 for a missing component.
    """
    shown = "/" + "/".join(clean_parts(path))
    pending = clean_parts(path)
    pending.reverse()  # a stack: the next component last
    try:
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise _os_error(e, "/") from None
    stack: list[tuple[str, int]] = [("", root_fd)]
    links = 0
    try:
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if len(stack) == 1:
                    raise FsError(400, ESCAPES)
                os.close(stack.pop()[1])
                continue
            parent = stack[-1][1]
            if not stat.S_ISDIR(os.fstat(parent).st_mode):
                raise FsError(400, f"stat {shown}: not a directory")
            try:
                fd = os.open(name, _WALK_FLAGS, dir_fd=parent)
            except ValueError:  # a NUL byte in the name
                raise FsError(400, f"invalid path {shown!r}") from None
            st = os.fstat(fd)
            if not stat.S_ISLNK(st.st_mode):
                stack.append((name, fd))
                continue
            try:
                target = os.readlink("", dir_fd=fd)  # this very link, not the name again
            finally:
                os.close(fd)
            links += 1
            if links > MAX_LINKS:
                raise FsError(400, f"stat {shown}: too many levels of symbolic links")
            if target.startswith("/"):
                inside = _inside(root, target)
                if inside is None:
                    raise FsError(400, ESCAPES)
                while len(stack) > 1:
                    os.close(stack.pop()[1])
                target = inside
            pending.extend(reversed(target.split("/")))
        resolved = tuple(n for n, _ in stack[1:])
        top = stack.pop()[1] if len(stack) > 1 else os.dup(root_fd)
        try:
            return Opened(top, os.fstat(top), resolved)
        except BaseException:
            os.close(top)
            raise
    except OSError as e:
        raise _os_error(e, shown) from None
    finally:
        for _, fd in stack:
            os.close(fd)


def open_making_dirs(root: Path, parts: Sequence[str], mode: int) -> Opened:
    """The directory `parts` below `root`, reached by `open_confined` one component at a time,
    each missing directory made (`mode`, trimmed by the umask) relative to the descriptor of
    its parent: nothing is ever created by a path the kernel resolves. A directory made
    meanwhile is fine; a dangling link in its place fails `mkdir` (EEXIST) and then the walk
    (404), so it is never followed. The caller closes the returned descriptor.

    Raises:
        FsError: as `open_confined`, and 400 when a component is not a directory.
    """
    where = open_confined(root, "")
    try:
        for part in parts:
            below = "/".join((*where.resolved, part))
            try:
                nxt = open_confined(root, below)
            except FsError as e:
                if e.status != 404:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=where.fd)
                nxt = open_confined(root, below)
            os.close(where.fd)
            where = nxt
            if not stat.S_ISDIR(where.st.st_mode):
                raise FsError(400, f"{below} is not a directory")
    except BaseException:
        os.close(where.fd)
        raise
    return where


def _inside(root: Path, target: str) -> str | None:
    """`target` (an absolute link target) relative to `root`, or None if it is outside."""
    base = clean_parts(str(root))
    try:
        parts = clean_parts(target)
    except FsError:
        return None
    if parts[:len(base)] != base:
        return None
    return "/".join(parts[len(base):])


def go_file_mode(mode: int) -> str:
    """`mode` as Go's `os.FileMode.String()` spells it (`drwxr-xr-x`, `Lrwxrwxrwx`,
    `dtrwxrwxrwx` for a sticky directory, `prw-------` for a FIFO)."""
    kind = ""
    if stat.S_ISDIR(mode):
        kind += "d"
    if stat.S_ISLNK(mode):
        kind += "L"
    if stat.S_ISBLK(mode) or stat.S_ISCHR(mode):
        kind += "D"
    if stat.S_ISFIFO(mode):
        kind += "p"
    if stat.S_ISSOCK(mode):
        kind += "S"
    if mode & stat.S_ISUID:
        kind += "u"
    if mode & stat.S_ISGID:
        kind += "g"
    if stat.S_ISCHR(mode):
        kind += "c"
    if mode & stat.S_ISVTX:
        kind += "t"
    perms = "".join(c if mode & (1 << (8 - i)) else "-" for i, c in enumerate("rwxrwxrwx"))
    return (kind or "-") + perms


def file_info(name: str, st: os.stat_result, content_type: str = "") -> dict[str, Any]:
    """Nomad's `AllocFileInfo`."""
    return {"Name": name, "IsDir": stat.S_ISDIR(st.st_mode), "Size": st.st_size,
            "FileMode": go_file_mode(st.st_mode),
            "ModTime": datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC),
            "ContentType": content_type}


#: Go's `http.DetectContentType` signatures that files in an allocation plausibly start with
#: (a subset: the audio, video and font signatures are left out and answer as binary).
_SIGNATURES: Final = (
    (b"%PDF-", "application/pdf"), (b"%!PS-Adobe-", "application/postscript"),
    (b"\xfe\xff", "text/plain; charset=utf-16be"), (b"\xff\xfe", "text/plain; charset=utf-16le"),
    (b"\xef\xbb\xbf", "text/plain; charset=utf-8"), (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"), (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"), (b"BM", "image/bmp"), (b"\x1f\x8b\x08", "application/x-gzip"),
    (b"PK\x03\x04", "application/zip"), (b"\x00asm", "application/wasm"),
    (b"Rar!\x1a\x07", "application/x-rar-compressed"))
_HTML_TAGS: Final = (b"<!DOCTYPE HTML", b"<HTML", b"<HEAD", b"<SCRIPT", b"<IFRAME", b"<H1",
                     b"<DIV", b"<FONT", b"<TABLE", b"<A", b"<STYLE", b"<TITLE", b"<B", b"<BODY",
                     b"<BR", b"<P", b"<!--")
_BINARY: Final = frozenset([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20)])


def sniff(head: bytes) -> str:
    """The content type Go's `http.DetectContentType` gives the first 512 bytes of a file."""
    for magic, kind in _SIGNATURES:
        if head.startswith(magic):
            return kind
    text = head.lstrip(b"\t\n\x0c\r ")
    for tag in _HTML_TAGS:
        if text[:len(tag)].upper() == tag and text[len(tag):len(tag) + 1] in (b" ", b">"):
            return "text/html; charset=utf-8"
    if text.startswith(b"<?xml"):
        return "text/xml; charset=utf-8"
    if any(b in _BINARY for b in head):
        return "application/octet-stream"
    return "text/plain; charset=utf-8"


def _reopen(opened: Opened, flags: int) -> int:
    """A readable descriptor for the very file the walk ended on: through its `O_PATH`
    descriptor (/proc/self/fd), never through its name again."""
    return os.open(f"/proc/self/fd/{opened.fd}", flags | os.O_CLOEXEC)


def _content_type(opened: Opened, name: str) -> str:
    kind = "application/octet-stream"
    if stat.S_ISREG(opened.st.st_mode):
        fd = _reopen(opened, os.O_RDONLY | os.O_NONBLOCK)
        try:
            head = os.pread(fd, 512, 0)
        finally:
            os.close(fd)
        if head:  # Go: an empty file's first read is io.EOF, and the default stays
            kind = sniff(head)
    if name.endswith(".json"):
        kind = "application/json"
    return kind


def stat_path(root: Path, path: str) -> dict[str, Any]:
    """Nomad's `Stat`: the file or directory at `path`, links followed (inside only)."""
    opened = open_confined(root, path)
    try:
        parts = clean_parts(path)
        name = parts[-1] if parts else root.name
        return file_info(name, opened.st, _content_type(opened, name))
    finally:
        os.close(opened.fd)


def list_dir(root: Path, path: str) -> list[dict[str, Any]]:
    """Nomad's `List`: the entries of the directory at `path`, sorted by name, each as
    `lstat` sees it (a link is listed as a link)."""
    opened = open_confined(root, path)
    try:
        if not stat.S_ISDIR(opened.st.st_mode):
            shown = "/" + "/".join(clean_parts(path))
            raise FsError(400, f"readdirent {shown}: not a directory")
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=opened.fd)
    finally:
        os.close(opened.fd)
    try:
        infos = []
        with os.scandir(fd) as entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed while listed
                    continue
                infos.append(file_info(entry.name, st))
        return sorted(infos, key=lambda i: str(i["Name"]))
    finally:
        os.close(fd)


def is_secret(resolved: Iterable[str], tasks: Iterable[str]) -> bool:
    """Under `<task>/secrets` (compared without case, as Nomad compares)."""
    parts = [p.lower() for p in resolved]
    return len(parts) >= 2 and parts[1] == "secrets" and parts[0] in {t.lower() for t in tasks}


@final
@dataclass
class OpenFile:
    """A regular file opened for reading, and where reading starts; the caller owns `fd`."""

    fd: int
    size: int
    name: str
    offset: int = 0


def open_file(root: Path, path: str, tasks: Iterable[str], offset: int = 0,
              origin: str = "start") -> OpenFile:
    """Open the regular file at `path` for reading (cat, readat, stream), at `offset` bytes
    from its start, or from its end with `origin` "end" (never before the start).

    Raises:
        FsError: as `open_confined`; 400 for a directory or anything but a regular file, or
            an offset the file system cannot seek to; 403 under a task's `secrets/`.
    """
    opened = open_confined(root, path)
    try:
        if stat.S_ISDIR(opened.st.st_mode):
            raise FsError(400, f'file "{path}" is a directory')
        if is_secret(opened.resolved, tasks):
            raise FsError(403, f"Reading secret file prohibited: {path}")
        if not stat.S_ISREG(opened.st.st_mode):
            raise FsError(400, f'file "{path}" is not a regular file')
        fd = _reopen(opened, os.O_RDONLY | os.O_NONBLOCK)
    finally:
        os.close(opened.fd)
    size = opened.st.st_size
    start = max(size - offset if origin == "end" else offset, 0)
    try:
        _seek(fd, start, offset, origin)
    except BaseException:
        os.close(fd)
        raise
    return OpenFile(fd, size, path, start)  # Nomad's frames name the path as asked


def _seek(fd: int, start: int, offset: int, origin: str) -> None:
    """Seek `fd` to `start`, as Nomad's `AllocDir.ReadAt` seeks (client/allocdir/alloc_dir.go):
    the kernel refuses a position past the largest file its file system allows (EINVAL), and
    no position is past `MAX_POSITION`. Refused: a 400 naming the `offset` parameter."""
    try:
        if start > MAX_POSITION:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        os.lseek(fd, start, os.SEEK_SET)
    except OSError as e:
        where = f"offset {offset} from the end" if origin == "end" else f"offset {offset}"
        reason = (e.strerror or "invalid argument").lower()
        raise FsError(400, f"{where} is past the largest file the file system allows "
                           f"(can't seek to offset {start}: {reason})") from None


@final
class FileChunks:
    """The bytes of an open file from its `offset`, as `Chunk`s of at most 64 KiB.

    Without `follow` it ends at the end of the file (or after `limit` bytes, when positive).
    With `follow` it waits for more, polling every `POLL` seconds as the log reader does, and
    reports Nomad's file events: a file that shrank below the position is read again from 0
    after a `file truncated` chunk; a file removed (no name left) ends with `file deleted`.
    It reads the descriptor it was given, so renaming or replacing the name changes nothing.
    """

    def __init__(self, opened: OpenFile, *, follow: bool, limit: int = 0,
                 limiter: trio.CapacityLimiter | None = None) -> None:
        self._limiter = limiter
        self._fd = opened.fd
        self._file = opened.name
        self._position = opened.offset
        self._follow = follow
        self._left = limit if limit > 0 else -1

    def __aiter__(self) -> FileChunks:
        return self

    def _read(self, size: int) -> tuple[bytes, int, int]:
        # Never past the largest position: the kernel answers EINVAL to a read that would end
        # past it, even where the file system takes files that large (tmpfs, xfs).
        size = min(size, MAX_POSITION - self._position)
        data = os.pread(self._fd, size, self._position) if size > 0 else b""
        if data:
            return data, 0, 1
        st = os.fstat(self._fd)
        return b"", st.st_size, st.st_nlink

    async def __anext__(self) -> Chunk:
        while self._fd >= 0 and self._left != 0:
            want = CHUNK if self._left < 0 else min(CHUNK, self._left)
            data, size, links = await trio.to_thread.run_sync(self._read, want,
                                                              limiter=self._limiter)
            if data:
                start = self._position
                self._position += len(data)
                self._left -= len(data) if self._left > 0 else 0
                return Chunk(self._file, start, data)
            if not self._follow:
                break
            if size < self._position:
                self._position = 0
                return Chunk(self._file, 0, b"", TRUNCATED)
            if links == 0:
                self._close()
                return Chunk(self._file, self._position, b"", DELETED)
            await trio.sleep(POLL)
        self._close()
        raise StopAsyncIteration

    def _close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    async def aclose(self) -> None:
        """Close the file (at once: closing a descriptor does not block)."""
        self._close()

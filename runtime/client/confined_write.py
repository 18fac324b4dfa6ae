"""Replace a file in a directory the tasks share, atomically, without trusting any name in it.

The agent runs as root and writes into allocation directories (rendered templates, workload
identity tokens) whose every directory a task may write too, as another user, at any moment.
Whatever name the agent is about to use, the task may have planted first:

- a FIFO: an `open` for writing waits for a reader forever; the worker thread never returns,
  and the task kill that waits on the hook hangs with it;
- a symbolic link: the write lands wherever it points (`O_NOFOLLOW` refuses the last
  component only, and only when it is given);
- a hard link to some other file: `O_TRUNC` and the write change that file.

So a fixed temporary name (`.<name>.yurt-tmp`, opened with `O_TRUNC`) was a trap a task could
set. Here the temporary name carries 64 random bits (`secrets`), and it is created, never
opened: `O_CREAT | O_EXCL` fails on any existing entry, link or FIFO included, and is retried
with a new name; `O_NOFOLLOW` and `O_NONBLOCK` make sure that, whatever the kernel decided, no
link is followed and no open waits. The descriptor is then checked with `fstat` (a regular
file, one link) before a byte is written. Every name is resolved relative to the directory's
descriptor, which the caller reached by a confined walk (runtime/client/allocfs.py), so no path is
ever resolved twice.

The destination itself is never opened: the temporary file is renamed over it (`rename(2)`
replaces a link, FIFO or file in place, atomically: a reader sees the old file or the new one,
and a link's target is untouched). A directory in its place makes the rename fail, and the
temporary file is removed on every failure.

What is left to a task that can write the directory: swapping the renamed file for its own
afterwards, which it could do to the destination anyway. It gains nothing it did not have.

Blocking (file system calls, fsync): callers run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from typing import Final

#: Temporary-name attempts before giving up: each collides only with a name a task guessed
#: among 2**64, so more than one means something is very wrong.
ATTEMPTS: Final = 8
_CREATE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def temporary_name(name: str) -> str:
    """A fresh hidden name beside `name`; at most 100 characters, so it fits NAME_MAX (255)
    whatever the length of `name`."""
    return f".{name[:64]}.{secrets.token_hex(8)}.yurt-tmp"


def _create(dir_fd: int, name: str) -> tuple[str, int]:
    for _ in range(ATTEMPTS):
        tmp = temporary_name(name)
        try:
            return tmp, os.open(tmp, _CREATE, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no fresh temporary name after {ATTEMPTS} attempts")


def replace_file_at(
    dir_fd: int, name: str, data: bytes, mode: int, uid: int | None = None, gid: int | None = None
) -> None:
    """Make `name` in the directory `dir_fd` a new regular file holding `data`, atomically.

    Args:
        dir_fd: the directory (an `O_PATH` descriptor will do); the caller keeps it.
        name: one path component.
        mode: the file's permission bits, set after the owner (a `chown` clears set-id bits).
        uid, gid: the owner to give it, None to leave that part root's.

    Raises:
        OSError: the directory refused the temporary file or the rename (a directory named
            `name`: `IsADirectoryError`), or the temporary file was tampered with.
    """
    tmp, fd = _create(dir_fd, name)
    try:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise OSError(errno.EEXIST, f"temporary file {tmp!r} is not ours")
            _write_all(fd, data)
            if uid is not None or gid is not None:
                os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def holds_at(dir_fd: int, name: str, data: bytes) -> bool:
    """Whether `name` in `dir_fd` is a regular file holding exactly `data`. Opens nothing but
    a regular file of the right size: a link, FIFO or device there is just "different"."""
    try:
        pinned = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        st = os.fstat(pinned)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
            return False
        # Reopening the pinned inode: whatever is renamed to `name` meanwhile is not read.
        with open(f"/proc/self/fd/{pinned}", "rb") as f:
            return f.read(len(data) + 1) == data
    except OSError:
        return False
    finally:
        os.close(pinned)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]

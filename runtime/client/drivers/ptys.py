"""Pseudo-terminals for `alloc exec -t` (execstream.py): the host's, or one of a task's own
devpts instance, reached without following anything the task could plant.

Invariants: a task's terminal is opened step by step from `/proc/PID/root` with O_NOFOLLOW
and checked (a devpts filesystem, the ptmx device 5:2), and its slave is taken from the
master (`TIOCGPTPEER`), never by a path; anything else there is refused (DriverError).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import stat
import struct
from typing import Final

from yurt.runtime.errors import DriverError

#: <asm-generic/ioctls.h>: a pty master's unlock (what unlockpt does).
TIOCSPTLCK: Final = 0x40045431
#: <asm-generic/ioctls.h>: a new fd on a master's slave (Linux 4.13), with open(2) flags.
TIOCGPTPEER: Final = 0x5441
#: <linux/magic.h>.
DEVPTS_SUPER_MAGIC: Final = 0x1CD1
#: Room for <bits/statfs.h>'s struct statfs (120 bytes on 64-bit Linux).
STATFS_SIZE: Final = 256
_libc = ctypes.CDLL(None, use_errno=True)


def open_pty(task_root: str | None) -> tuple[int, int, str | None]:
    """A pseudo-terminal: its master, its slave and the slave's path (None: the slave is
    only an fd). From the host's devpts (`os.openpty`), or from the devpts instance a task
    mounted at its root's `/dev/pts` (`task_root` is `/proc/PID/root`, see
    `open_task_ptmx`): its slave by `TIOCGPTPEER` on the master, never by a path. A task
without a /dev/pts (started before execstart.sh made one) gets the host's.

    Raises:
        OSError: no pty, or (DriverError) the task's /dev/pts is not a devpts instance.
    """
    try:
        master = open_task_ptmx(task_root) if task_root is not None else None
    except FileNotFoundError:  # a task started before it had a devpts: the host's pty
        master = None
    if master is None:
        master, slave = os.openpty()
        return master, slave, os.ttyname(slave)
    try:
        fcntl.ioctl(master, TIOCSPTLCK, struct.pack("i", 0))  # unlockpt
        slave = fcntl.ioctl(master, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except BaseException:
        os.close(master)
        raise
    return master, slave, None


def _fs_type(fd: int) -> int:
    """The filesystem magic of `fd` (fstatfs(2)'s f_type, the struct's first word)."""
    buf = ctypes.create_string_buffer(STATFS_SIZE)
    if _libc.fstatfs(fd, buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(ctypes.c_long.from_buffer(buf).value)


def open_task_ptmx(task_root: str) -> int:
    """The master of a new pty of the devpts instance at `task_root`/dev/pts, opened without
    following anything the task could plant: its /dev is a writable tmpfs, where a symlink
    would be resolved against the agent's root (a root task could make the agent open any
    host file). Each step is relative to the previous one's fd, with O_NOFOLLOW; `pts` must
    be a devpts filesystem (where nothing can be created) and `ptmx` its ptmx node (5:2).

    Raises:
        FileNotFoundError: the task has no /dev/pts (started before it had one).
        DriverError: anything else there is not what execstart.sh made.
    """
    def refuse(why: str) -> DriverError:
        return DriverError(f"cannot open the task's terminal: {why}")

    walk = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    root = os.open(task_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fds = [root]
    try:
        for name, shown in (("dev", "/dev"), ("pts", "/dev/pts")):
            try:
                fds.append(os.open(name, walk, dir_fd=fds[-1]))
            except FileNotFoundError:
                raise
            except OSError as e:  # ELOOP, ENOTDIR: a symlink or a file planted there
                raise refuse(f"{shown}: {e.strerror}") from None
        if _fs_type(fds[-1]) != DEVPTS_SUPER_MAGIC:
            raise refuse("/dev/pts is not a devpts filesystem")
        try:
            master = os.open("ptmx", os.O_RDWR | os.O_NOCTTY | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, dir_fd=fds[-1])
        except OSError as e:
            raise refuse(f"/dev/pts/ptmx: {e.strerror}") from None
        found = os.fstat(master)
        if not stat.S_ISCHR(found.st_mode) or found.st_rdev != os.makedev(5, 2):
            os.close(master)
            raise refuse("/dev/pts/ptmx is not the ptmx device")
        return master
    finally:
        for fd in fds:
            os.close(fd)

"""`LogPump`: drain one task stream's FIFO into rotated files `<task>.<stream>.<N>`.

Opening order matters, or a short-lived task's output is lost: a pipe whose last writer closes
while nobody has it open for reading is destroyed with its contents. So `open_fifo` opens the
read end *before* the task starts, plus a "keeper" write end held by the agent for as long as
the task runner lives: the read end sees end-of-file only after the keeper is closed and every
task process (and its shim) is gone, and the pipe survives between two starts of the task.
Every chunk goes to the rotation planner; file writes run in a worker thread, one hop per
chunk (up to 64 KiB), never per line. Starting takes one hop too: the files already there
and the spill (below) are read in the same one.

Output still in the pipe when a task exits while no agent runs would die with the pipe's last
writer, the shim: the shim moves it to a spill file, which the next pump writes first
(`spill.py`). What this cannot keep: a chunk read but not yet written when the agent
is killed with SIGKILL.

Writes fail soft. A full disk (or any other error writing a log file) must not end the pump:
its exception would tear down the task runner's nursery and with it supervision. The chunk is
dropped and counted (`dropped`), the pump keeps draining the FIFO (a task blocked on a full
pipe would be worse than lost output), and `on_drop` is told once per run of failures (the
task gets one event, not one per chunk). Deletes of old files still run, which may free space.

Log files are opened with `O_NOFOLLOW` and must be regular files: the agent is root and the
directory is shared with tasks, so it never writes through a link or blocks on a planted FIFO.
They are made 0640 and the FIFOs 0600: the logs dir's group (the allocation's task users, see
client/allocdir.py) may read a log, nobody else, and nobody but the agent opens a FIFO.

The pipe buffer is raised to 1 MiB (`F_SETPIPE_SZ`) so a task can keep writing for a while
when no agent reads (it blocks, it does not die, once the buffer is full); a pump started
after an agent restart drains what waited there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final, final

import trio

from yurt.runtime.client.logs import spill
from yurt.runtime.client.logs.rotation import Append, Op, Rotation

CHUNK: Final = 64 * 1024
PIPE_SIZE: Final = 1024 * 1024
F_SETPIPE_SZ: Final = 1031  # Linux
LOG_FILE_MODE: Final = 0o640


def _file_part(task: str) -> str:
    """`task` as part of a file name in the logs dir; a name that could leave it is refused
    (job validation should have refused it first)."""
    if not task or "/" in task or "\0" in task or task in (".", ".."):
        raise ValueError(f"task name {task!r} cannot name a log file")
    return task


def fifo_path(logs_dir: Path, task: str, stream: str) -> Path:
    return logs_dir / f".{_file_part(task)}.{stream}.fifo"


def log_base(logs_dir: Path, task: str, stream: str) -> Path:
    return logs_dir / f"{_file_part(task)}.{stream}"


def make_fifo(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkfifo(path, 0o600)


def existing_files(base: Path) -> dict[int, int]:
    """`{index: size}` of the rotated files already there for `base`."""
    pattern = re.compile(re.escape(base.name) + r"\.(\d+)$")
    found = {}
    for entry in base.parent.iterdir():
        m = pattern.match(entry.name)
        if m:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # rotated away since the listing
                continue
            if stat.S_ISREG(st.st_mode):  # a link or FIFO planted there is not a log file
                found[int(m.group(1))] = st.st_size
    return found


def open_log_file(path: Path, flags: int) -> int:
    """Open a log file without following a link, refusing anything but a regular file."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, LOG_FILE_MODE)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _append(path: Path, data: bytes) -> int:
    """Append `data`; returns how many bytes did not make it (0 unless an error is raised
    after a partial write, which is then swallowed and reported through the count)."""
    view = memoryview(data)
    fd = open_log_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        if len(view) == len(data):
            raise
    finally:
        os.close(fd)
    return len(view)


def apply(base: Path, ops: list[Op]) -> tuple[int, OSError | None]:
    """Apply the planner's ops in order. Returns (bytes dropped, first error): a failed op
    does not stop the ones after it (a delete may free the space the next append needs)."""
    dropped, first = 0, None
    for op in ops:
        path = base.with_name(f"{base.name}.{op.index}")
        try:
            if isinstance(op, Append):
                dropped += _append(path, op.data)
            else:
                path.unlink(missing_ok=True)
        except OSError as e:
            first = first or e
            if isinstance(op, Append):
                dropped += len(op.data)
    return dropped, first


def open_fifo(path: Path) -> tuple[int, int]:
    """Make the FIFO if needed and open it: (read end, keeper write end)."""
    make_fifo(path)
    read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    try:
        if not stat.S_ISFIFO(os.fstat(read_fd).st_mode):
            raise OSError(errno.EINVAL, "not a FIFO", str(path))
        keep_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        os.close(read_fd)
        raise
    with contextlib.suppress(OSError):  # an unprivileged limit: the default 64 KiB still works
        fcntl.fcntl(read_fd, F_SETPIPE_SZ, PIPE_SIZE)
    return read_fd, keep_fd


#: Told once when log writes start failing (then again only after one succeeded).
OnDrop = Callable[[str], Awaitable[None]]


@final
class LogPump:
    def __init__(self, read_fd: int, base: Path, *, file_size: int, max_files: int,
                 on_drop: OnDrop | None = None) -> None:
        self.read_fd = read_fd
        self.base = base
        self.file_size = file_size
        self.max_files = max_files
        self.on_drop = on_drop
        #: Bytes of output read from the task but not written (full disk, bad file).
        self.dropped = 0
        self._failing = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Drain `read_fd` (which this pump now owns) until end of file."""
        # The stream's lock, held while the pump lives (and released if the agent dies).
        async with trio.lowlevel.FdStream(self.read_fd) as stream, spill.claimed(self.base):
            def resume() -> Rotation:
                """In one worker-thread hop (a pump starts with every task start, hundreds at
                once): the files already there, then what a shim saved while no agent read,
                which comes before anything in the pipe."""
                rotation = Rotation.resume(self.file_size, self.max_files,
                                           existing_files(self.base))

                def write_spilled(data: bytes) -> None:
                    self.dropped += apply(self.base, rotation.plan(data))[0]

                spill.replay(self.base, write_spilled)
                return rotation

            rotation = await trio.to_thread.run_sync(resume)
            task_status.started()
            while True:
                data = await stream.receive_some(CHUNK)
                if not data:
                    return
                dropped, error = await trio.to_thread.run_sync(
                    apply, self.base, rotation.plan(data))
                self.dropped += dropped
                if error is None:
                    self._failing = False
                elif not self._failing:
                    self._failing = True
                    if self.on_drop is not None:
                        await self.on_drop(f"writing {self.base.name} logs failed, output is "
                                           f"dropped until it works again: {error}")

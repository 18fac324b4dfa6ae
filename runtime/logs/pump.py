"""`LogPump`: drain one task stream's FIFO into rotated files `<task>.<stream>.<N>`.

Opening order matters, or a short-lived task's output is lost: a pipe whose last writer closes
while nobody has it open for reading is destroyed with its contents. So `open_fifo` opens the
read end *before* the task starts, plus a "keeper" write end held by the agent for as long as
the task runner lives: the read end sees end-of-file only after the keeper is closed and every
task process (and its shim) is gone, and the pipe survives between two starts of the task.
Every chunk goes to the rotation planner; file writes run in a worker thread, one hop per
chunk (up to 64 KiB), never per line.

Output still in the pipe when a task exits while no agent runs would die with the pipe's last
writer, the shim: the shim moves it to a spill file, which the next pump writes first
(`runtime.logs.spill`). What this cannot keep: a chunk read but not yet written when the agent
is killed with SIGKILL.

The pipe buffer is raised to 1 MiB (`F_SETPIPE_SZ`) so a task can keep writing for a while
when no agent reads (it blocks, it does not die, once the buffer is full); a pump started
after an agent restart drains what waited there.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from pathlib import Path
from typing import Final, final

import trio

from yurt.runtime.logs import spill
from yurt.runtime.logs.rotation import Append, Op, Rotation

CHUNK: Final = 64 * 1024
PIPE_SIZE: Final = 1024 * 1024
F_SETPIPE_SZ: Final = 1031  # Linux


def fifo_path(logs_dir: Path, task: str, stream: str) -> Path:
    return logs_dir / f".{task}.{stream}.fifo"


def log_base(logs_dir: Path, task: str, stream: str) -> Path:
    return logs_dir / f"{task}.{stream}"


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
            found[int(m.group(1))] = entry.stat().st_size
    return found


def apply(base: Path, ops: list[Op]) -> None:
    for op in ops:
        path = base.with_name(f"{base.name}.{op.index}")
        if isinstance(op, Append):
            with open(path, "ab") as f:
                f.write(op.data)
        else:
            path.unlink(missing_ok=True)


def open_fifo(path: Path) -> tuple[int, int]:
    """Make the FIFO if needed and open it: (read end, keeper write end)."""
    make_fifo(path)
    read_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        keep_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        os.close(read_fd)
        raise
    with contextlib.suppress(OSError):  # an unprivileged limit: the default 64 KiB still works
        fcntl.fcntl(read_fd, F_SETPIPE_SZ, PIPE_SIZE)
    return read_fd, keep_fd


@final
class LogPump:
    def __init__(self, read_fd: int, base: Path, *, file_size: int, max_files: int) -> None:
        self.read_fd = read_fd
        self.base = base
        self.file_size = file_size
        self.max_files = max_files

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Drain `read_fd` (which this pump now owns) until end of file."""
        # The stream's lock, held while the pump lives (and released if the agent dies).
        async with trio.lowlevel.FdStream(self.read_fd) as stream, spill.claimed(self.base):
            found = await trio.to_thread.run_sync(existing_files, self.base)
            rotation = Rotation.resume(self.file_size, self.max_files, found)
            # What a shim saved while no agent read comes before anything in the pipe.
            await trio.to_thread.run_sync(
                spill.replay, self.base, lambda d: apply(self.base, rotation.plan(d)))
            task_status.started()
            while True:
                data = await stream.receive_some(CHUNK)
                if not data:
                    return
                await trio.to_thread.run_sync(apply, self.base, rotation.plan(data))

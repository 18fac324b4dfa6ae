"""`logmon`: the task's stdout and stderr, from FIFOs into rotated log files.

One pump per stream for the task runner's whole life, as Nomad runs one logmon per task: the
first prestart opens both FIFOs in `alloc/logs/` (read end, plus a keeper write end, see
`client/logs/pump.py`) and starts the pumps in the runner's background nursery. Every start of
the task then writes into the same pipes, read by the same pumps, so two invocations never
race for one FIFO and rotation state is never forked. The stop hook (the runner is done) and
the shutdown hook (the agent stops) close the keepers: the pumps drain what is left and end
when the last writer is gone. With `logs { disabled = true }`, or without an alloc dir (mock
tasks), the hook does nothing and the driver sends output to /dev/null.

Partial failure: the pumps are recorded per stream, so a prestart that started stdout and then
failed on stderr starts only stderr the next time; a second pump on one FIFO would split the
output between two rotations.

The FIFOs the allocation's directory batch made already (`AllocDir.build_all`, given as
`alloc_dir`) are opened on the event loop: two non-blocking opens of an existing FIFO cannot
block, and a worker-thread hop per stream is what made hundreds of starts queue behind each
other. A FIFO the batch did not make (no alloc dir given, or removed since) is made and opened
in a worker thread as before.

Running out of file descriptors (EMFILE, ENFILE) is a passing condition of the machine, not
of the task: opening a stream and starting its pump is retried with backoff (`fdretry`), and
then reported as recoverable, so the restart policy tries again instead of failing the
allocation for good. Log write failures (a full disk) are dropped by the pump and reported
here as one task event.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, final

import trio

from yurt.hooks.base import (
    PrestartResponse,
    TaskHookContext,
    TaskPrestartHook,
    TaskShutdownHook,
    TaskStopHook,
)
from yurt.hooks.fdretry import retry_fd_exhaustion
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.logs.pump import LogPump, fifo_path, log_base, open_fifo
from yurt.runtime.client.taskrunner import events
from yurt.runtime.structs import Task

MIB = 1024 * 1024
STREAMS = ("stdout", "stderr")


def log_fifos(logs: Path, task: Task) -> list[Path]:
    """The FIFOs this hook pumps for `task`, one per stream (none with its logs disabled), so
    that whoever makes them ahead (the alloc dir hook's batch) makes exactly these.

    Raises:
        ValueError: the task's name cannot be a log file's (`fifo_path`).
    """
    if task.log_config.disabled:
        return []
    return [fifo_path(logs, task.name, stream) for stream in STREAMS]

@final
class LogmonHook(TaskPrestartHook, TaskStopHook, TaskShutdownHook):
    name: ClassVar[str] = "logmon"

    def __init__(self, alloc_dir: AllocDir | None = None) -> None:
        self._alloc_dir = alloc_dir
        self._keepers: list[int] = []
        self._pumps: dict[str, LogPump] = {}

    def _close_keepers(self) -> None:
        for fd in self._keepers:
            os.close(fd)
        self._keepers.clear()

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        if (ctx.task_dir is None or ctx.task.log_config.disabled or ctx.nursery is None
                or len(self._pumps) == len(STREAMS)):
            await trio.lowlevel.checkpoint()
            return PrestartResponse()
        logs = AllocDir.containing(ctx.task_dir).logs
        config = ctx.task.log_config
        nursery = ctx.nursery

        async def report_drop(message: str) -> None:
            await ctx.emit_event(events.new_event(events.DRIVER_MESSAGE, ctx.unix_clock(),
                                                  driver_message=message))

        for stream in STREAMS:
            if stream in self._pumps:
                continue  # started by an earlier, partly failed prestart
            path = fifo_path(logs, ctx.task.name, stream)
            base = log_base(logs, ctx.task.name, stream)

            async def start_pump(path: Path = path, base: Path = base) -> LogPump:
                if self._alloc_dir is not None and self._alloc_dir.fifo_made(path):
                    read_fd, keep_fd = open_fifo(path)  # no await until the pump owns it
                else:
                    read_fd, keep_fd = await trio.to_thread.run_sync(open_fifo, path)
                pump = LogPump(read_fd, base, file_size=config.max_file_size * MIB,
                               max_files=config.max_files, on_drop=report_drop)
                try:
                    await nursery.start(pump.run)  # owns read_fd from here, even on failure
                except BaseException:
                    os.close(keep_fd)  # not started: nothing will use the keeper
                    raise
                self._keepers.append(keep_fd)
                return pump

            self._pumps[stream] = await retry_fd_exhaustion(start_pump,
                                                            f"opening {path.name}")
        return PrestartResponse()

    async def stop(self, ctx: TaskHookContext) -> None:
        self._close_keepers()
        await trio.lowlevel.checkpoint()

    async def shutdown(self, ctx: TaskHookContext) -> None:
        self._close_keepers()
        await trio.lowlevel.checkpoint()

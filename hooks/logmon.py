"""`logmon`: the task's stdout and stderr, from FIFOs into rotated log files.

One pump per stream for the task runner's whole life, as Nomad runs one logmon per task: the
first prestart opens both FIFOs in `alloc/logs/` (read end, plus a keeper write end, see
`runtime.logs.pump`) and starts the pumps in the runner's background nursery. Every start of
the task then writes into the same pipes, read by the same pumps, so two invocations never
race for one FIFO and rotation state is never forked. The stop hook (the runner is done) and
the shutdown hook (the agent stops) close the keepers: the pumps drain what is left and end
when the last writer is gone. With `logs { disabled = true }`, or without an alloc dir (mock
tasks), the hook does nothing and the driver sends output to /dev/null.
"""

from __future__ import annotations

import os
from typing import ClassVar, final

import trio

from yurt.hooks.base import (
    PrestartResponse,
    TaskHookContext,
    TaskPrestartHook,
    TaskShutdownHook,
    TaskStopHook,
)
from yurt.runtime.allocdir import AllocDir
from yurt.runtime.logs.pump import LogPump, fifo_path, log_base, open_fifo

MIB = 1024 * 1024
STREAMS = ("stdout", "stderr")


@final
class LogmonHook(TaskPrestartHook, TaskStopHook, TaskShutdownHook):
    name: ClassVar[str] = "logmon"

    def __init__(self) -> None:
        self._keepers: list[int] = []
        self._started = False

    def _close_keepers(self) -> None:
        for fd in self._keepers:
            os.close(fd)
        self._keepers.clear()

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        if (self._started or ctx.task_dir is None or ctx.task.log_config.disabled
                or ctx.nursery is None):
            await trio.lowlevel.checkpoint()
            return PrestartResponse()
        logs = AllocDir.containing(ctx.task_dir).logs
        config = ctx.task.log_config
        for stream in STREAMS:
            read_fd, keep_fd = await trio.to_thread.run_sync(
                open_fifo, fifo_path(logs, ctx.task.name, stream))
            self._keepers.append(keep_fd)
            pump = LogPump(read_fd, log_base(logs, ctx.task.name, stream),
                           file_size=config.max_file_size * MIB, max_files=config.max_files)
            await ctx.nursery.start(pump.run)
        self._started = True
        return PrestartResponse()

    async def stop(self, ctx: TaskHookContext) -> None:
        self._close_keepers()
        await trio.lowlevel.checkpoint()

    async def shutdown(self, ctx: TaskHookContext) -> None:
        self._close_keepers()
        await trio.lowlevel.checkpoint()

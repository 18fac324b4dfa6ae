"""`logmon`: the task's stdout and stderr, from FIFOs into rotated log files.

Prestart opens both FIFOs in `alloc/logs/` for reading before the task starts (see
`runtime.logs.pump` for why the order matters); poststart, once the shim holds them, starts
one `LogPump` per stream in the task runner's background nursery, and the pumps end by
themselves when the shim exits. If a start fails, the next prestart closes what the last one
opened. With `logs { disabled = true }`, or without an alloc dir (mock tasks), the hook does
nothing and the driver sends output to /dev/null.
"""

from __future__ import annotations

import os
from typing import ClassVar, final

import trio

from hooks.base import (
    PrestartResponse,
    TaskHookContext,
    TaskPoststartHook,
    TaskPrestartHook,
    TaskStopHook,
)
from runtime.logs.pump import LogPump, fifo_path, log_base, open_fifo

MIB = 1024 * 1024
STREAMS = ("stdout", "stderr")


@final
class LogmonHook(TaskPrestartHook, TaskPoststartHook, TaskStopHook):
    name: ClassVar[str] = "logmon"

    def __init__(self) -> None:
        self._open: dict[str, tuple[int, int]] = {}  # stream → (read fd, keeper fd)

    def _enabled(self, ctx: TaskHookContext) -> bool:
        return ctx.task_dir is not None and not ctx.task.log_config.disabled

    def _close(self) -> None:
        for read_fd, keep_fd in self._open.values():
            os.close(read_fd)
            os.close(keep_fd)
        self._open.clear()

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        self._close()
        if self._enabled(ctx):
            assert ctx.task_dir is not None
            logs = ctx.task_dir.parent / "alloc" / "logs"
            for stream in STREAMS:
                self._open[stream] = await trio.to_thread.run_sync(
                    open_fifo, fifo_path(logs, ctx.task.name, stream))
        else:
            await trio.lowlevel.checkpoint()
        return PrestartResponse()

    async def poststart(self, ctx: TaskHookContext) -> None:
        if not self._open or ctx.nursery is None:
            await trio.lowlevel.checkpoint()
            return
        assert ctx.task_dir is not None
        logs = ctx.task_dir.parent / "alloc" / "logs"
        config = ctx.task.log_config
        opened, self._open = self._open, {}
        for stream, (read_fd, keep_fd) in opened.items():
            os.close(keep_fd)  # the shim holds the FIFO now: end of file means it is gone
            pump = LogPump(read_fd, log_base(logs, ctx.task.name, stream),
                           file_size=config.max_file_size * MIB, max_files=config.max_files)
            await ctx.nursery.start(pump.run)

    async def stop(self, ctx: TaskHookContext) -> None:
        self._close()
        await trio.lowlevel.checkpoint()

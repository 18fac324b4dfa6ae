"""`dispatch_payload`: write a dispatched job's payload to the task's `local/<file>` (Nomad's
`dispatch_hook`).

Runs once, before the task's first start (the hook answers `done`, which the task runner
persists, so restarts and an agent restart do not write it again), and only for a task with a
`dispatch_payload { file }` block; the file is written even when the payload is empty, as
Nomad does. Without a task directory (the mock-driver runtime) there is nothing to write.

Invariant: the file lands inside the allocation directory. The jobspec already refuses a
`file` that climbs out of it; here the resolved parent directory is checked again and the
file is opened without following a symlink, because a `local/` moved in from a previous
allocation (sticky/migrating disks) may hold links a task left there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, final

import trio

from yurt.hooks.base import PrestartResponse, TaskHookContext, TaskPrestartHook


class DispatchPayloadError(Exception):
    """The payload cannot be written where the task asks for it."""


def write_payload(task_dir: Path, file: str, payload: bytes) -> Path:
    """Write `payload` to `<task_dir>/local/<file>` (a leading `/` is relative to `local/`,
    as Go's `filepath.Join` reads it) and return the path written."""
    alloc_dir = task_dir.parent.resolve()
    target = task_dir / "local" / file.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    parent = target.parent.resolve()
    if parent != alloc_dir and alloc_dir not in parent.parents:
        raise DispatchPayloadError(f"dispatch payload file {file!r} escapes the allocation "
                                   "directory")
    fd = os.open(parent / target.name,
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o777)
    with os.fdopen(fd, "wb") as f:
        f.write(payload)
    return parent / target.name


@final
class DispatchPayloadHook(TaskPrestartHook):
    name: ClassVar[str] = "dispatch_payload"

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        config = ctx.task.dispatch_payload
        if config is None or not config.file or ctx.task_dir is None:
            await trio.lowlevel.checkpoint()
            return PrestartResponse(done=True)
        payload = (ctx.alloc.job.payload if ctx.alloc.job is not None else None) or b""
        task_dir = ctx.task_dir
        try:
            await trio.to_thread.run_sync(write_payload, task_dir, config.file, payload)
        except OSError as e:
            raise DispatchPayloadError(f"failed to write dispatch payload: {e}") from e
        return PrestartResponse(done=True)

"""`dispatch_payload`: write a dispatched job's payload to the task's `local/<file>` (Nomad's
`dispatch_hook`).

Runs once, before the task's first start (the hook answers `done`, which the task runner
persists, so restarts and an agent restart do not write it again), and only for a task with a
`dispatch_payload { file }` block; the file is written even when the payload is empty, as
Nomad does. Without a task directory (the mock-driver runtime) there is nothing to write.

Invariant: the file and every directory made for it land inside the allocation directory. The
jobspec already refuses a `file` that climbs out of it; here the path is walked again with the
allocation directory's confined walk (a link is resolved inside it or refused) and nothing is
created by a path the kernel resolves, because a `local/` moved in from a previous allocation
(sticky/migrating disks) may hold links a task left there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, final

import trio

from yurt.hooks.base import PrestartResponse, TaskHookContext, TaskPrestartHook
from yurt.runtime.client.allocfs import FsError, clean_parts, open_making_dirs
from yurt.runtime.client.confined_write import replace_file_at


class DispatchPayloadError(Exception):
    """The payload cannot be written where the task asks for it."""


def write_payload(task_dir: Path, file: str, payload: bytes) -> Path:
    """Write `payload` to `<task_dir>/local/<file>` (a leading `/` is relative to `local/`,
    as Go's `filepath.Join` reads it) and return the path written.

    Nothing is ever created through a link: each directory is reached by the allocation
    directory's confined walk (runtime/client/allocfs.py), a missing one is made relative to the
    descriptor of its parent, and the file is opened relative to its directory's descriptor
    without following a link."""
    root = task_dir.parent.resolve()
    try:
        *dirs, name = clean_parts(f"{task_dir.name}/local/{file}")
        where = open_making_dirs(root, dirs, 0o777)
        try:
            # A new file renamed into place: whatever a task left at `name` (a FIFO that would
            # block the open, a hard link to another file) is replaced, never opened.
            replace_file_at(where.fd, name, payload, 0o777 & ~_process_umask())
        finally:
            os.close(where.fd)
    except (FsError, ValueError) as e:
        raise DispatchPayloadError(f"dispatch payload file {file!r} cannot be written inside "
                                   f"the allocation directory: {e}") from None
    return root.joinpath(*where.resolved, name)


def _process_umask() -> int:
    """The agent's umask, read without `os.umask`'s set-and-restore (racy across threads):
    Nomad writes the payload with mode 0777, which the umask trims."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        return 0o022


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

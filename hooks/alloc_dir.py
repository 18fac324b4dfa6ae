"""`alloc_dir`: build the allocation directory before any task runs; remove it on destroy.

With `tasks` (and the log FIFOs in `fifos`), the whole tree of the allocation is built here in
one worker-thread hop, so the task hooks that need those directories (`task_dir`, `logmon`)
find them ready and make no hop of their own (see `client/allocdir.py`). The users of all the
group's tasks decide who `alloc/data`, `alloc/tmp` and `alloc/logs` belong to, so they are
given here, all at once; a group made for the allocation (its task users sharing no primary
group) is removed on destroy, with the directory.

Building opens directories; out of file descriptors it is retried (`fdretry`) rather than
failing the allocation for good.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar, final

import trio

from yurt.hooks.base import AllocDestroyHook, AllocPrerunHook
from yurt.hooks.fdretry import retry_fd_exhaustion
from yurt.runtime.client.allocdir import AllocDir, ResolveOwner


@final
class AllocDirHook(AllocPrerunHook, AllocDestroyHook):
    name: ClassVar[str] = "alloc_dir"

    def __init__(self, alloc_dir: AllocDir, *, tasks: Mapping[str, str] | None = None,
                 resolve_owner: ResolveOwner | None = None, fifos: Sequence[Path] = (),
                 limiter: trio.CapacityLimiter | None = None) -> None:
        """`tasks`: `{task: user}` whose dirs to build too ("" for the agent's user)."""
        self.alloc_dir = alloc_dir
        self._tasks = dict(tasks or {})
        self._resolve_owner = resolve_owner
        self._fifos = list(fifos)
        self._limiter = limiter

    async def prerun(self) -> None:
        async def build() -> None:
            await self.alloc_dir.build_all(self._tasks, resolve_owner=self._resolve_owner,
                                           fifos=self._fifos, limiter=self._limiter)

        await retry_fd_exhaustion(build, "building the allocation directory")

    async def destroy(self) -> None:
        await self.alloc_dir.destroy()

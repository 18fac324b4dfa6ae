"""`alloc_dir`: build the allocation directory before any task runs; remove it on destroy.

Building opens directories; out of file descriptors it is retried (`fdretry`) rather than
failing the allocation for good.
"""

from __future__ import annotations

from typing import ClassVar, final

from yurt.hooks.base import AllocDestroyHook, AllocPrerunHook
from yurt.hooks.fdretry import retry_fd_exhaustion
from yurt.runtime.allocdir import AllocDir


@final
class AllocDirHook(AllocPrerunHook, AllocDestroyHook):
    name: ClassVar[str] = "alloc_dir"

    def __init__(self, alloc_dir: AllocDir) -> None:
        self.alloc_dir = alloc_dir

    async def prerun(self) -> None:
        await retry_fd_exhaustion(self.alloc_dir.build, "building the allocation directory")

    async def destroy(self) -> None:
        await self.alloc_dir.destroy()

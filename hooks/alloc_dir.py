"""`alloc_dir`: build the allocation directory before any task runs; remove it on destroy."""

from __future__ import annotations

from typing import ClassVar, final

from yurt.hooks.base import AllocDestroyHook, AllocPrerunHook
from yurt.runtime.allocdir import AllocDir


@final
class AllocDirHook(AllocPrerunHook, AllocDestroyHook):
    name: ClassVar[str] = "alloc_dir"

    def __init__(self, alloc_dir: AllocDir) -> None:
        self.alloc_dir = alloc_dir

    async def prerun(self) -> None:
        await self.alloc_dir.build()

    async def destroy(self) -> None:
        await self.alloc_dir.destroy()

"""`await_previous_allocations` and `migrate_disk`: a new allocation waits for the ones it
replaces or preempts to be dead, then takes over the previous one's disk when it is sticky.

Both are prerun hooks of the alloc runner, after `alloc_dir` (Nomad's order). The waiting is
the `GroupWatcher`'s; these hooks only place it in the hook order.
"""

from __future__ import annotations

from typing import ClassVar, final

from yurt.hooks.base import AllocPrerunHook
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.allocwatcher import GroupWatcher


@final
class AwaitPreviousHook(AllocPrerunHook):
    name: ClassVar[str] = "await_previous_allocations"

    def __init__(self, watcher: GroupWatcher) -> None:
        self.watcher = watcher

    async def prerun(self) -> None:
        await self.watcher.wait()


@final
class MigrateDiskHook(AllocPrerunHook):
    name: ClassVar[str] = "migrate_disk"

    def __init__(self, watcher: GroupWatcher, alloc_dir: AllocDir, tasks: list[str]) -> None:
        self.watcher = watcher
        self.alloc_dir = alloc_dir
        self.tasks = tasks

    async def prerun(self) -> None:
        await self.watcher.wait()
        await self.watcher.migrate(self.alloc_dir, self.tasks)

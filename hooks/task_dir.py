"""`task_dir`: build the task's directory once, and say so with a `Task Setup` event.

The event is emitted on the first build only: the hook answers `done`, which the task runner
persists, so later starts (restarts, an agent restart) skip the hook and re-apply its env.
Without an alloc dir (the mock-driver runtime in tests) there is nothing to build, but the event
and the done-ness are the same, so event sequences do not depend on the driver.

A task with `user` gets its `local`, `secrets` and `tmp` owned by that user: `resolve_owner`
turns the name into (uid, gid) (given by whoever knows how users are resolved; without it,
without a user, or for a user it does not know, the directories belong to the agent's user).

Given the allocation's `AllocDir`, the hook skips the build that directory's batch
(`AllocDir.build_all`, run by the `alloc_dir` prerun hook) already made for this task and
user: no worker-thread hop per task when hundreds start at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, final

from yurt.hooks.base import PrestartResponse, TaskHookContext, TaskPrestartHook
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.taskenv import task_dir_env
from yurt.runtime.client.taskrunner import events


@final
class TaskDirHook(TaskPrestartHook):
    name: ClassVar[str] = "task_dir"

    def __init__(self,
                 resolve_owner: Callable[[str], tuple[int, int] | None] | None = None,
                 alloc_dir: AllocDir | None = None) -> None:
        self._resolve_owner = resolve_owner
        self._alloc_dir = alloc_dir

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        await ctx.emit_event(events.new_event(events.SETUP, ctx.unix_clock(),
                                              message="Building Task Directory"))
        if ctx.task_dir is None:
            return PrestartResponse(env={}, done=True)
        alloc_dir = self._alloc_dir or AllocDir.containing(ctx.task_dir)
        if not alloc_dir.task_built(ctx.task.name, ctx.task.user):  # the batch made it
            owner = None
            if ctx.task.user and self._resolve_owner is not None:
                owner = self._resolve_owner(ctx.task.user)
            await alloc_dir.build_task(ctx.task.name, owner)
        return PrestartResponse(env=task_dir_env(ctx.task_dir), done=True)

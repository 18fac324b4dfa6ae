"""A task's service hook (Nomad's taskrunner/service_hook.go, with the check watcher of
client/serviceregistration/watcher.go for its `check_restart`s).

- poststart (the task runs): its Nomad services registered, and every check of them with a
  `check_restart` limit watched from now on (a new grace period per start).
- prekill (before `shutdown_delay`, then the kill), exited, stop: deregistered and unwatched.
  Idempotent.

A watched check whose `Restarter` says so restarts the task through its restart policy,
counted as a failure, with a `Restart Signaled` event whose reason is Nomad's
`healthcheck: check "<name>" unhealthy`. The restart runs in the task runner's background
nursery (the result callback must not block the check runner); the check is watched again
when the task next starts.

The hook knows its alloc runner only as a `TaskServicesHost`: the hooks, among which it finds
the group's service hook (which runs the checks), and the task runners, one of which it
restarts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import trio

from yurt.hooks.base import (
    Hook,
    TaskExitedHook,
    TaskHookContext,
    TaskLifecycle,
    TaskPoststartHook,
    TaskPrekillHook,
    TaskStopHook,
)
from yurt.hooks.group_services import GroupServicesHook
from yurt.runtime.client.checks.registration import (
    ServiceDeps,
    check_id,
    interpolated,
    nomad_services,
    registrations,
)
from yurt.runtime.client.checks.restarts import Restarter, restart_reason
from yurt.runtime.client.taskrunner import events
from yurt.runtime.errors import TaskNotRunningError
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.structs import Task, TaskGroup
from yurt.runtime.structs.checks import CheckQueryResult


class TaskServicesHost(Protocol):
    """What the hook needs of its alloc runner: its hooks (the group's service hook among
    them, looked up when a check is watched) and its task runners."""

    @property
    def hooks(self) -> Sequence[Hook]: ...
    @property
    def task_runners(self) -> Mapping[str, TaskLifecycle]: ...


def task_service_hooks(runner: TaskServicesHost, task: Task, deps: ServiceDeps | None
                       ) -> list[Hook]:
    """The hook, for a task with Nomad services."""
    if deps is None or not nomad_services(task.services):
        return []
    return [TaskServicesHook(runner, task.name, deps)]


class TaskServicesHook(TaskPoststartHook, TaskPrekillHook, TaskExitedHook, TaskStopHook):
    name = "task_services"

    def __init__(self, runner: TaskServicesHost, task: str, deps: ServiceDeps,
                 clock: Callable[[], float] = trio.current_time) -> None:
        self._runner = runner
        self._task = task
        self._deps = deps
        self._clock = clock
        self._registered: list[str] = []
        self._watched: list[str] = []

    def _group_hook(self) -> GroupServicesHook | None:
        return next((h for h in self._runner.hooks if isinstance(h, GroupServicesHook)), None)

    async def poststart(self, ctx: TaskHookContext) -> None:
        alloc = ctx.alloc
        group = alloc.job.lookup_group(alloc.task_group) if alloc.job else None
        if group is None:
            return
        regs = registrations(alloc, group, ctx.task.services, self._task, self._deps.node)
        if regs:
            await self._deps.catalogue.upsert(regs)
        self._registered = [r.id for r in regs]
        self._watch(ctx, group)

    def _watch(self, ctx: TaskHookContext, group: TaskGroup) -> None:
        group_hook = self._group_hook()
        if group_hook is None or ctx.nursery is None:
            return
        nursery = ctx.nursery
        now = self._clock()
        for service in interpolated(ctx.alloc, group, ctx.task.services, self._task,
                                    self._deps.node):
            for check in service.checks:
                restart = check.check_restart
                if restart is None or not check.triggers_restarts():
                    continue
                restarter = Restarter(check_name=check.name, limit=restart.limit,
                                      grace=(restart.grace or 0) / SECOND,
                                      interval=check.interval / SECOND,
                                      ignore_warnings=restart.ignore_warnings)
                restarter.started(now)
                watched = check_id(ctx.alloc.id, group.name, check)
                group_hook.watch(watched, self._watcher(restarter, ctx, nursery))
                self._watched.append(watched)

    def _watcher(self, restarter: Restarter, ctx: TaskHookContext, nursery: trio.Nursery
                 ) -> Callable[[CheckQueryResult], None]:
        def observe(result: CheckQueryResult) -> None:
            if restarter.apply(result.status, self._clock()):
                self._unwatch()  # watched again from the next start
                nursery.start_soon(self._restart, ctx, restarter.check_name)
        return observe

    async def _restart(self, ctx: TaskHookContext, check_name: str) -> None:
        tr = self._runner.task_runners.get(self._task)
        if tr is None:
            return
        event = events.new_event(events.RESTART_SIGNALED, ctx.unix_clock(),
                                 restart_reason=restart_reason(check_name))
        with contextlib.suppress(TaskNotRunningError):  # it stopped meanwhile: nothing to do
            await tr.restart(event, failure=True)

    def _unwatch(self) -> None:
        group_hook = self._group_hook()
        if group_hook is not None:
            for watched in self._watched:
                group_hook.watch(watched, None)
        self._watched = []

    async def _deregister(self) -> None:
        self._unwatch()
        if self._registered:
            ids, self._registered = self._registered, []
            await self._deps.catalogue.deregister(ids)
        else:
            await trio.lowlevel.checkpoint()

    async def prekill(self, ctx: TaskHookContext) -> None:
        await self._deregister()

    async def exited(self, ctx: TaskHookContext) -> None:
        await self._deregister()

    async def stop(self, ctx: TaskHookContext) -> None:
        await self._deregister()

"""The allocation's service hook (Nomad's group_service_hook.go and checks_hook.go together):
registers the group's Nomad services in the catalogue, and runs every check of the group's
and its tasks' Nomad services.

- prerun: the group services registered; each check gets a `pending` result in the runner's
  `CheckResults` at once and is handed to the agent's one `CheckRunner`.
- update (a non-terminal new version of the allocation): registrations and checks follow it
  (re-registering what did not change writes nothing; checks whose ID changed are replaced).
- prekill (before the kill order starts), postrun and destroy: the group services
  deregistered and the checks stopped, their results purged. Idempotent, so whichever comes
  first does it. Agent shutdown stops the checks but keeps the registrations, as Nomad's
  client does: the tasks keep running, and a restarted agent re-registers them.

Task-level checks run from prerun like group ones (a probe of a task not started yet simply
fails); `check_restart` is armed by the task's own hook (task_services.py) while it runs,
through `watch`.

Invariant: every result of a check passes through `_result`, which writes `CheckResults` and
then tells the task watcher registered for it, if any.

The hook knows its alloc runner only as a `GroupServicesHost`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from yurt.hooks.base import (
    AllocDestroyHook,
    AllocPostrunHook,
    AllocPrekillHook,
    AllocPrerunHook,
    AllocShutdownHook,
    AllocUpdateHook,
    Hook,
)
from yurt.runtime.client.allocrunner.checkresults import CheckResults
from yurt.runtime.client.checks.registration import (
    ServiceDeps,
    check_job,
    check_template,
    every_service,
    group_and_task_services,
    nomad_services,
    registrations,
)
from yurt.runtime.client.checks.scripts import ScriptHost, script_runner
from yurt.runtime.structs import Allocation, TaskGroup
from yurt.runtime.structs.checks import CheckQueryResult
from yurt.runtime.structs.service import CHECK_SCRIPT

log = logging.getLogger("yurt.services")


class GroupServicesHost(ScriptHost, Protocol):
    """What the hook needs of its alloc runner: the group and the server's copy of the
    allocation, the check results it writes, and the task runners script checks exec in."""

    @property
    def alloc(self) -> Allocation: ...
    @property
    def group(self) -> TaskGroup: ...
    @property
    def check_results(self) -> CheckResults: ...


def group_service_hooks(runner: GroupServicesHost, deps: ServiceDeps | None) -> list[Hook]:
    """The hook, for an allocation with Nomad services anywhere in its group."""
    if deps is None or not nomad_services(group_and_task_services(runner.group)):
        return []
    return [GroupServicesHook(runner, deps)]


class GroupServicesHook(AllocPrerunHook, AllocUpdateHook, AllocPrekillHook,
                        AllocPostrunHook, AllocDestroyHook, AllocShutdownHook):
    name = "group_services"

    def __init__(self, runner: GroupServicesHost, deps: ServiceDeps) -> None:
        self._runner = runner
        self._deps = deps
        self._registered: list[str] = []
        self._checks: set[str] = set()
        self._watchers: dict[str, Callable[[CheckQueryResult], None]] = {}
        self._stopped = False

    def watch(self, check_id: str, watcher: Callable[[CheckQueryResult], None] | None) -> None:
        """Send `check_id`'s results to `watcher` too (None: no longer)."""
        if watcher is None:
            self._watchers.pop(check_id, None)
        else:
            self._watchers[check_id] = watcher

    async def prerun(self) -> None:
        await self._apply(self._runner.alloc)

    async def update(self, alloc: Allocation) -> None:
        if not self._stopped:
            await self._apply(alloc)

    async def prekill(self) -> None:
        await self._stop(deregister=True)

    async def postrun(self) -> None:
        await self._stop(deregister=True)

    async def destroy(self) -> None:
        await self._stop(deregister=True)

    async def shutdown(self) -> None:
        await self._stop(deregister=False)

    async def _apply(self, alloc: Allocation) -> None:
        group = alloc.job.lookup_group(alloc.task_group) if alloc.job else None
        if group is None:
            return
        regs = registrations(alloc, group, group.services, None, self._deps.node)
        ids = [r.id for r in regs]
        stale = [i for i in self._registered if i not in ids]
        if stale:
            await self._deps.catalogue.deregister(stale)
        if regs:
            await self._deps.catalogue.upsert(regs)
        self._registered = ids
        self._observe(alloc, group)

    def _observe(self, alloc: Allocation, group: TaskGroup) -> None:
        results = self._runner.check_results
        wanted = set()
        for service in every_service(alloc, group, self._deps.node):
            for check in service.checks:
                template = check_template(alloc, group, service, check)
                wanted.add(template.id)
                if template.id in self._checks:
                    continue
                script = (script_runner(self._runner, check)
                          if check.type == CHECK_SCRIPT else None)
                self._deps.checks.add(check_job(alloc, group, service, check,
                                                self._deps.node, self._result, script))
                results.set(template)
        for check_id in self._checks - wanted:
            self._deps.checks.remove(check_id)
            results.remove(check_id)
        self._checks = wanted

    def _result(self, result: CheckQueryResult) -> None:
        if result.id not in self._checks:
            return
        self._runner.check_results.set(result)
        watcher = self._watchers.get(result.id)
        if watcher is not None:
            watcher(result)

    async def _stop(self, *, deregister: bool) -> None:
        self._stopped = True
        for check_id in self._checks:
            self._deps.checks.remove(check_id)
            self._runner.check_results.remove(check_id)
        self._checks = set()
        self._watchers.clear()
        if deregister and self._registered:
            ids, self._registered = self._registered, []
            await self._deps.catalogue.deregister(ids)

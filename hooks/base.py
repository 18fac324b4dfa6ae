"""Hook phases for alloc runners and task runners, and the resources they share.

Each phase is an abstract class with one async method; a hook subclasses the phases it takes
part in, and the runners select hooks per phase with `isinstance`. That keeps the phase list
(Nomad's `interfaces/runner_lifecycle.go` and `task_lifecycle.go`) in one file and every hook's
participation visible in its class line.

Alloc runner phases: prerun (before tasks; first error aborts and fails the tasks), postrun
(after tasks exit; all run, errors collected), update (non-terminal updates only), destroy
(after run; all run), shutdown (agent shutdown only), prekill (before the kill order starts).

Task runner phases: prestart (before every start; a hook whose prestart said `done` is skipped
on later starts and on restore, but its persisted env is re-applied), poststart, exited, stop,
update, prekill, shutdown.

`AllocHookResources` is how alloc hooks hand things to task hooks: getters and setters behind a
lock that copy on the way in and out, so no two hooks ever share a mutable object.
"""

from __future__ import annotations

import copy
import threading
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

import trio

from yurt.runtime.client.drivers.protocol import Driver, TaskConfig
from yurt.runtime.structs import (
    Allocation,
    AllocNetworkStatus,
    Task,
    TaskDeviceNode,
    TaskEvent,
    TaskHandle,
    TaskMount,
)


class Hook:
    """Anything a runner runs at its phases; `name` appears in error messages."""

    name: ClassVar[str] = "hook"


# --------------------------------------------------------------------------- alloc runner


class AllocPrerunHook(Hook, ABC):
    @abstractmethod
    async def prerun(self) -> None: ...


class AllocPostrunHook(Hook, ABC):
    @abstractmethod
    async def postrun(self) -> None: ...


class AllocUpdateHook(Hook, ABC):
    @abstractmethod
    async def update(self, alloc: Allocation) -> None: ...


class AllocDestroyHook(Hook, ABC):
    @abstractmethod
    async def destroy(self) -> None: ...


class AllocShutdownHook(Hook, ABC):
    @abstractmethod
    async def shutdown(self) -> None: ...


class AllocPrekillHook(Hook, ABC):
    @abstractmethod
    async def prekill(self) -> None: ...


class AllocHookResources:
    """Values alloc hooks produce for task hooks. Copies in, copies out, under a lock (hooks
    may run blocking work in worker threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._network_status: AllocNetworkStatus | None = None
        self._values: dict[str, object] = {}

    def get_network_status(self) -> AllocNetworkStatus | None:
        with self._lock:
            return copy.deepcopy(self._network_status)

    def set_network_status(self, status: AllocNetworkStatus | None) -> None:
        with self._lock:
            self._network_status = copy.deepcopy(status)

    def get(self, key: str) -> object:
        with self._lock:
            return copy.deepcopy(self._values.get(key))

    def set(self, key: str, value: object) -> None:
        with self._lock:
            self._values[key] = copy.deepcopy(value)


# --------------------------------------------------------------------------- task runner


class TaskLifecycle(Protocol):
    """What a hook may do to its own task (Nomad's `ti.TaskLifecycle`): the task runner."""

    @property
    def env(self) -> dict[str, str]: ...
    driver: Driver

    @property
    def handle(self) -> TaskHandle | None: ...
    async def restart(self, event: TaskEvent, *, failure: bool = False) -> None: ...
    async def signal(self, event: TaskEvent, signal: str) -> None: ...
    async def kill(self, event: TaskEvent | None = None) -> str: ...
    def set_hook_env(self, hook: str, env: dict[str, str] | None) -> None: ...
    def exec_config(self, task_id: str) -> TaskConfig: ...


@dataclass
class TaskHookContext:
    """What a task hook may see and do. `emit_event` appends, persists and notifies."""

    alloc: Allocation
    task: Task
    task_dir: Path | None
    emit_event: Callable[[TaskEvent], Awaitable[None]]
    unix_clock: Callable[[], int]
    resources: AllocHookResources = field(default_factory=AllocHookResources)
    #: The task runner's background nursery: work that lives as long as the runner (log pumps).
    nursery: trio.Nursery | None = None
    #: The task's runner, for hooks that restart, signal or kill their task (templates).
    lifecycle: TaskLifecycle | None = None


@dataclass
class PrestartResponse:
    env: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)
    mounts: list[TaskMount] = field(default_factory=list)
    devices: list[TaskDeviceNode] = field(default_factory=list)
    done: bool = False


class TaskPrestartHook(Hook, ABC):
    @abstractmethod
    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]
                       ) -> PrestartResponse: ...


class TaskPoststartHook(Hook, ABC):
    @abstractmethod
    async def poststart(self, ctx: TaskHookContext) -> None: ...


class TaskExitedHook(Hook, ABC):
    @abstractmethod
    async def exited(self, ctx: TaskHookContext) -> None: ...


class TaskStopHook(Hook, ABC):
    @abstractmethod
    async def stop(self, ctx: TaskHookContext) -> None: ...


class TaskUpdateHook(Hook, ABC):
    @abstractmethod
    async def update(self, ctx: TaskHookContext, alloc: Allocation) -> None: ...


class TaskPrekillHook(Hook, ABC):
    @abstractmethod
    async def prekill(self, ctx: TaskHookContext) -> None: ...


class TaskShutdownHook(Hook, ABC):
    @abstractmethod
    async def shutdown(self, ctx: TaskHookContext) -> None: ...

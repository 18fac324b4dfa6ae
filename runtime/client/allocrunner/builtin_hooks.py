"""The built-in hooks of an allocation's runners, in the order they run (Nomad's
`client/allocrunner/alloc_runner_hooks.go` `initRunnerHooks` and
`client/allocrunner/taskrunner/task_runner_hooks.go` `initHooks`).

`alloc_runner_hooks` builds the alloc runner's list and `task_runner_hooks` each task runner's;
`AllocRunner.__init__` (runner.py) calls them and keeps the lists. The runners run every phase
in list order, so the order here is the order of execution:

- alloc runner: alloc_dir (with an alloc dir), await_previous_allocations, migrate_disk (with an
  alloc dir), alloc_health_watcher, the client's own alloc hooks (`AllocRunnerConfig.
  alloc_hooks`), group_services (with Nomad services in the group), group_shutdown_delay (with
  a group `shutdown_delay` when the allocation starts);
- task runner: task_dir, dispatch_payload (with a payload), identity (with an exposed identity
  and a signer), artifacts (with artifacts), logmon, devices (with a device manager),
  template (with templates), task_services (with Nomad services in the task), the client's own
  task hooks (`AllocRunnerConfig.task_hooks`).

Invariants (tests/test_layers.py): this is the one client module that imports `yurt.hooks.*`;
the runners know hooks only by their phases (`hooks/base.py`). The hooks know the alloc runner
only by the protocols they declare (`HealthHost`, `GroupServicesHost`, `TaskServicesHost`, and
`GroupWatcher`'s `WatchedRunner`), never as `AllocRunner`, and this module knows it as
`HookHost`, the sum of them, and its config as `HookConfig`: nothing here imports runner.py, so
the runner, its hooks and this module form no import cycle.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import trio

from yurt.hooks.alloc_dir import AllocDirHook
from yurt.hooks.alloc_health import AllocHealthHook, HealthHost
from yurt.hooks.artifact import ArtifactHook
from yurt.hooks.await_previous import AwaitPreviousHook, MigrateDiskHook
from yurt.hooks.base import Hook
from yurt.hooks.devices import DevicesHook
from yurt.hooks.dispatch_payload import DispatchPayloadHook
from yurt.hooks.group_services import GroupServicesHost, group_service_hooks
from yurt.hooks.group_shutdown_delay import GroupShutdownDelayHook
from yurt.hooks.identity import IdentityHook, Signer, wants_token
from yurt.hooks.logmon import LogmonHook, log_fifos
from yurt.hooks.task_dir import TaskDirHook
from yurt.hooks.task_services import TaskServicesHost, task_service_hooks
from yurt.hooks.template import TemplateHook
from yurt.hooks.volumes import VolumesHook
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.allocwatcher import GroupWatcher
from yurt.runtime.client.checks.registration import ServiceDeps
from yurt.runtime.client.devices.manager import DeviceManager
from yurt.runtime.client.drivers.users import owner_of
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.templating.data import TemplateData
from yurt.runtime.structs import Allocation, Node, Task, TaskGroup

if TYPE_CHECKING:
    from yurt.runtime.client.taskrunner.runner import TaskRunner


class HookHost(HealthHost, GroupServicesHost, TaskServicesHost, Protocol):
    """The alloc runner as its built-in hooks see it: what each of them declares it needs,
    together, and what this module reads to build them."""

    @property
    def alloc_dir(self) -> AllocDir | None: ...
    @property
    def watcher(self) -> GroupWatcher: ...
    @property
    def task_runners(self) -> Mapping[str, TaskRunner]: ...
    @property
    def shutdown_delay_skipped(self) -> trio.Event: ...


class HookConfig(Protocol):
    """What the built-in hooks take of the client's `AllocRunnerConfig` (runner.py)."""

    @property
    def alloc_hooks(self) -> Sequence[Hook]: ...
    @property
    def task_hooks(self) -> Callable[[], Sequence[Hook]]: ...
    @property
    def unix_clock(self) -> Callable[[], int]: ...
    @property
    def rng(self) -> random.Random | None: ...
    @property
    def node(self) -> Node | None: ...
    @property
    def device_manager(self) -> DeviceManager | None: ...
    @property
    def sign_identity(self) -> Signer | None: ...
    @property
    def dir_limiter(self) -> trio.CapacityLimiter: ...
    @property
    def expected_checks(self) -> Callable[[Allocation], int]: ...
    @property
    def template_data(self) -> TemplateData | None: ...
    @property
    def artifact(self) -> ArtifactConfig: ...
    @property
    def services(self) -> ServiceDeps | None: ...


def alloc_runner_hooks(runner: HookHost, config: HookConfig, *, nursery: trio.Nursery,
                       publish: Callable[[], None]) -> list[Hook]:
    """Nomad's `initRunnerHooks`: the alloc runner's hooks, in order.

    Args:
        runner: the alloc runner they serve.
        config: the client's config of every alloc runner.
        nursery: the nursery lent to the runner (the health watcher runs in it).
        publish: asks the runner to publish its client view again (a health verdict).
    """
    group, alloc_dir = runner.group, runner.alloc_dir
    return [
        *([_alloc_dir_hook(alloc_dir, group, config.dir_limiter)]
          if alloc_dir is not None else []),
        AwaitPreviousHook(runner.watcher),
        *([MigrateDiskHook(runner.watcher, alloc_dir, [t.name for t in group.tasks])]
          if alloc_dir is not None else []),
        AllocHealthHook(runner, nursery=nursery, publish=publish,
                        unix_clock=config.unix_clock, expected_checks=config.expected_checks),
        *config.alloc_hooks,
        *group_service_hooks(runner, config.services),
        # Only with a delay: any alloc prekill hook stops the first kill wave going at once
        # (teardown.py `signal_first_wave`).
        *([GroupShutdownDelayHook(lambda: runner.alloc, runner.shutdown_delay_skipped)]
          if group.shutdown_delay else []),
    ]


def task_runner_hooks(runner: HookHost, task: Task, config: HookConfig) -> list[Hook]:
    """Nomad's `initHooks`: the hooks of `task`'s runner, in order."""
    return [TaskDirHook(resolve_owner=owner_of, alloc_dir=runner.alloc_dir),
            *([DispatchPayloadHook()] if task.dispatch_payload else []),
            *([IdentityHook(config.sign_identity, owner_of)]
              if config.sign_identity and wants_token(task) else []),
            *([ArtifactHook(config.artifact, node=config.node, resolve_owner=owner_of)]
              if task.artifacts else []),
            LogmonHook(alloc_dir=runner.alloc_dir),
            *([VolumesHook(config.node)] if task.volume_mounts else []),
            *([DevicesHook(config.device_manager)] if config.device_manager else []),
            *([TemplateHook(config.template_data, rng=config.rng)]
              if task.templates else []),
            *task_service_hooks(runner, task, config.services),
            *config.task_hooks()]


def _alloc_dir_hook(alloc_dir: AllocDir, group: TaskGroup, limiter: trio.CapacityLimiter
                    ) -> AllocDirHook:
    """The alloc dir hook, building every task's dirs and log FIFOs in its one hop."""
    fifos = []
    for task in group.tasks:
        with contextlib.suppress(ValueError):  # a name no log file can have: its
            fifos += log_fifos(alloc_dir.logs, task)  # task's logmon says so
    return AllocDirHook(alloc_dir, tasks={t.name: t.user for t in group.tasks},
                        resolve_owner=owner_of, fifos=fifos, limiter=limiter)

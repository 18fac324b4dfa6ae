"""The `StateDB` contract: what Nomad's client state interface holds, as async methods.

Semantics every implementation keeps (the conformance suite in tests/ checks both stores):
- A `put_*` returns once the value is durable (for SQLite: committed). Stored values are
  copies: mutating a struct after `put` or after `get` changes nothing stored.
- An empty store returns an empty list and an empty error map from `get_all_allocations`.
- Missing values read as `None`; `put_task_state` works without a prior `put_allocation`.
- Deleting what does not exist is a no-op; `delete_allocation_bucket` removes the allocation,
  its per-allocation values and every task's state.
- `get_all_allocations` decodes each allocation on its own: one corrupt row is reported in the
  error map by allocation ID and does not hide the others.
- `get_all_state` is what a restart needs, read in one transaction (one consistent snapshot,
  one thread hop for SQLite): every allocation, its acknowledged state, and every task's local
  state (driver handle included) and task state. It decodes row by row as
  `get_all_allocations` does; a task row that cannot be decoded is reported on that task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from yurt.runtime.structs import (
    AcknowledgedState,
    Allocation,
    AllocDeploymentStatus,
    AllocNetworkStatus,
    LocalState,
    NodeRegistration,
    PluginState,
    TaskState,
)


@dataclass(frozen=True)
class SavedTask:
    """One task runner's persisted state, as `get_task_runner_state` returns it."""

    local: LocalState | None = None
    state: TaskState | None = None
    #: Why a row of this task could not be decoded (the task cannot be restored), or None.
    error: str | None = None


@dataclass(frozen=True)
class StateSnapshot:
    """Everything a restart reads, from one transaction."""

    allocations: list[Allocation] = field(default_factory=list)
    #: Allocation ID → why its allocation row could not be decoded.
    errors: dict[str, str] = field(default_factory=dict)
    acknowledged: dict[str, AcknowledgedState] = field(default_factory=dict)
    #: Allocation ID → task name → what that task runner saved.
    tasks: dict[str, dict[str, SavedTask]] = field(default_factory=dict)


class StateDB(Protocol):
    """Persistent client state, keyed like Nomad's buckets."""

    @property
    def name(self) -> str: ...

    async def get_all_allocations(self) -> tuple[list[Allocation], dict[str, str]]: ...
    async def get_all_state(self) -> StateSnapshot: ...
    async def put_allocation(self, alloc: Allocation) -> None: ...

    async def get_deployment_status(self, alloc_id: str) -> AllocDeploymentStatus | None: ...
    async def put_deployment_status(self, alloc_id: str, status: AllocDeploymentStatus) -> None:
        ...

    async def get_network_status(self, alloc_id: str) -> AllocNetworkStatus | None: ...
    async def put_network_status(self, alloc_id: str, status: AllocNetworkStatus) -> None: ...

    async def get_acknowledged_state(self, alloc_id: str) -> AcknowledgedState | None: ...
    async def put_acknowledged_state(self, alloc_id: str, state: AcknowledgedState) -> None: ...

    async def get_task_runner_state(
        self, alloc_id: str, task: str
    ) -> tuple[LocalState | None, TaskState | None]: ...
    async def put_task_runner_local_state(self, alloc_id: str, task: str,
                                          state: LocalState) -> None: ...
    async def put_task_state(self, alloc_id: str, task: str, state: TaskState) -> None: ...
    async def delete_task_bucket(self, alloc_id: str, task: str) -> None: ...
    async def delete_allocation_bucket(self, alloc_id: str) -> None: ...

    async def get_driver_plugin_state(self) -> PluginState | None: ...
    async def put_driver_plugin_state(self, state: PluginState) -> None: ...
    async def get_device_plugin_state(self) -> PluginState | None: ...
    async def put_device_plugin_state(self, state: PluginState) -> None: ...

    async def get_node_meta(self) -> dict[str, str] | None: ...
    async def put_node_meta(self, meta: dict[str, str]) -> None: ...
    async def get_node_registration(self) -> NodeRegistration | None: ...
    async def put_node_registration(self, reg: NodeRegistration) -> None: ...

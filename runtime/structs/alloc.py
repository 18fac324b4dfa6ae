"""Allocations and what runs in them: Allocation, TaskState, TaskEvent, the resources an
allocation holds, its deployment and network status, and `DesiredTransition`.

`merge_client_health` says how the server takes the health a client reports (the client's
side of health is runtime/client/allocrunner/health.py).
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec import field

from yurt.runtime.structs.base import (
    ALLOC_CLIENT_COMPLETE,
    ALLOC_CLIENT_FAILED,
    ALLOC_CLIENT_LOST,
    ALLOC_CLIENT_PENDING,
    ALLOC_DESIRED_EVICT,
    ALLOC_DESIRED_RUN,
    ALLOC_DESIRED_STOP,
    TASK_STATE_PENDING,
    ZERO_TIME,
    Base,
)
from yurt.runtime.structs.job import Job, RescheduleTracker
from yurt.runtime.structs.network import AllocatedSharedResources

# --------------------------------------------------------------------------- runtime structs


class TaskEvent(Base):
    """One task event; `Details` carries the structured fields, the flat ones are Nomad's
    deprecated copies, kept because Nomad API clients still read them."""

    type: str = ""
    time: int = 0
    message: str = ""
    display_message: str = ""
    details: dict[str, str] = field(default_factory=dict)
    fails_task: bool = False
    restart_reason: str = ""
    setup_error: str = ""
    driver_error: str = ""
    exit_code: int = 0
    signal: int = 0
    kill_reason: str = ""
    kill_timeout: int = 0
    kill_error: str = ""
    start_delay: int = 0
    download_error: str = ""
    validation_error: str = ""
    disk_limit: int = 0
    failed_sibling: str = ""
    vault_error: str = ""
    task_signal_reason: str = ""
    task_signal: str = ""
    driver_message: str = ""
    generic_source: str = ""


class TaskState(Base):
    state: str = TASK_STATE_PENDING
    failed: bool = False
    restarts: int = 0
    last_restart: datetime = ZERO_TIME
    started_at: datetime = ZERO_TIME
    finished_at: datetime = ZERO_TIME
    events: list[TaskEvent] = field(default_factory=list)


class AllocatedDevice(Base):
    vendor: str = ""
    type: str = ""
    name: str = ""
    device_ids: list[str] = field(default_factory=list, name="DeviceIDs")


class AllocatedTaskResources(Base):
    cpu_shares: int = 0
    memory_mb: int = field(default=0, name="MemoryMB")
    memory_max_mb: int = field(default=0, name="MemoryMaxMB")
    devices: list[AllocatedDevice] = field(default_factory=list)
    #: The node's CPU cores the task holds alone (`resources { cores }`).
    reserved_cores: list[int] = field(default_factory=list)


class AllocDeploymentStatus(Base):
    healthy: bool | None = None
    timestamp: datetime = ZERO_TIME
    canary: bool = False
    modify_index: int = 0


def merge_client_health(server: AllocDeploymentStatus | None,
                        client: AllocDeploymentStatus | None,
                        index: int) -> AllocDeploymentStatus | None:
    """The server's deployment status of an allocation once the client's (`client`) is merged
    into its own (`server`), as Nomad's `nestedUpdateAllocFromClient` does: a client sets only
    Healthy and Timestamp, and new health takes the index of the change as `ModifyIndex` (the
    deployment watcher compares it with its last evaluation). Health a client does not
    report leaves the server's as it is, so a health set by hand is kept."""
    if server is not None and client is not None:
        if client.healthy is not None and client.healthy != server.healthy:
            return msgspec.structs.replace(server, healthy=client.healthy,
                                           timestamp=client.timestamp, modify_index=index)
        return server
    if client is not None:
        return msgspec.structs.replace(client, modify_index=index)
    return server


class AllocNetworkStatus(Base):
    interface_name: str = ""
    address: str = ""


class Allocation(Base):
    id: str = field(default="", name="ID")
    namespace: str = "default"
    eval_id: str = field(default="", name="EvalID")
    name: str = ""
    node_id: str = field(default="", name="NodeID")
    node_name: str = ""
    job_id: str = field(default="", name="JobID")
    job: Job | None = None
    task_group: str = ""
    task_resources: dict[str, AllocatedTaskResources] = field(default_factory=dict)
    desired_status: str = ALLOC_DESIRED_RUN
    desired_description: str = ""
    client_status: str = ALLOC_CLIENT_PENDING
    client_description: str = ""
    task_states: dict[str, TaskState] = field(default_factory=dict)
    deployment_id: str = field(default="", name="DeploymentID")
    deployment_status: AllocDeploymentStatus | None = None
    network_status: AllocNetworkStatus | None = None
    previous_allocation: str = ""
    next_allocation: str = ""
    preempted_allocations: list[str] = field(default_factory=list)
    preempted_by_allocation: str = ""
    create_index: int = 0
    modify_index: int = 0
    alloc_modify_index: int = 0
    create_time: int = 0
    modify_time: int = 0
    reschedule_tracker: RescheduleTracker | None = None
    followup_eval_id: str = field(default="", name="FollowupEvalID")
    desired_transition: DesiredTransition = field(default_factory=lambda: DesiredTransition())
    # The group's assigned networks and ports; the API shows them in AllocatedResources.Shared.
    allocated_shared: AllocatedSharedResources | None = None

    def is_terminal(self) -> bool:
        """Server- or client-terminal, as Nomad's `Allocation.TerminalStatus`."""
        return self.is_desired_stopped() or is_client_terminal(self.client_status)

    def is_desired_stopped(self) -> bool:
        return self.desired_status in (ALLOC_DESIRED_STOP, ALLOC_DESIRED_EVICT)


def is_client_terminal(status: str) -> bool:
    """The client is done with the allocation (Nomad's `ClientTerminalStatus`)."""
    return status in (ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST)



# --------------------------------------------------------------------------- alloc stop and drain


class DesiredTransition(Base):
    """Nomad's `DesiredTransition`: what the server wants done with a running allocation.
    `Migrate` (an `alloc stop`, a drain): the scheduler stops it and places a replacement."""

    migrate: bool | None = None
    reschedule: bool | None = None
    force_reschedule: bool | None = None
    no_shutdown_delay: bool | None = None

    def should_ignore_shutdown_delay(self) -> bool:
        """Whether the client skips the group's and the tasks' `shutdown_delay` when it
        stops this allocation (`alloc stop -no-shutdown-delay`, `job stop
        -no-shutdown-delay`): Nomad's nomad/structs/alloc.go `ShouldIgnoreShutdownDelay`.
        The one test the client makes (hooks/group_shutdown_delay.py, the task runner's
        runtime/client/taskrunner/stopping.py `handle_kill`)."""
        return bool(self.no_shutdown_delay)

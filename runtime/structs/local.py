"""Client-local state, never sent to a server: task handles, hook state, what sync
acknowledged, plugin state, the node's registration.
"""

from __future__ import annotations

from typing import Any

from msgspec import field

from yurt.runtime.structs.alloc import AllocDeploymentStatus, AllocNetworkStatus, TaskState
from yurt.runtime.structs.base import Base

# --------------------------------------------------------------------------- client-local state


class TaskMount(Base):
    """A host path a hook asks the driver to mount into the task (Nomad's `MountConfig`)."""

    task_path: str
    host_path: str
    readonly: bool = False
    #: Nomad's `volume_mount.propagation_mode`: "private" ("" too), "host-to-task" or
    #: "bidirectional" (structs/volumes.go `VolumeMountPropagation*`).
    propagation_mode: str = ""


class TaskDeviceNode(Base):
    """A host device node a hook asks the driver to expose to the task (`DeviceConfig`)."""

    task_path: str
    host_path: str
    permissions: str = "rwm"


class HookState(Base):
    """What one task hook persisted: whether its prestart finished, its data, its env, and
    the mounts and device nodes it asked for (re-applied on restore like the env)."""

    prestart_done: bool = False
    data: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[TaskMount] = field(default_factory=list)
    devices: list[TaskDeviceNode] = field(default_factory=list)


class TaskHandle(Base):
    """Enough for a driver to find a task again after an agent restart."""

    version: int = 1
    driver: str = ""
    task_id: str = field(default="", name="TaskID")
    state: str = ""
    driver_state: dict[str, Any] = field(default_factory=dict)


class LocalState(Base):
    """The task runner's private persisted state (Nomad's `state.LocalState`)."""

    hooks: dict[str, HookState] = field(default_factory=dict)
    driver_network: dict[str, Any] | None = None
    task_handle: TaskHandle | None = None
    run_complete: bool = False
    #: A user restart was asked and the task not started again yet: a restarted agent
    #: resumes it (stops the task if need be, starts it again at once, uncounted).
    restart_requested: bool = False


class AcknowledgedState(Base):
    """The last client view of an allocation that the server acknowledged."""

    client_status: str = ""
    client_description: str = ""
    task_states: dict[str, TaskState] = field(default_factory=dict)
    deployment_status: AllocDeploymentStatus | None = None
    network_status: AllocNetworkStatus | None = None
    modify_time: int = 0


class PluginState(Base):
    """Driver- or device-manager state: opaque per-plugin blobs that let them re-attach."""

    internal_state: dict[str, dict[str, Any]] = field(default_factory=dict)


class NodeRegistration(Base):
    has_registered: bool = False

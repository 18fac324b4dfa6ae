"""Group and task blocks Nomad's jobspec has beyond the core: host volumes and their mounts,
scaling policies, task actions, and the Enterprise or plugin blocks yurt stores but cannot
place (Nomad's api/tasks.go `VolumeRequest`, `VolumeMount`, `ScalingPolicy`, `Action`).

Invariants: field and JSON names are Nomad's (`Volumes` is a map keyed by the volume's name,
`VolumeMounts` and `Actions` are lists); these are plain data, checked by the jobspec
(runtime/jobspec/rules_volume.py) and read at placement (runtime/server/scheduler/feasible.py
`unplaceable_reason`).
"""

from __future__ import annotations

from typing import Any, Final

from msgspec import field

from yurt.runtime.structs.base import Base

VOLUME_TYPE_HOST: Final = "host"
VOLUME_TYPE_CSI: Final = "csi"
#: nomad/structs/host_volumes.go: the access modes a host volume may be requested with.
HOST_VOLUME_ACCESS_MODES: Final = ("", "single-node-reader-only", "single-node-writer",
                                   "single-node-single-writer", "single-node-multi-writer")
#: nomad/structs/volumes.go `MountPropagationModeIsValid`, `SELinuxLabelIsValid`.
PROPAGATION_MODES: Final = ("", "private", "host-to-task", "bidirectional")
SELINUX_LABELS: Final = ("", "z", "Z")


class VolumeRequest(Base):
    """A group's `volume "name" { … }`."""

    name: str = ""
    type: str = ""
    source: str = ""
    read_only: bool = False
    sticky: bool = False
    access_mode: str = ""
    attachment_mode: str = ""
    mount_options: dict[str, Any] | None = None
    per_alloc: bool = False


class VolumeMount(Base):
    """A task's `volume_mount { … }`."""

    volume: str = ""
    destination: str = ""
    read_only: bool = False
    propagation_mode: str = ""
    selinux_label: str = field(default="", name="SELinuxLabel")


class ScalingPolicy(Base):
    """A group's `scaling { … }` (type "horizontal") or a task's `scaling "cpu" { … }`
    (Nomad Enterprise's vertical types). `id`, `namespace` and `target` are the server's."""

    min: int | None = None
    max: int | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    enabled: bool | None = None
    type: str = ""
    id: str = field(default="", name="ID")
    namespace: str = ""
    target: dict[str, str] = field(default_factory=dict)
    create_index: int = 0
    modify_index: int = 0


class TaskAction(Base):
    """A task's `action "name" { command, args }` (Nomad 1.7)."""

    name: str = ""
    command: str = ""
    args: list[str] = field(default_factory=list)

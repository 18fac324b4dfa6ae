"""Static host volumes resolved against a node: which of the node's `HostVolumes` a group's
volume request names (the scheduler's feasibility check, runtime/server/scheduler/feasible.py
`host_volume_reason`), and the mounts a task gets from them (what the drivers consume).

Invariants: one rule names the node volume for both, so placement and mounting never
disagree: a request's `source`, with the allocation's index appended when `per_alloc`
(nomad/structs/funcs.go `AllocSuffix`); a mount is read-only when the node's volume, the
group's request or the task's mount says so (client/allocrunner/taskrunner/volume_hook.go
`hostVolumeMountConfigurations`). Pure: no file is looked at.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from yurt.runtime.structs.node import ClientHostVolumeConfig
from yurt.runtime.structs.volume import VOLUME_TYPE_HOST, VolumeMount, VolumeRequest


class MountConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Nomad's drivers.MountConfig (plugins/drivers/driver.go): one bind mount of a task,
    the host's `host_path` at the task's `task_path`."""

    task_path: str
    host_path: str
    readonly: bool
    propagation_mode: str = ""
    selinux_label: str = ""


class HostVolumeError(ValueError):
    """A mount names a host volume the node does not have (Nomad's volume hook fails the
    task with "host volume validation error: …")."""


def alloc_suffix(alloc_name: str) -> str:
    """nomad/structs/funcs.go `AllocSuffix`: "[2]" of "job.group[2]", "" without an index."""
    at = alloc_name.rfind("[")
    return "" if at < 0 else alloc_name[at:]


def host_volume_source(vol: VolumeRequest, alloc_name: str) -> str:
    """The node host volume a request names: its `source`, with the allocation's index
    appended when `per_alloc` ("data" is "data[0]" for "job.group[0]"; scheduler/feasible/
    feasible.go `HostVolumeChecker.SetVolumes`)."""
    return vol.source + alloc_suffix(alloc_name) if vol.per_alloc else vol.source


def host_volume_mounts(volumes: Mapping[str, VolumeRequest], mounts: Iterable[VolumeMount],
                       host_volumes: Mapping[str, ClientHostVolumeConfig],
                       alloc_name: str) -> list[MountConfig]:
    """The bind mounts of a task: its `volume_mount`s (`mounts`) over the group's host
    volume requests (`volumes`, by name) on a node offering `host_volumes`, for the
    allocation named `alloc_name`. A mount of a volume that is not a host volume (CSI) is
    skipped, as Nomad's volume hook leaves it to its own hook.

    Raises:
        HostVolumeError: a requested host volume is not on the node (it was when placed;
            the agent restarted with another config), in Nomad's words.
    """
    resolved: list[MountConfig] = []
    for mount in mounts:
        req = volumes.get(mount.volume)
        if req is None or req.type != VOLUME_TYPE_HOST:
            continue
        source = host_volume_source(req, alloc_name)
        offered = host_volumes.get(source)
        if offered is None:
            raise HostVolumeError(f"host volume validation error: missing {source}")
        resolved.append(MountConfig(
            task_path=mount.destination, host_path=offered.path,
            readonly=offered.read_only or req.read_only or mount.read_only,
            propagation_mode=mount.propagation_mode, selinux_label=mount.selinux_label))
    return resolved

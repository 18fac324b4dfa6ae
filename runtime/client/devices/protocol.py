"""The device plugin contract (Nomad's `plugins/device`), and the data it speaks.

A plugin *fingerprints*: an async stream of snapshots, each the full list of device groups it
sees (a group is vendor/type/name plus instances with an ID and a health). It *reserves*
instances for a task, answering with what the task needs to use them (env, mounts, device
nodes). It reports *stats* per instance. Everything a plugin returns is validated by the
manager before anyone else sees it; a plugin is never trusted to be well-formed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import msgspec


class DeviceInstance(msgspec.Struct, kw_only=True, rename="pascal"):
    id: str = msgspec.field(default="", name="ID")
    healthy: bool = True
    health_description: str = ""
    attributes: dict[str, str] = msgspec.field(default_factory=dict)


class DeviceGroup(msgspec.Struct, kw_only=True, rename="pascal"):
    vendor: str = ""
    type: str = ""
    name: str = ""
    instances: list[DeviceInstance] = msgspec.field(default_factory=list)
    attributes: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def id(self) -> str:
        return group_id(self.vendor, self.type, self.name)


def group_id(vendor: str, type_: str, name: str) -> str:
    """A device group's full name, `vendor/type/name`, as requests and reservations use it."""
    return f"{vendor}/{type_}/{name}"


class Mount(msgspec.Struct, kw_only=True, rename="pascal"):
    task_path: str
    host_path: str
    read_only: bool = False


class DeviceNode(msgspec.Struct, kw_only=True, rename="pascal"):
    task_path: str
    host_path: str
    cgroup_permissions: str = "rwm"


class Reservation(msgspec.Struct, kw_only=True, rename="pascal"):
    envs: dict[str, str] = msgspec.field(default_factory=dict)
    mounts: list[Mount] = msgspec.field(default_factory=list)
    devices: list[DeviceNode] = msgspec.field(default_factory=list)


class InstanceStats(msgspec.Struct, kw_only=True, rename="pascal"):
    summary: dict[str, float] = msgspec.field(default_factory=dict)
    timestamp: int = 0


class DevicePlugin(Protocol):
    @property
    def name(self) -> str: ...

    def fingerprint(self) -> AsyncIterator[list[DeviceGroup]]:
        """Snapshots of every device group; a new one whenever something changes."""

    async def reserve(self, ids: list[str]) -> Reservation: ...

    async def stats(self) -> dict[str, InstanceStats]:
        """The latest stats of every instance, by instance ID."""


class DevicePluginError(Exception):
    """A plugin failed, or answered something invalid."""


def validate(groups: list[DeviceGroup]) -> None:
    """Nomad's fingerprint validation: named groups, every instance with an ID."""
    for group in groups:
        for field in ("vendor", "type", "name"):
            if not getattr(group, field):
                raise DevicePluginError(f"device group {group.id!r} has no {field}")
        for instance in group.instances:
            if not instance.id:
                raise DevicePluginError(f"a device of group {group.id!r} has no ID")

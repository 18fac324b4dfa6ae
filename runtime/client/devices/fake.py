"""`FakeDevicePlugin`: devices declared in configuration, with stats, for tests and demos.

Reserving instances gives the task `FAKE_VISIBLE_DEVICES=<ids>` (comma-separated, in the order
asked), the way the NVIDIA plugin gives `NVIDIA_VISIBLE_DEVICES`, and one device node per
instance, `/dev/fake/<id>` (which exists nowhere: it shows what an isolating driver receives).
Health can be changed at run time (`set_health`), which produces a new fingerprint, as a real
plugin would on a failure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import final

import msgspec
import trio

from yurt.runtime.client.devices.protocol import (
    DeviceGroup,
    DeviceNode,
    DevicePluginError,
    InstanceStats,
    Reservation,
)

ENV = "FAKE_VISIBLE_DEVICES"
NODE_DIR = "/dev/fake"


@final
class FakeDevicePlugin:
    def __init__(self, groups: list[DeviceGroup], *, name: str = "fake") -> None:
        self._name = name
        self._groups = [msgspec.structs.replace(g) for g in groups]
        self._changed = trio.Event()
        self.reserved: list[list[str]] = []

    @property
    def name(self) -> str:
        return self._name

    def set_health(self, instance_id: str, healthy: bool, description: str = "") -> None:
        for group in self._groups:
            for instance in group.instances:
                if instance.id == instance_id:
                    instance.healthy = healthy
                    instance.health_description = description
        self._changed.set()

    async def fingerprint(self) -> AsyncIterator[list[DeviceGroup]]:
        while True:
            changed = self._changed
            yield [msgspec.json.decode(msgspec.json.encode(g), type=DeviceGroup)
                   for g in self._groups]
            await changed.wait()
            self._changed = trio.Event()

    async def reserve(self, ids: list[str]) -> Reservation:
        await trio.lowlevel.checkpoint()
        known = {i.id for g in self._groups for i in g.instances}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise DevicePluginError(f"unknown device IDs: {', '.join(unknown)}")
        self.reserved.append(list(ids))
        return Reservation(envs={ENV: ",".join(ids)},
                           devices=[DeviceNode(task_path=f"{NODE_DIR}/{i}",
                                               host_path=f"{NODE_DIR}/{i}") for i in ids])

    async def stats(self) -> dict[str, InstanceStats]:
        await trio.lowlevel.checkpoint()
        now = int(trio.current_time() * 1e9)
        return {i.id: InstanceStats(summary={"utilization_percent": float(n * 10 % 100),
                                             "memory_used_mib": float(256 * (n + 1))},
                                    timestamp=now)
                for g in self._groups for n, i in enumerate(g.instances)}

"""`devices`: reserve the task's assigned device instances before it starts.

The server assigned instance IDs to the allocation (`TaskResources[task].Devices`); this hook
asks the device manager to reserve them and hands the task the env the plugins answer
(merged, a later reservation winning a conflict) and the mounts and device nodes, which the
task runner passes to the driver (raw_exec, without isolation, ignores them as Nomad's does).
A reservation that fails fails the start with `failed to reserve device <ids>: …`.
Nothing to reserve: done.
"""

from __future__ import annotations

from typing import ClassVar, final

import trio

from yurt.hooks.base import PrestartResponse, TaskHookContext, TaskPrestartHook
from yurt.runtime.client.devices.manager import DeviceManager
from yurt.runtime.client.devices.protocol import group_id
from yurt.runtime.errors import HookError
from yurt.runtime.structs import TaskDeviceNode, TaskMount


@final
class DevicesHook(TaskPrestartHook):
    name: ClassVar[str] = "devices"

    def __init__(self, manager: DeviceManager) -> None:
        self.manager = manager

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        allocated = ctx.alloc.task_resources.get(ctx.task.name)
        env: dict[str, str] = {}
        mounts: list[TaskMount] = []
        nodes: list[TaskDeviceNode] = []
        if allocated is None or not allocated.devices:
            await trio.lowlevel.checkpoint()
            return PrestartResponse(done=True)
        for device in allocated.devices:
            group = group_id(device.vendor, device.type, device.name)
            try:
                reservation = await self.manager.reserve(group, device.device_ids)
            except Exception as e:
                raise HookError(f"failed to reserve device {', '.join(device.device_ids)}: "
                                f"{e}") from e
            env.update(reservation.envs)
            mounts.extend(TaskMount(task_path=m.task_path, host_path=m.host_path,
                                    readonly=m.read_only) for m in reservation.mounts)
            nodes.extend(TaskDeviceNode(task_path=d.task_path, host_path=d.host_path,
                                        permissions=d.cgroup_permissions)
                         for d in reservation.devices)
        return PrestartResponse(env=env, mounts=mounts, devices=nodes, done=True)

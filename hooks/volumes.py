"""`volumes`: the task's host volume mounts, handed to the driver at start.

Nomad's volume hook (client/allocrunner/taskrunner/volume_hook.go `Prestart` and
`prepareHostVolumes`): the task's `volume_mount`s are resolved against its group's `volume`
blocks and the node's `HostVolumes` (runtime/structs/hostvolumes.py `host_volume_mounts`,
the rule placement used), and the mounts go to the driver in `TaskConfig.mounts`.

Invariants: validated at every start, never taken from a saved state (a node restarted
without the volume fails the start: "host volume validation error: missing <name>"); mounts
asked of a driver without mount support (raw_exec, mock_driver: Nomad's
`MountConfigSupportNone`) fail the start with `task driver "<driver>" for "<task>" does not
support host volumes`, as Nomad's. Either failure is the runner's `Task hook failed` event,
not recoverable. CSI volumes are left to their own hook.
"""

from __future__ import annotations

from typing import ClassVar, final

import msgspec
import trio

from yurt.hooks.base import PrestartResponse, TaskHookContext, TaskPrestartHook
from yurt.runtime.client.drivers.protocol import supports_mounts
from yurt.runtime.client.taskenv import interpolate, node_values
from yurt.runtime.errors import HookError
from yurt.runtime.structs import Node, TaskMount
from yurt.runtime.structs.hostvolumes import HostVolumeError, host_volume_mounts


@final
class VolumesHook(TaskPrestartHook):
    name: ClassVar[str] = "volumes"

    def __init__(self, node: Node | None) -> None:
        self.node = node

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        await trio.lowlevel.checkpoint()
        job = ctx.alloc.job
        group = job.lookup_group(ctx.alloc.task_group) if job is not None else None
        offered = self.node.host_volumes if self.node is not None else {}
        # volume_hook.go `interpolateVolumeMounts`: the volume, destination and propagation
        # mode may name the task's env and the node (`${NOMAD_ALLOC_INDEX}`).
        lookup = {**node_values(self.node),
                  **(ctx.lifecycle.env if ctx.lifecycle is not None else {})}
        wanted = [msgspec.structs.replace(
            m, volume=interpolate(m.volume, lookup), destination=interpolate(m.destination, lookup),
            propagation_mode=interpolate(m.propagation_mode, lookup))
            for m in ctx.task.volume_mounts]
        try:
            mounts = host_volume_mounts(group.volumes if group is not None else {},
                                        wanted, offered, ctx.alloc.name)
        except HostVolumeError as e:
            raise HookError(str(e)) from e
        # volume_hook.go `prepareHostVolumes`: the capability check only when there are mounts.
        if mounts and ctx.lifecycle is not None and not supports_mounts(ctx.lifecycle.driver):
            raise HookError(f'task driver "{ctx.task.driver}" for "{ctx.task.name}" does not '
                            "support host volumes")
        # Not `done`: validated again at every start (`prestart` of a restored task too).
        return PrestartResponse(mounts=[
            TaskMount(task_path=m.task_path, host_path=m.host_path, readonly=m.readonly,
                      propagation_mode=m.propagation_mode)
            for m in mounts])

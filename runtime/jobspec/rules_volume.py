"""Stage 4 rules for the group and task blocks beyond the core: host volumes and their mounts,
`scaling`, `disconnect`, `shutdown_delay`, `max_run_duration`, task `action`s and the
`resources` fields Nomad deprecated or reserves for Enterprise; then their canonical form.

The checks are Nomad's, message for message: nomad/structs/volumes.go `VolumeRequest.Validate`
and `VolumeMount.Validate`, structs.go `Task.Validate` (mounts of undefined volumes),
`TaskGroup.Validate` (`MaxRunDuration`, `ShutdownDelay`, the scaling policy against the count),
`ScalingPolicy.Validate`, group.go `DisconnectStrategy.Validate`, `Resources.Validate` (cores,
disk), and the Community Edition's registration hooks (job_endpoint_hook_sched_ce.go,
job_endpoint_hook_numa_ce.go), which refuse a task `schedule` or a `numa` block outright.

Invariants: `check_job_extras` never changes the job. After `fold_extras` every volume's
`name` is its key, every group scaling policy has Nomad's defaults (type "horizontal",
enabled, min = count), and no task has `resources.networks`: their ports are on the group's
network, as the deprecated task network's ports were reachable in Nomad. The deprecated
`stop_after_client_disconnect` and `prevent_reschedule_on_lost` are kept as given and mean
nothing, as in Nomad 1.10 (structs.go `TaskGroup.Warnings`: "deprecated and ignored");
registering them draws Nomad's warning (`job_warnings`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.structs import Job, Resources, Task, TaskGroup
from yurt.runtime.structs.job import DisconnectStrategy
from yurt.runtime.structs.volume import (
    HOST_VOLUME_ACCESS_MODES,
    PROPAGATION_MODES,
    SELINUX_LABELS,
    VOLUME_TYPE_CSI,
    VOLUME_TYPE_HOST,
    ScalingPolicy,
    VolumeRequest,
)

#: nomad/structs/group.go: the reconcile options of a `disconnect` block.
RECONCILE_OPTIONS: Final = ("", "best_score", "longest_running", "keep_original",
                            "keep_replacement")
SCALING_HORIZONTAL: Final = "horizontal"
#: Nomad Enterprise's task-level (vertical) scaling types (structs.go `validateType`), by the
#: label a task's `scaling "cpu" { … }` block carries (jobspec2 `decodeTask`).
_VERTICAL: Final = {"cpu": "vertical_cpu", "mem": "vertical_mem", "vertical_cpu": "vertical_cpu",
                    "vertical_mem": "vertical_mem"}


def volume_problems(vol: VolumeRequest, job_type: str, count: int, canaries: int) -> list[str]:
    """nomad/structs/volumes.go `VolumeRequest.Validate`, one message each."""
    if vol.type not in (VOLUME_TYPE_HOST, VOLUME_TYPE_CSI):
        return [f"volume has unrecognized type {vol.type}"]
    out: list[str] = []
    if not vol.source:
        out.append("volume has an empty source")
    if vol.per_alloc:
        if job_type in ("system", "sysbatch"):
            out.append("volume cannot be per_alloc for system or sysbatch jobs")
        if canaries > 0:
            out.append("volume cannot be per_alloc when canaries are in use")
        if vol.sticky:
            out.append("volume cannot be per_alloc and sticky at the same time")
    if vol.type == VOLUME_TYPE_HOST:
        if vol.mount_options is not None:
            out.append("host volumes cannot have mount options")
        if vol.access_mode == "single-node-reader-only" and not vol.read_only:
            out.append(f"{vol.access_mode} volumes must be read-only")
        elif vol.access_mode not in HOST_VOLUME_ACCESS_MODES:
            out.append(f"host volumes cannot be mounted with {vol.access_mode} access mode")
        return out
    if not vol.attachment_mode:
        out.append("CSI volumes must have an attachment mode")
    elif vol.attachment_mode == "block-device" and vol.mount_options is not None:
        out.append("block devices cannot have mount options")
    mode, shared = vol.access_mode, count > 1 and not vol.per_alloc
    if not mode:
        out.append("CSI volumes must have an access mode")
    elif mode in ("single-node-reader-only", "multi-node-reader-only") and not vol.read_only:
        out.append(f"{mode} volumes must be read-only")
    if mode == "single-node-reader-only" and shared:
        out.append(f"volume with {mode} access mode allows only one reader")
    elif mode == "single-node-writer" and shared:
        out.append(f"volume with {mode} access mode allows only one reader or writer")
    elif mode == "multi-node-single-writer" and shared and not vol.read_only:
        out.append(f"volume with {mode} access mode allows only one writer")
    return out


def scaling_problems(policy: ScalingPolicy, count: int) -> list[str]:
    """structs.go `ScalingPolicy.Validate` and `TaskGroup.validateScalingPolicy`, on a
    policy `fold_extras` has not filled yet (min defaults to the count, max to -1)."""
    kind = policy.type or SCALING_HORIZONTAL
    low = count if policy.min is None else policy.min
    high = -1 if policy.max is None else policy.max
    out: list[str] = []
    if kind != SCALING_HORIZONTAL:
        out.append(f'scaling policy type "{kind}" is not valid for a task group')
    if high < 0:
        out.append("maximum count must be specified and non-negative")
    elif high < low:
        out.append("maximum count must not be less than minimum count")
    if low < 0:
        out.append("minimum count must be specified and non-negative")
    if not out and count > high:
        out.append("Scaling policy invalid: task group count must not be greater than maximum "
                   "count in scaling policy")
    if not out and count < low:
        out.append("Scaling policy invalid: task group count must not be less than minimum "
                   "count in scaling policy")
    return out


def disconnect_problems(ds: DisconnectStrategy, job_type: str) -> list[str]:
    """nomad/structs/group.go `DisconnectStrategy.Validate`."""
    out: list[str] = []
    if ds.stop_on_client_after is not None:
        if ds.stop_on_client_after < 0:
            out.append("stop_after cannot be a negative duration")
        if job_type not in ("service", "batch"):
            out.append("stop_after can only be used with service or batch job types")
    if ds.lost_after < 0:
        out.append("lost_after cannot be a negative duration")
    if ds.stop_on_client_after is not None and ds.lost_after != 0:
        out.append("Disconnect cannot be configured with both lost_after and stop_after")
    if ds.reconcile not in RECONCILE_OPTIONS:
        out.append(f"reconcile option is invalid: {ds.reconcile}")
    return out


def _check_group(job: Job, group: TaskGroup, at: _At, problems: _Problems) -> None:
    canaries = group.update.canary if group.update is not None else 0
    for name, vol in group.volumes.items():
        vol_at = _At((*at.d, "volume", name), (*at.k, "Volumes", name))
        for message in volume_problems(vol, job.type, group.count, canaries or 0):
            problems.add(vol_at, message)
    if group.scaling is not None:
        for message in scaling_problems(group.scaling, group.count):
            problems.add(at.field(TaskGroup, "scaling"), message)
    if group.disconnect is not None:
        for message in disconnect_problems(group.disconnect, job.type):
            problems.add(at.field(TaskGroup, "disconnect"), message)
    if group.shutdown_delay is not None and group.shutdown_delay < 0:
        problems.add(at.field(TaskGroup, "shutdown_delay"),
                     "ShutdownDelay must be a positive value")
    if group.max_run_duration is not None:
        where = at.field(TaskGroup, "max_run_duration")
        if group.max_run_duration <= 0:
            problems.add(where, "MaxRunDuration must be greater than zero")
        if job.type not in ("batch", "sysbatch"):
            problems.add(where, f'Job type "{job.type}" does not allow max_run_duration')


def _check_task(group: TaskGroup, task: Task, at: _At, problems: _Problems) -> None:
    for i, mount in enumerate(task.volume_mounts):
        mount_at = at.item(Task, "volume_mounts", i, str(i))
        if mount.volume not in group.volumes:
            problems.add(mount_at, f"Volume Mount ({i}) references undefined volume "
                                   f"{mount.volume}")
        if not mount.volume:
            problems.add(mount_at, f'Volume Mount ({i}) is invalid: "volume mount references '
                                   f'an empty volume"')
        if mount.propagation_mode not in PROPAGATION_MODES:
            problems.add(mount_at, f'Volume Mount ({i}) is invalid: "volume mount has an '
                                   f'invalid propagation mode: "{mount.propagation_mode}""')
        if mount.selinux_label not in SELINUX_LABELS:
            problems.add(mount_at, f'Volume Mount ({i}) is invalid: "volume mount has an '
                                   f'invalid SELinux label: "{mount.selinux_label}""')
    seen: set[str] = set()
    for i, action in enumerate(task.actions):
        action_at = at.item(Task, "actions", i, action.name or str(i))
        if not action.command:
            problems.add(action_at, "action needs a command")
        if action.name in seen:
            problems.add(action_at, f'action name "{action.name}" is used more than once')
        seen.add(action.name)
    for i, policy in enumerate(task.scaling_policies):
        if policy.type not in _VERTICAL:
            problems.add(at.item(Task, "scaling_policies", i, policy.type or str(i)),
                         'task scaling policy needs the label "cpu" or "mem"')
    res, res_at = task.resources, at.field(Task, "resources")
    if res.cores < 0:
        problems.add(res_at.field(Resources, "cores"),
                     f"cores value ({res.cores}) cannot be negative")
    elif res.cores > 0 and res.cpu not in (0, Resources().cpu):
        problems.add(res_at, "Task can only ask for 'cpu' or 'cores' resource, not both.")
    if res.disk > 0:
        problems.add(res_at.field(Resources, "disk"), "Task can't ask for disk resources, they "
                                                      "have to be specified at the task group "
                                                      "level.")
    if res.numa and res.numa.get("affinity", res.numa.get("Affinity", "none")) != "none":
        problems.add(res_at.field(Resources, "numa"), "numa scheduling requires Nomad Enterprise")
    if task.schedule is not None:
        problems.add(at.field(Task, "schedule"), "task schedules requires Nomad Enterprise")


def check_job_extras(job: Job, group_at: Callable[[int], _At], problems: _Problems) -> None:
    """Every group's and task's checks above."""
    for gi, group in enumerate(job.task_groups):
        g_at = group_at(gi)
        _check_group(job, group, g_at, problems)
        for ti, task in enumerate(group.tasks):
            _check_task(group, task, g_at.item(TaskGroup, "tasks", ti, task.name or str(ti)),
                        problems)


def fold_extras(job: Job) -> None:
    """The canonical form (see the module's invariants), in place."""
    for group in job.task_groups:
        for name, vol in group.volumes.items():
            vol.name = name
        if group.scaling is not None:
            policy = group.scaling
            policy.type = policy.type or SCALING_HORIZONTAL
            policy.enabled = True if policy.enabled is None else policy.enabled
            policy.min = group.count if policy.min is None else policy.min
        moved = [n for t in group.tasks for n in t.resources.networks]
        for task in group.tasks:
            task.resources.networks = []
            for policy in task.scaling_policies:
                policy.type = _VERTICAL.get(policy.type, policy.type)
            if task.resources.cores > 0 and task.resources.cpu == Resources().cpu:
                task.resources.cpu = 0  # api/resources.go `Canonicalize`: cores, no cpu
            if task.log_config.enabled is not None:  # Nomad's older spelling, inverted
                task.log_config.disabled = task.log_config.disabled or not task.log_config.enabled
                task.log_config.enabled = None
        if moved:
            if not group.networks:  # the first task network becomes the group's
                group.networks = [msgspec.structs.replace(moved[0], reserved_ports=[],
                                                          dynamic_ports=[])]
            target = group.networks[0]
            for network in moved:
                target.reserved_ports += network.reserved_ports
                target.dynamic_ports += network.dynamic_ports
                target.mbits = max(target.mbits, network.mbits)


#: structs.go `TaskGroup.Warnings`: Nomad 1.10's deprecated group fields, by JSON name.
_IGNORED: Final = {
    "StopAfterClientDisconnect": "StopAfterClientDisconnect is deprecated and ignored favor of "
                                 "Disconnect.StopOnClientAfter",
    "PreventRescheduleOnLost": "PreventRescheduleOnLost is deprecated and ignored in favor of "
                               "Disconnect.Replace",
}


def job_warnings(raw_job: object) -> list[str]:
    """The warnings for a Nomad JSON job (`{"ID", "TaskGroups": …}`, before parsing): its
    groups' deprecated fields, in Nomad's words (structs.go `Job.Warnings`), and tasks that
    use the deprecated `resources { network { … } }`, which `fold_extras` moves to their
    group's network. Anything not shaped as a job gives none: parsing reports it."""
    out: list[str] = []
    groups = raw_job.get("TaskGroups") if isinstance(raw_job, dict) else None
    for group in groups if isinstance(groups, list) else []:
        if not isinstance(group, dict):
            continue
        for key, message in _IGNORED.items():
            if group.get(key) not in (None, False):
                out.append(f'Group "{group.get("Name")}" has warnings: {message}')
        tasks = group.get("Tasks")
        for task in tasks if isinstance(tasks, list) else []:
            resources = task.get("Resources") if isinstance(task, dict) else None
            if isinstance(resources, dict) and resources.get("Networks"):
                out.append(f'group "{group.get("Name")}" task "{task.get("Name")}": '
                           "resources.network is deprecated; its ports were moved to the "
                           "group's network")
    return out

"""The `update` block: Nomad's rules for it and its canonical form per group (stage 4).

What lives here: `check_job_update` (Nomad's `UpdateStrategy.Validate` on every strategy a group
ends with, and "Job type … does not allow update block") and `fold_update`, which
`canonicalize` calls: the job's block is merged into each group's, as Nomad's API
canonicalization does (`api/tasks.go` TaskGroup.Canonicalize), so HCL and JSON give one Job.

Invariants: after `fold_update` a group holds the strategy the scheduler follows, or None (no
`update` anywhere: no deployment). The job keeps its own block as written (defaults filled),
so the job reads back as it was submitted.

A deliberate difference: Nomad's API canonicalization gives a service job without any
`update` block the default strategy, so every service job rolls out one allocation at a time,
each waiting to be healthy. yurt keeps such jobs as they always ran here (every change at
once, no deployment): only a job that asks for a rollout gets one.

Merging needs to know which fields a group's block sets. The structs carry Nomad's defaults
rather than "unset" (every reader sees plain values), so a group field still at its default
counts as unset and the job's value wins: a group that spells out a default over a job that
sets something else gets the job's value. Nomad, with pointers, would keep the group's.
A problem a group merely inherits from the job's block is reported once, on the job's block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.lib.durations import format_duration
from yurt.runtime.structs import Job, Task, TaskGroup
from yurt.runtime.structs.update import UPDATE_HEALTH_MODES, UpdateStrategy

#: Job types that may roll out through deployments (Nomad: service and system).
UPDATE_JOB_TYPES: Final = ("service", "system")

_DEFAULT: Final = UpdateStrategy()
_ZERO: Final = UpdateStrategy(max_parallel=0, stagger=0, health_check="", min_healthy_time=0,
                              healthy_deadline=0, progress_deadline=0)


def merge_update(base: UpdateStrategy | None, override: UpdateStrategy | None
                 ) -> UpdateStrategy | None:
    """`override`'s fields that differ from Nomad's defaults over `base` (a group's block over
    the job's); either may be missing."""
    if base is None or override is None:
        either = override or base
        return msgspec.structs.replace(either) if either is not None else None
    changes = {f: getattr(override, f) for f in override.__struct_fields__
               if getattr(override, f) != getattr(_DEFAULT, f)}
    return msgspec.structs.replace(base, **changes)


def _is_empty(u: UpdateStrategy) -> bool:
    """Nomad's api `UpdateStrategy.Empty`: no field set to anything but zero. The struct
    carries defaults, so a field at its default counts as unset too (HCL `update {
    max_parallel = 0 }` and JSON's all-zero block are both empty)."""
    return u.max_parallel == 0 and all(getattr(u, f) in (getattr(_ZERO, f), getattr(_DEFAULT, f))
                                       for f in u.__struct_fields__)


def group_update(job: Job, group: TaskGroup) -> UpdateStrategy | None:
    """The strategy `group` ends with: its block over the job's; the job's alone only when it
    is not empty (api/tasks.go `TaskGroup.Canonicalize`, api/jobs.go `UpdateStrategy.Empty`)."""
    if group.update is None and (job.update is None or _is_empty(job.update)):
        return None
    return merge_update(job.update, group.update)


def fold_update(job: Job) -> None:
    """Give every group its merged strategy (in place)."""
    for group in job.task_groups:
        group.update = group_update(job, group)


def update_problems(u: UpdateStrategy) -> list[tuple[str, str]]:
    """Nomad's `UpdateStrategy.Validate`: (field, message) pairs, Nomad's messages."""
    out: list[tuple[str, str]] = []
    d = format_duration
    if u.health_check not in UPDATE_HEALTH_MODES:
        out.append(("health_check", f'Invalid health check given: "{u.health_check}"'))
    if u.max_parallel < 0:
        out.append(("max_parallel",
                    f"Max parallel can not be less than zero: {u.max_parallel} < 0"))
    if u.canary < 0:
        out.append(("canary", f"Canary count can not be less than zero: {u.canary} < 0"))
    if u.canary == 0 and u.auto_promote:
        out.append(("auto_promote", "Auto Promote requires a Canary count greater than zero"))
    if u.min_healthy_time < 0:
        out.append(("min_healthy_time", "Minimum healthy time may not be less than zero: "
                    f"{d(u.min_healthy_time)}"))
    if u.healthy_deadline <= 0:
        out.append(("healthy_deadline", "Healthy deadline must be greater than zero: "
                    f"{d(u.healthy_deadline)}"))
    if u.progress_deadline < 0:
        out.append(("progress_deadline", "Progress deadline must be zero or greater: "
                    f"{d(u.progress_deadline)}"))
    if u.min_healthy_time >= u.healthy_deadline:
        out.append(("min_healthy_time", "Minimum healthy time must be less than healthy "
                    f"deadline: {d(u.min_healthy_time)} > {d(u.healthy_deadline)}"))
    if u.progress_deadline != 0 and u.healthy_deadline >= u.progress_deadline:
        out.append(("healthy_deadline", "Healthy deadline must be less than progress "
                    f"deadline: {d(u.healthy_deadline)} > {d(u.progress_deadline)}"))
    if u.stagger <= 0:
        out.append(("stagger", f"Stagger must be greater than zero: {d(u.stagger)}"))
    return out


def _check_kill_timeouts(job: Job, group: TaskGroup, merged: UpdateStrategy, g_at: _At,
                         problems: _Problems) -> None:
    """structs.go `Task.Validate`: in a service job, no task may take longer to stop than its
    group's progress deadline (0: no deadline). Nomad's message, its spelling included."""
    deadline = merged.progress_deadline
    if job.type != "service" or deadline <= 0:
        return
    for ti, task in enumerate(group.tasks):
        if task.kill_timeout > deadline:
            t_at = g_at.item(TaskGroup, "tasks", ti, task.name or str(ti))
            problems.add(t_at.field(Task, "kill_timeout"),
                         f"KillTimout ({format_duration(task.kill_timeout)}) longer than the "
                         f"group's ProgressDeadline ({format_duration(deadline)})")


def check_job_update(job: Job, root: _At, group_at: Callable[[int], _At],
                     problems: _Problems) -> None:
    """Every strategy the job's groups end with (nomad/structs/structs.go
    `TaskGroup.Validate`: Nomad never checks the job's own block), each problem on the block
    that causes it: one the job's block has too is reported once, there."""
    job_at = root.field(Job, "update")
    own = set(update_problems(job.update)) if job.update is not None else set()
    reported: set[tuple[str, str]] = set()
    wrong_type = job.type not in UPDATE_JOB_TYPES
    inherited = False
    for gi, group in enumerate(job.task_groups):
        merged = group_update(job, group)
        if merged is None:
            continue
        at = group_at(gi).field(TaskGroup, "update")
        _check_kill_timeouts(job, group, merged, group_at(gi), problems)
        if wrong_type:
            if group.update is None:
                inherited = True
            else:
                problems.add(at, f'Job type "{job.type}" does not allow update block')
        for attr, message in update_problems(merged):
            if (attr, message) not in own:
                problems.add(at.field(UpdateStrategy, attr), message)
            elif (attr, message) not in reported:
                reported.add((attr, message))
                problems.add(job_at.field(UpdateStrategy, attr), message)
    if wrong_type and inherited:
        problems.add(job_at, f'Job type "{job.type}" does not allow update block')

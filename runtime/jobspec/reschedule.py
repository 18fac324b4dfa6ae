"""The `reschedule` block: its canonical form per group and Nomad's rules for it (stage 4).

What lives here: `default_reschedule` (Nomad's policy per job type), `merge_reschedule`,
`group_reschedule` (the policy a group ends with: the job type's default, overridden by the
job's block, overridden by the group's; only the fields a block gives override), the checks
of Nomad's `ReschedulePolicy.Validate` and `fold_reschedule`, which `canonicalize` calls.

Invariants: as in Nomad, a policy that is disabled (`attempts` <= 0 and not `unlimited`) is
not checked further; a `sysbatch` job may not have a reschedule block at all and its groups
keep no policy (Nomad's server never reschedules them). A problem a group merely inherits from
the job's block is reported once, on the job's block. After `fold_reschedule` every group of
a rescheduling job type holds a policy with no `None` field, and the job's own block is gone
(Nomad's server-side job has none: it lives on in the groups).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

import msgspec

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.lib.durations import SECOND, format_duration
from yurt.runtime.structs import (
    DEFAULT_RESCHEDULE_POLICY,
    Job,
    ReschedulePolicy,
    TaskGroup,
)

#: Nomad's `ReschedulePolicyMinDelay` and `ReschedulePolicyMinInterval`.
MIN_RESCHEDULE_DELAY: Final = 5 * SECOND
MIN_RESCHEDULE_INTERVAL: Final = 15 * SECOND
DELAY_FUNCTIONS: Final = ("constant", "exponential", "fibonacci")
#: Job types whose groups are never rescheduled, and may not say otherwise.
NO_RESCHEDULE_TYPES: Final = ("system", "sysbatch")

#: A job type Nomad has no default for gets a disabled policy (Nomad's zero policy).
_DISABLED: Final = ReschedulePolicy(attempts=0, interval=0, delay=0, delay_function="",
                                    max_delay=0, unlimited=False)


def default_reschedule(job_type: str) -> ReschedulePolicy:
    return msgspec.structs.replace(DEFAULT_RESCHEDULE_POLICY.get(job_type, _DISABLED))


def merge_reschedule(base: ReschedulePolicy,
                     override: ReschedulePolicy | None) -> ReschedulePolicy:
    """`override`'s set fields over `base`'s."""
    if override is None:
        return msgspec.structs.replace(base)
    changes = {f: getattr(override, f) for f in override.__struct_fields__
               if getattr(override, f) is not None}
    return msgspec.structs.replace(base, **changes)


def group_reschedule(job: Job, group: TaskGroup) -> ReschedulePolicy | None:
    """The group's canonical policy; None for a job type that is never rescheduled."""
    if job.type in NO_RESCHEDULE_TYPES:
        return None
    return merge_reschedule(merge_reschedule(default_reschedule(job.type), job.reschedule),
                            group.reschedule_policy)


def fold_reschedule(job: Job) -> None:
    """Give every group its canonical policy and drop the job's block (in place)."""
    for group in job.task_groups:
        group.reschedule_policy = group_reschedule(job, group)
    job.reschedule = None


def _viable(attempts: int, interval: int, delay: int, function: str,
            max_delay: int) -> tuple[bool, int, int]:
    """Whether `attempts` replacements fit in `interval` with this delay progression; if
    not, how many do and what interval would hold them all. Nomad's `viableAttempts`, with
    its way of counting (the exponential sum starts only at the ceiling, fibonacci compares
    the last delay), in closed form past the ceiling: `attempts` comes from the job file
    and may be huge, so nothing here loops or allocates per attempt. Needs delay >= 5 s and,
    unless constant, max_delay >= delay."""
    if function == "constant":
        needed = attempts * delay
        return interval >= needed, interval // delay, needed
    if function == "exponential":
        possible, needed, i = 0, 0, 0
        while i < attempts and delay << i <= max_delay:  # doubling: at most ~60 steps
            needed = delay << i
            possible += needed < interval
            i += 1
        # Past the ceiling every attempt adds max_delay to the running sum.
        tail = attempts - i
        if tail > 0 and interval > needed:
            possible += min(tail, (interval - needed - 1) // max_delay)
        needed += tail * max_delay
        return possible >= attempts, possible, needed
    # fibonacci: slots[0] = slots[1] = delay, then the sum of the two last until it passes
    # max_delay (at most ~90 steps), that slot is max_delay, and each next one adds max_delay.
    slots = [delay, delay]
    while len(slots) < attempts and slots[-1] + slots[-2] <= max_delay:
        slots.append(slots[-1] + slots[-2])
    tail = max(0, attempts - len(slots))  # slots past the ceiling: max_delay × 1, 2, …
    needed = tail * max_delay if tail else slots[-1]
    if interval >= needed:
        return True, attempts, needed
    first = next((i for i, s in enumerate(slots) if s > interval), None)
    if first is None:  # the first slot over the interval is in the linear tail
        first = len(slots) + interval // max_delay
    return False, first, needed


def check_reschedule(policy: ReschedulePolicy, at: _At) -> list[tuple[_At, str]]:
    """Nomad's `ReschedulePolicy.Validate`, on a fully merged policy."""
    problems = _Problems([])
    attempts, interval = policy.attempts or 0, policy.interval or 0
    delay, function = policy.delay or 0, policy.delay_function or ""
    max_delay, unlimited = policy.max_delay or 0, bool(policy.unlimited)
    if attempts <= 0 and not unlimited:
        return []  # disabled: nothing else matters (Nomad's `Enabled`)

    def at_(attr: str) -> _At:
        return at.field(ReschedulePolicy, attr)

    if attempts > 0 and interval <= 0:
        problems.add(at_("interval"), "must be a non-zero duration when attempts > 0")
    if attempts > 0 and unlimited:
        problems.add(at_("unlimited"), f"a reschedule policy with attempts = {attempts} and "
                                       "unlimited = true is ambiguous; set attempts = 0 for "
                                       "unlimited rescheduling, or unlimited = false")
    delays_ok = True
    if delay < MIN_RESCHEDULE_DELAY:
        problems.add(at_("delay"), f"must be at least {format_duration(MIN_RESCHEDULE_DELAY)}, "
                                   f"got {format_duration(delay)}")
        delays_ok = False
    if function not in DELAY_FUNCTIONS:
        problems.add(at_("delay_function"), f"expected one of "
                     f"{', '.join(map(json.dumps, DELAY_FUNCTIONS))}, got {json.dumps(function)}")
        delays_ok = False
    elif function != "constant":
        if max_delay < MIN_RESCHEDULE_DELAY:
            problems.add(at_("max_delay"), f"must be at least "
                         f"{format_duration(MIN_RESCHEDULE_DELAY)} for the {function} delay "
                         f"function, got {format_duration(max_delay)}")
            delays_ok = False
        elif max_delay < delay:
            problems.add(at_("max_delay"), f"must not be less than delay "
                         f"({format_duration(delay)}), got {format_duration(max_delay)}")
            delays_ok = False
    if unlimited:
        return problems.items
    if interval < MIN_RESCHEDULE_INTERVAL:
        problems.add(at_("interval"), f"must be at least "
                     f"{format_duration(MIN_RESCHEDULE_INTERVAL)}, got {format_duration(interval)}")
    if delays_ok:
        ok, possible, needed = _viable(attempts, interval, delay, function, max_delay)
        if not ok:
            ceiling = "" if function == "constant" else f", max_delay {format_duration(max_delay)}"
            problems.add(at, f"only {possible} of {attempts} attempts fit in an interval of "
                             f"{format_duration(interval)} with delay {format_duration(delay)}"
                             f"{ceiling} and the {function} delay function; set the interval "
                             f"to at least {format_duration(needed)}")
    return problems.items


def check_job_reschedule(job: Job, root: _At, group_at: Callable[[int], _At],
                         problems: _Problems) -> None:
    """The job's and every group's reschedule block, each on its own place in the file."""
    job_at = root.field(Job, "reschedule")
    if job.type in NO_RESCHEDULE_TYPES:
        refused = f'"{job.type}" jobs run once on every node and are never rescheduled: ' \
                  "remove the reschedule block"
        if job.reschedule is not None:
            problems.add(job_at, refused)
        for gi, group in enumerate(job.task_groups):
            if group.reschedule_policy is not None:
                problems.add(group_at(gi).field(TaskGroup, "reschedule_policy"), refused)
        return
    # nomad/structs/structs.go `TaskGroup.Validate` checks each group's merged policy, never
    # the job's block alone: a problem of the job's block that every group overrides is none.
    own: dict[str, _At] = {}
    if job.reschedule is not None:
        job_policy = merge_reschedule(default_reschedule(job.type), job.reschedule)
        own = {msg: where for where, msg in check_reschedule(job_policy, job_at)}
    reported: set[str] = set()
    for gi, group in enumerate(job.task_groups):
        policy = group_reschedule(job, group)
        if policy is None:  # pragma: no cover - only the types refused above have none
            continue
        for where, msg in check_reschedule(
                policy, group_at(gi).field(TaskGroup, "reschedule_policy")):
            if msg not in own:
                problems.add(where, msg)
            elif msg not in reported:
                reported.add(msg)
                problems.add(own[msg], msg)

"""When a failed allocation is replaced (Nomad's reschedule policy). Pure: time is a parameter.

- **Policy**: the allocation's group's (`ReschedulePolicy`, made canonical by the jobspec:
  job-type default ← job block ← group block). A job stored before groups carried one gets
  its type's default; a `sysbatch` job is never rescheduled.
- **Eligible**: an unlimited policy always; else fewer than `attempts` replacements within
  the last `interval` (counted from the allocation's `RescheduleTracker`).
- **Delay**: `constant` is `delay` every time; `exponential` doubles the last delay (`delay`
  first), `fibonacci` adds the two last; both capped at `max_delay`.
- **When**: the failure (its tasks' last finish, else its last change) plus the delay.
  Until then the failed allocation waits on a follow-up evaluation (`FollowupEvalID`,
  `WaitUntil`); its replacement names it in `PreviousAllocation` and carries its tracker
  with one more event.
- **Forced**: a register, or a failed allocation marked `DesiredTransition.ForceReschedule`
  (`job eval -force-reschedule`), is replaced now, whatever the policy's attempts and delay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from yurt.runtime.structs import (
    ALLOC_CLIENT_FAILED,
    ALLOC_DESIRED_RUN,
    DEFAULT_RESCHEDULE_POLICY,
    ZERO_TIME,
    Allocation,
    Job,
    RescheduleEvent,
    ReschedulePolicy,
    RescheduleTracker,
)


def policy_for(job: Job, group_name: str) -> ReschedulePolicy | None:
    """The policy of `job`'s group `group_name`, every field set; None: never replaced."""
    default = DEFAULT_RESCHEDULE_POLICY.get(job.type)
    if default is None:
        return None
    group = job.lookup_group(group_name)
    own = group.reschedule_policy if group is not None else None
    if own is None:
        return default
    return msgspec.structs.replace(default, **{
        f: getattr(own, f) for f in own.__struct_fields__ if getattr(own, f) is not None})


def needs_reschedule(alloc: Allocation) -> bool:
    """A failed allocation the server still wants running and nothing replaced yet."""
    return (alloc.client_status == ALLOC_CLIENT_FAILED
            and alloc.desired_status == ALLOC_DESIRED_RUN and not alloc.next_allocation)


def _events(alloc: Allocation) -> list[RescheduleEvent]:
    return list(alloc.reschedule_tracker.events) if alloc.reschedule_tracker else []


def eligible(policy: ReschedulePolicy, alloc: Allocation, now: int) -> bool:
    if policy.unlimited:
        return True
    attempts = policy.attempts or 0
    if attempts <= 0:
        return False  # `attempts = 0` without `unlimited`: rescheduling is off (Nomad)
    interval = policy.interval or 0
    recent = [e for e in _events(alloc) if now - e.reschedule_time < interval]
    return len(recent) < attempts


def next_delay(policy: ReschedulePolicy, alloc: Allocation) -> int:
    events = _events(alloc)
    if policy.delay_function == "constant" or not events:
        return policy.delay or 0
    if policy.delay_function == "fibonacci" and len(events) >= 2:
        delay = events[-1].delay + events[-2].delay
    else:
        delay = events[-1].delay * 2
    return min(delay, policy.max_delay) if policy.max_delay else delay


def failed_at(alloc: Allocation) -> int:
    """When the allocation failed: its tasks' last finish (Nomad's `LastEventTime`), else
    its last change."""
    finished = [unix_ns(t.finished_at) for t in alloc.task_states.values()
                if t.finished_at > ZERO_TIME]
    return max(finished) if finished else alloc.modify_time


def reschedule_at(policy: ReschedulePolicy, alloc: Allocation) -> int:
    """Unix ns at which the failed `alloc` may be replaced."""
    return failed_at(alloc) + next_delay(policy, alloc)


def tracker_after(alloc: Allocation, policy: ReschedulePolicy, now: int) -> RescheduleTracker:
    """The replacement's tracker: the failed allocation's, with this replacement added."""
    return RescheduleTracker(events=[*_events(alloc), RescheduleEvent(
        reschedule_time=now, prev_alloc_id=alloc.id, prev_node_id=alloc.node_id,
        delay=next_delay(policy, alloc))])


@dataclass
class Decision:
    """What the failed allocations of a job get from one evaluation, by allocation name."""

    now: dict[str, tuple[Allocation, RescheduleTracker | None]] = field(default_factory=dict)
    later: dict[str, tuple[Allocation, int]] = field(default_factory=dict)
    never: set[str] = field(default_factory=set)


def decide(job: Job, allocs: list[Allocation], now: int, *, user_asked: bool) -> Decision:
    """For each name whose latest allocation failed and is not replaced yet: replace it now
    (a register always does, keeping its tracker), at a later time, or never (the policy is
    used up). `allocs`: the job's, oldest first."""
    # Among the allocations the server still wants and has not replaced yet: a newer one
    # it stopped (the replacement that lost to its original when a disconnected node came
    # back), or one already replaced (a replacement of that replacement failed before the
    # original came back), does not hide the original's failure, or the name would never
    # run again.
    latest: dict[str, Allocation] = {}
    for alloc in allocs:
        if alloc.desired_status == ALLOC_DESIRED_RUN and not alloc.next_allocation:
            latest[alloc.name] = alloc
    decision = Decision()
    for name, alloc in latest.items():
        if not needs_reschedule(alloc):
            continue
        policy = policy_for(job, alloc.task_group)
        if user_asked or alloc.desired_transition.force_reschedule:
            # A register, or `job eval -force-reschedule`: now, whatever the policy says.
            decision.now[name] = (alloc, alloc.reschedule_tracker)
        elif policy is None or not eligible(policy, alloc, now):
            decision.never.add(name)
        elif (when := reschedule_at(policy, alloc)) <= now:
            decision.now[name] = (alloc, tracker_after(alloc, policy, now))
        else:
            decision.later[name] = (alloc, when)
    return decision


def force_reschedulable(job: Job, allocs: list[Allocation]) -> list[Allocation]:
    """The allocations `job eval -force-reschedule` marks (nomad/job_endpoint.go
    `Evaluate`): failed, not replaced yet, not marked already, of a group whose reschedule
    policy is enabled (attempts or unlimited)."""
    found = []
    for alloc in allocs:
        policy = policy_for(job, alloc.task_group)
        if policy is None or not (policy.unlimited or (policy.attempts or 0) > 0):
            continue
        if (not alloc.next_allocation and alloc.client_status == ALLOC_CLIENT_FAILED
                and not alloc.desired_transition.force_reschedule):
            found.append(alloc)
    return found


def as_time(unix_ns: int) -> datetime:
    """An evaluation's `WaitUntil` for a time in unix ns."""
    return datetime.fromtimestamp(unix_ns / 1e9, tz=UTC)


def unix_ns(when: datetime) -> int:
    return round(when.timestamp() * 1e9)

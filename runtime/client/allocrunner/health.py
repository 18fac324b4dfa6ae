"""Allocation health: is a new allocation good enough for a deployment (or a drain) to go on?

Nomad's `client/allochealth/tracker.go` and the parameter choice of `health_hook.go`, as a
sans-io core. `Tracker` is fed the client's view of the allocation (`alloc_updated`) and the
latest service-check results (`checks_updated`) with the current time, and `poll(now)` says
what is known: healthy, unhealthy (and why, per task), stopped (no health will be set), or
nothing yet and when to look again. Time is a parameter (seconds on the caller's monotonic
clock); the hook in `hooks/alloc_health.py` owns the waiting.

The rules, as Nomad's tracker applies them:
- Tasks: every task but poststop ones (and poststart ones that exited successfully) must be
  running, together, for `min_healthy_time`. Prestart tasks that finished count as started.
  The timer starts when the latest `StartedAt` of them changes, so a restart (a new
  `StartedAt`) starts it again, and a pending task stops it. A failed task, a finished task
  that is not a prestart one, or an allocation the client marks failed: unhealthy at once.
- Checks (`health_check = "checks"` and the group has Nomad service checks): every check
  result must be `success` — a failing `readiness` check (`on_update = "ignore"`) does not
  hold health back — and all the expected checks must have reported, continuously for
  `min_healthy_time`, while the tasks are healthy too. A result that is not passing, or a
  task change, starts the wait again.
- The deadline (`healthy_deadline`, from the moment tracking starts): unhealthy.
- A desired stop or evict ends tracking without health.

`ClientHealth` is the client's part of `DeploymentStatus` (Healthy, Timestamp); `Canary` and
`ModifyIndex` belong to the server and are kept from its copy of the allocation. Health is
set once per allocation and deployment: once set it is never tracked again (a restored
allocation with health keeps it), and a new `DeploymentID` clears it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec

from yurt.runtime.lib.durations import SECOND, format_duration
from yurt.runtime.structs import (
    ALLOC_CLIENT_FAILED,
    TASK_STATE_DEAD,
    TASK_STATE_PENDING,
    TASK_STATE_RUNNING,
    ZERO_TIME,
    Allocation,
    AllocDeploymentStatus,
    MigrateStrategy,
    TaskGroup,
    TaskState,
)
from yurt.runtime.structs.checks import (
    CHECK_FAILURE,
    CHECK_MODE_READINESS,
    CHECK_SUCCESS,
    CheckQueryResult,
)
from yurt.runtime.structs.update import UPDATE_HEALTH_CHECKS, UPDATE_HEALTH_MANUAL

#: The task event type Nomad gives the reasons of an unhealthy deployment allocation.
ALLOC_UNHEALTHY: Final = "Alloc Unhealthy"
#: Job types whose allocations have health: deployments and drains only care for these.
HEALTH_JOB_TYPES: Final = ("service", "system")

_POSTSTART: Final = "poststart"
_POSTSTOP: Final = "poststop"
_PRESTART: Final = "prestart"


@dataclass(frozen=True)
class HealthParams:
    """What health is judged by (Nomad's `getHealthParams`). Durations in nanoseconds."""

    deploy: bool  # the allocation is part of a deployment (else: a drain's migrate strategy)
    min_healthy_time: int
    healthy_deadline: int
    use_checks: bool


def health_params(alloc: Allocation) -> HealthParams | None:
    """How `alloc`'s health is tracked, or None when it is not: not a service or system job,
    or a deployment whose group strategy is empty or `manual` (the operator sets health)."""
    job = alloc.job
    if job is None or job.type not in HEALTH_JOB_TYPES:
        return None
    group = job.lookup_group(alloc.task_group)
    if group is None:
        return None
    if alloc.deployment_id:
        update = group.update
        if update is None or update.is_empty() or update.health_check == UPDATE_HEALTH_MANUAL:
            return None
        return HealthParams(True, update.min_healthy_time, update.healthy_deadline,
                            update.health_check == UPDATE_HEALTH_CHECKS)
    migrate = group.migrate or MigrateStrategy()  # Nomad's DefaultMigrateStrategy
    return HealthParams(False, migrate.min_healthy_time, migrate.healthy_deadline,
                        migrate.health_check == UPDATE_HEALTH_CHECKS)


class Verdict(enum.Enum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    STOPPED = "stopped"  # the allocation is being stopped: no health is set


@dataclass(frozen=True)
class Decision:
    """`verdict` None: nothing known yet; look again at `wake_at` (None: only on new input).
    `task_events`: task name → Nomad's reason, for an unhealthy deployment allocation."""

    verdict: Verdict | None = None
    wake_at: float | None = None
    task_events: dict[str, str] = field(default_factory=dict)


def _successful(state: TaskState) -> bool:
    return state.state == TASK_STATE_DEAD and not state.failed


def checks_passing(results: Mapping[str, CheckQueryResult], expected: int) -> bool:
    """Nomad's scan in `watchNomadEvents`, plus: every expected check has reported (a check
    the service hooks have not registered yet is as good as pending)."""
    if len(results) < expected:
        return False
    for result in results.values():
        if result.status == CHECK_SUCCESS:
            continue
        if result.status == CHECK_FAILURE and result.mode == CHECK_MODE_READINESS:
            continue
        return False
    return True


class Tracker:
    """One allocation's health, from the start of tracking to a verdict. See the module
    docstring for the rules; `now` is seconds on one monotonic clock throughout."""

    def __init__(self, group: TaskGroup, params: HealthParams, *, expected_checks: int,
                 now: float) -> None:
        self._group = group
        self._params = params
        self._min_healthy = params.min_healthy_time / SECOND
        self.deadline = now + params.healthy_deadline / SECOND
        self._use_checks = params.use_checks and expected_checks > 0
        self._expected_checks = expected_checks
        #: Tasks with a lifecycle hook that are not sidecars: they may end without harm.
        self._ephemeral = {t.name: t.lifecycle.hook for t in group.tasks
                           if t.lifecycle is not None and not t.lifecycle.sidecar}
        self._task_names = {t.name for t in group.tasks}
        self._states: dict[str, TaskState] = {}
        self._all_started: datetime = ZERO_TIME
        self._task_timer: float | None = None
        self._tasks_healthy = False
        self._checks_healthy = False
        self._checks_passing = False
        self._check_timer: float | None = None
        self._alloc_failed = False
        self._verdict: Verdict | None = None

    # ------------------------------------------------------------------ inputs

    def alloc_updated(self, alloc: Allocation, now: float) -> None:
        """A new client view of the allocation (task states, client and desired status)."""
        if self._verdict is not None:
            return
        if alloc.is_desired_stopped():
            self._verdict = Verdict.STOPPED
            return
        self._states = {name: state for name, state in alloc.task_states.items()
                        if name in self._task_names}
        latest = ZERO_TIME
        for name, state in alloc.task_states.items():
            hook = self._ephemeral.get(name)
            if hook == _POSTSTOP:
                continue  # stays pending until the main tasks end
            if hook == _POSTSTART and _successful(state):
                continue
            if state.failed or (state.finished_at != ZERO_TIME and hook != _PRESTART):
                self._verdict = Verdict.UNHEALTHY
                return
            if state.state == TASK_STATE_PENDING:
                latest = ZERO_TIME
                break
            latest = max(latest, state.started_at)
        if alloc.client_status == ALLOC_CLIENT_FAILED:
            self._alloc_failed = True  # failed at the alloc level: no task is to blame
            self._verdict = Verdict.UNHEALTHY
            return
        if latest != self._all_started:
            self._set_tasks_unhealthy()
            if latest != ZERO_TIME:
                self._all_started = latest
                self._task_timer = now + self._min_healthy

    def checks_updated(self, results: Mapping[str, CheckQueryResult], now: float) -> None:
        """The latest result of every service check of the allocation."""
        if self._verdict is not None or not self._use_checks:
            return
        self._checks_passing = checks_passing(results, self._expected_checks)
        if not self._checks_passing:
            self._checks_healthy = False
            self._check_timer = None
        elif self._check_timer is None:
            self._check_timer = now + self._min_healthy

    # ------------------------------------------------------------------ output

    def poll(self, now: float) -> Decision:
        """What is known at `now`; fires the timers that are due."""
        if self._verdict is None:
            self._fire_timers(now)
        if self._verdict is None and now >= self.deadline:
            self._verdict = Verdict.UNHEALTHY
        if self._verdict is None:
            timers = [t for t in (self._task_timer, self._check_timer, self.deadline)
                      if t is not None]
            return Decision(wake_at=min(timers))
        events = self.task_events() if self._verdict is Verdict.UNHEALTHY else {}
        return Decision(self._verdict, task_events=events)

    def task_events(self) -> dict[str, str]:
        """Nomad's `TaskEvents`: why each task kept the allocation from being healthy (none
        when the allocation failed as a whole). A running task always gets the
        min_healthy_time reason: Nomad compares its start with its tracker's deadline, and
        that context has none, so the comparison always holds."""
        if self._alloc_failed:
            return {}
        mht = format_duration(self._params.min_healthy_time)
        deadline = format_duration(self._params.healthy_deadline)
        events: dict[str, str] = {}
        for task in self._group.tasks:
            state = self._states.get(task.name)
            if state is None:
                continue
            if state.failed:
                events[task.name] = "Unhealthy because of failed task"
            elif state.state == TASK_STATE_PENDING:
                events[task.name] = f"Task not running by healthy_deadline of {deadline}"
            elif state.state == TASK_STATE_DEAD:
                if task.lifecycle is None or task.lifecycle.sidecar:
                    events[task.name] = "Unhealthy because of dead task"
            elif state.state == TASK_STATE_RUNNING:
                events[task.name] = (f"Task not running for min_healthy_time of {mht} by "
                                     f"healthy_deadline of {deadline}")
        return events

    # ------------------------------------------------------------------ internals

    def _set_tasks_unhealthy(self) -> None:
        """Nomad's `setTaskHealth(false, false)` plus the reset of its task timer."""
        self._tasks_healthy = False
        self._checks_healthy = False
        self._task_timer = None

    def _fire_timers(self, now: float) -> None:
        if self._task_timer is not None and now >= self._task_timer:
            self._task_timer = None
            self._tasks_healthy = True
            if not self._use_checks or self._checks_healthy:
                self._verdict = Verdict.HEALTHY
                return
        if self._check_timer is not None and now >= self._check_timer:
            self._check_timer = None
            self._checks_healthy = self._tasks_healthy
            if self._checks_healthy:
                self._verdict = Verdict.HEALTHY
                return
            # Checks passed but tasks have not been healthy long enough: wait again (Nomad
            # re-arms on its next look at the checks).
            if self._checks_passing:
                self._check_timer = now + self._min_healthy


# --------------------------------------------------------------------------- client health


@dataclass
class ClientHealth:
    """The client-controlled part of the allocation's `DeploymentStatus` (Nomad's
    `state.SetDeploymentStatus` / `ClearDeploymentStatus`)."""

    healthy: bool | None = None
    timestamp: datetime = ZERO_TIME

    @classmethod
    def of(cls, alloc: Allocation) -> ClientHealth:
        """What the allocation's copy already says (a restored or re-sent allocation)."""
        status = alloc.deployment_status
        if status is None or status.healthy is None:
            return cls()
        return cls(status.healthy, status.timestamp)

    def has_health(self) -> bool:
        return self.healthy is not None

    def set(self, healthy: bool, at: datetime) -> None:
        self.healthy, self.timestamp = healthy, at

    def clear(self) -> None:
        self.healthy, self.timestamp = None, ZERO_TIME

    def status(self, alloc: Allocation, client_status: str) -> AllocDeploymentStatus | None:
        """The `DeploymentStatus` of the client's view: the server's (Canary, ModifyIndex)
        with the client's health laid over it. An allocation of a deployment that failed
        before its health was known is unhealthy (Nomad's `clientAlloc`)."""
        server = alloc.deployment_status
        if self.healthy is not None:
            base = server or AllocDeploymentStatus()
            return msgspec.structs.replace(base, healthy=self.healthy,
                                           timestamp=self.timestamp)
        if (client_status == ALLOC_CLIENT_FAILED and alloc.deployment_id
                and (server is None or server.healthy is None)):
            return msgspec.structs.replace(server or AllocDeploymentStatus(), healthy=False)
        return server


def restored_alloc(server_copy: Allocation, stored: Allocation) -> Allocation:
    """The server's copy of a restored allocation, with the health the client had set and
    persisted (in its last published view) but the server may not have received yet."""
    persisted = stored.deployment_status
    current = server_copy.deployment_status
    if (persisted is None or persisted.healthy is None
            or stored.deployment_id != server_copy.deployment_id
            or (current is not None and current.healthy is not None)):
        return server_copy
    base = current or AllocDeploymentStatus()
    return msgspec.structs.replace(server_copy, deployment_status=msgspec.structs.replace(
        base, healthy=persisted.healthy, timestamp=persisted.timestamp))

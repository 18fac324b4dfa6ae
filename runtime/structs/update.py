"""Rolling updates: a group's `update {}` (Nomad's `UpdateStrategy`) and the `Deployment` that
tracks one job version's rollout, with its per-group `DeploymentState`.

Invariants:
- A group without an `update` block, or with `max_parallel = 0`, has no strategy: its changes
  are not rolled out through a deployment (Nomad's `UpdateStrategy.IsEmpty`).
- Status and description strings are Nomad's, verbatim: clients match on them.
- `Deployment` times are unix nanoseconds; `RequireProgressBy` is an RFC 3339 time (Go's zero
  time when unset), as Nomad's JSON carries them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from msgspec import field

from yurt.runtime.lib.durations import MINUTE, SECOND
from yurt.runtime.structs.base import ZERO_TIME, Base, Duration

UPDATE_HEALTH_CHECKS: Final = "checks"
UPDATE_HEALTH_TASK_STATES: Final = "task_states"
UPDATE_HEALTH_MANUAL: Final = "manual"
UPDATE_HEALTH_MODES: Final = (UPDATE_HEALTH_CHECKS, UPDATE_HEALTH_TASK_STATES,
                              UPDATE_HEALTH_MANUAL)


class UpdateStrategy(Base):
    """`update {}` at job or group level; defaults are Nomad's `DefaultUpdateStrategy`. The
    group's block is merged over the job's (a field the group sets wins)."""

    stagger: Duration = 30 * SECOND
    max_parallel: int = 1
    health_check: str = UPDATE_HEALTH_CHECKS
    min_healthy_time: Duration = 10 * SECOND
    healthy_deadline: Duration = 5 * MINUTE
    progress_deadline: Duration = 10 * MINUTE
    auto_revert: bool = False
    auto_promote: bool = False
    canary: int = 0

    def is_empty(self) -> bool:
        return self.max_parallel == 0


DEPLOYMENT_STATUS_RUNNING: Final = "running"
DEPLOYMENT_STATUS_PAUSED: Final = "paused"
DEPLOYMENT_STATUS_FAILED: Final = "failed"
DEPLOYMENT_STATUS_SUCCESSFUL: Final = "successful"
DEPLOYMENT_STATUS_CANCELLED: Final = "cancelled"
DEPLOYMENT_STATUS_PENDING: Final = "pending"
DEPLOYMENT_STATUS_BLOCKED: Final = "blocked"
DEPLOYMENT_STATUS_UNBLOCKING: Final = "unblocking"
DEPLOYMENT_STATUS_INITIALIZING: Final = "initializing"

DEPLOYMENT_DESC_RUNNING: Final = "Deployment is running"
DEPLOYMENT_DESC_RUNNING_NEEDS_PROMOTION: Final = (
    "Deployment is running but requires manual promotion")
DEPLOYMENT_DESC_RUNNING_AUTO_PROMOTION: Final = (
    "Deployment is running pending automatic promotion")
DEPLOYMENT_DESC_PAUSED: Final = "Deployment is paused"
DEPLOYMENT_DESC_SUCCESSFUL: Final = "Deployment completed successfully"
DEPLOYMENT_DESC_STOPPED_JOB: Final = "Cancelled because job is stopped"
DEPLOYMENT_DESC_NEWER_JOB: Final = "Cancelled due to newer version of job"
DEPLOYMENT_DESC_FAILED_ALLOCATIONS: Final = "Failed due to unhealthy allocations"
DEPLOYMENT_DESC_PROGRESS_DEADLINE: Final = "Failed due to progress deadline"
DEPLOYMENT_DESC_FAILED_BY_USER: Final = "Deployment marked as failed"


def desc_rollback(base: str, version: int) -> str:
    return f"{base} - rolling back to job version {version}"


def desc_rollback_noop(base: str, version: int) -> str:
    return (f"{base} - not rolling back to stable job version {version} as current job has "
            "same specification")


def desc_no_rollback_target(base: str) -> str:
    return f"{base} - no stable job version to auto revert to"


def deployment_active(status: str) -> bool:
    """Nomad's `Deployment.Active`: still rolling out (or waiting to)."""
    return status in (DEPLOYMENT_STATUS_RUNNING, DEPLOYMENT_STATUS_PAUSED,
                      DEPLOYMENT_STATUS_BLOCKED, DEPLOYMENT_STATUS_UNBLOCKING,
                      DEPLOYMENT_STATUS_PENDING, DEPLOYMENT_STATUS_INITIALIZING)


class DeploymentState(Base):
    """One group's progress within a deployment."""

    auto_revert: bool = False
    auto_promote: bool = False
    progress_deadline: Duration = 0
    require_progress_by: datetime = ZERO_TIME
    promoted: bool = False
    placed_canaries: list[str] = field(default_factory=list)
    desired_canaries: int = 0
    desired_total: int = 0
    placed_allocs: int = 0
    healthy_allocs: int = 0
    unhealthy_allocs: int = 0


class Deployment(Base):
    """The rollout of one job version."""

    id: str = field(default="", name="ID")
    namespace: str = "default"
    job_id: str = field(default="", name="JobID")
    job_version: int = 0
    job_modify_index: int = 0
    job_spec_modify_index: int = 0
    job_create_index: int = 0
    is_multiregion: bool = False
    task_groups: dict[str, DeploymentState] = field(default_factory=dict)
    status: str = DEPLOYMENT_STATUS_RUNNING
    status_description: str = DEPLOYMENT_DESC_RUNNING
    eval_priority: int = 0
    create_index: int = 0
    modify_index: int = 0
    create_time: int = 0
    modify_time: int = 0

    def active(self) -> bool:
        return deployment_active(self.status)

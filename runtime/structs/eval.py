"""Evaluations: Evaluation, AllocMetric, their statuses and `TriggeredBy` reasons.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from msgspec import field

from yurt.runtime.structs.base import ZERO_TIME, Base, Duration

# --------------------------------------------------------------------------- evaluations

EVAL_STATUS_PENDING: Final = "pending"
EVAL_STATUS_COMPLETE: Final = "complete"
EVAL_STATUS_FAILED: Final = "failed"
EVAL_STATUS_BLOCKED: Final = "blocked"
EVAL_STATUS_CANCELED: Final = "canceled"

# Nomad's EvalTriggerBy values that yurt uses (a forced evaluation is `job-register`, as
# Nomad's `Job.Evaluate` has it).
TRIGGER_JOB_REGISTER: Final = "job-register"
TRIGGER_JOB_DEREGISTER: Final = "job-deregister"
TRIGGER_NODE_UPDATE: Final = "node-update"
TRIGGER_ALLOC_STOP: Final = "alloc-stop"
TRIGGER_NODE_DRAIN: Final = "node-drain"
TRIGGER_QUEUED_ALLOCS: Final = "queued-allocs"
TRIGGER_ALLOC_FAILURE: Final = "alloc-failure"
TRIGGER_PERIODIC_JOB: Final = "periodic-job"
TRIGGER_JOB_SCALING: Final = "job-scaling"


class NodeScoreMeta(Base):
    node_id: str = field(default="", name="NodeID")
    scores: dict[str, float] = field(default_factory=dict)
    norm_score: float = 0.0


class AllocMetric(Base):
    """Why a placement went as it did (Nomad's `AllocMetric`): nodes looked at, filtered,
    exhausted, and by which dimension (`{"memory": 1}`)."""

    nodes_evaluated: int = 0
    nodes_filtered: int = 0
    nodes_in_pool: int = 0
    #: The job's node pool (Nomad's AllocMetric.NodePool).
    node_pool: str = ""
    nodes_available: dict[str, int] = field(default_factory=dict)
    class_filtered: dict[str, int] | None = None
    constraint_filtered: dict[str, int] | None = None
    nodes_exhausted: int = 0
    class_exhausted: dict[str, int] | None = None
    dimension_exhausted: dict[str, int] | None = None
    quota_exhausted: list[str] | None = None
    resources_exhausted: dict[str, Any] | None = None
    scores: dict[str, float] | None = None
    score_meta_data: list[NodeScoreMeta] | None = None
    allocation_time: Duration = 0
    coalesced_failures: int = 0


class Evaluation(Base):
    """One run of the scheduler for a job (Nomad's `Evaluation`): why it ran, what it left
    (FailedTGAllocs, a BlockedEval waiting for capacity) and how it ended."""

    id: str = field(default="", name="ID")
    namespace: str = "default"
    priority: int = 50
    type: str = "service"
    triggered_by: str = ""
    job_id: str = field(default="", name="JobID")
    job_modify_index: int = 0
    node_id: str = field(default="", name="NodeID")
    node_modify_index: int = 0
    deployment_id: str = field(default="", name="DeploymentID")
    status: str = EVAL_STATUS_PENDING
    status_description: str = ""
    wait: Duration = 0
    wait_until: datetime = ZERO_TIME
    next_eval: str = ""
    previous_eval: str = ""
    blocked_eval: str = ""
    related_evals: list[Any] | None = None
    failed_tg_allocs: dict[str, AllocMetric] | None = field(default=None, name="FailedTGAllocs")
    class_eligibility: dict[str, bool] | None = None
    escaped_computed_class: bool = False
    quota_limit_reached: str = ""
    annotate_plan: bool = False
    queued_allocations: dict[str, int] | None = None
    leader_ack: str = field(default="", name="LeaderACK")
    snapshot_index: int = 0
    create_index: int = 0
    modify_index: int = 0
    create_time: int = 0
    modify_time: int = 0

    def is_terminal(self) -> bool:
        return self.status in (EVAL_STATUS_COMPLETE, EVAL_STATUS_FAILED, EVAL_STATUS_CANCELED)



# --------------------------------------------------------------------------- rescheduling

TRIGGER_FAILED_FOLLOW_UP: Final = "failed-follow-up"

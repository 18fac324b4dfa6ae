"""The data model: jobs, allocations, task state and events, with Nomad's JSON encoding.

Every struct here encodes to, and decodes from, the JSON that Nomad's HTTP API speaks: field
names are Nomad's (`ID`, `TaskGroups`, `MemoryMB`, `KillTimeout` …), durations are integer
nanoseconds, `TaskEvent.Time` is unix nanoseconds, `TaskState.StartedAt` and friends are RFC 3339
times (Go's zero time `0001-01-01T00:00:00Z` when unset), and task event `Details` is a map of
strings. So a Nomad JSON job, or an allocation fetched from Nomad, decodes here and re-encodes
without losing a field yurt models. One precision limit: RFC 3339 times keep microseconds
(Python's `datetime`); Nomad's nanosecond digits beyond that are rounded. Event times, the ones
that order things, are integers and exact.

Invariants:
- Python attribute names are the jobspec (HCL) names where the jobspec has one (`kill_timeout`,
  `memory`, `max_file_size`), so the jobspec layer maps HCL to structs by attribute name; the JSON
  name is the msgspec `name=`.
- `null` in Nomad JSON means "not set": the jobspec decoder drops nulls, and the struct default is
  Nomad's own default. The one exception is `RestartPolicy`, whose fields stay `None` until
  `jobspec.canonicalize` fills them, because a task's `restart` block overrides its group's
  field by field and the default depends on the job type.
- Structs are plain data: no I/O, no clock. Mutable, because runners update task state in place
  and persist copies.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Final

import msgspec
from msgspec import field

from yurt.runtime.durations import MINUTE, SECOND

#: Integer nanoseconds. The metadata tells the jobspec layer to accept `"15s"`-style strings.
Duration = Annotated[int, msgspec.Meta(extra={"yurt_kind": "duration"})]

#: Go's zero `time.Time`, which Nomad's JSON carries for "never".
ZERO_TIME: Final = datetime(1, 1, 1, tzinfo=UTC)

JOB_TYPES: Final = ("service", "batch", "sysbatch")
LIFECYCLE_HOOKS: Final = ("prestart", "poststart", "poststop")
RESTART_MODES: Final = ("delay", "fail")

# Task states (TaskState.State) and allocation client statuses, as Nomad spells them.
TASK_STATE_PENDING: Final = "pending"
TASK_STATE_RUNNING: Final = "running"
TASK_STATE_DEAD: Final = "dead"

ALLOC_CLIENT_PENDING: Final = "pending"
ALLOC_CLIENT_RUNNING: Final = "running"
ALLOC_CLIENT_COMPLETE: Final = "complete"
ALLOC_CLIENT_FAILED: Final = "failed"
ALLOC_CLIENT_LOST: Final = "lost"

ALLOC_DESIRED_RUN: Final = "run"
ALLOC_DESIRED_STOP: Final = "stop"
ALLOC_DESIRED_EVICT: Final = "evict"


class Base(msgspec.Struct, kw_only=True, rename="pascal", gc=False):
    """Common options: PascalCase JSON names unless a field says otherwise, and instances
    untracked by Python's cyclic garbage collector (`gc=False`): the data model is a tree,
    never a cycle, and an agent holds tens of thousands of these, which a tracked collector
    would rescan on every full collection."""


# --------------------------------------------------------------------------- jobspec structs


class RestartPolicy(Base):
    """`restart {}`; `None` fields are inherited (task ← group ← job-type default)."""

    attempts: int | None = None
    interval: Duration | None = None
    delay: Duration | None = None
    mode: str | None = None
    render_templates: bool | None = None


class Lifecycle(Base):
    """`lifecycle {}`: which stage a task runs in, and whether it stays up alongside main."""

    hook: str = ""
    sidecar: bool = False


class RequestedDevice(Base):
    """`device "vendor/type/name" { count = N }` — the label is `Name`."""

    name: str = ""
    count: int = 1


class Resources(Base):
    cpu: int = field(default=100, name="CPU")
    memory: int = field(default=300, name="MemoryMB")
    memory_max: int = field(default=0, name="MemoryMaxMB")
    devices: list[RequestedDevice] = field(default_factory=list, name="Devices")


class LogConfig(Base):
    max_files: int = 10
    max_file_size: int = field(default=10, name="MaxFileSizeMB")
    disabled: bool = False


class EphemeralDisk(Base):
    sticky: bool = False
    migrate: bool = False
    size: int = field(default=300, name="SizeMB")


class Task(Base):
    name: str = ""
    driver: str = ""
    user: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    leader: bool = False
    lifecycle: Lifecycle | None = None
    restart_policy: RestartPolicy | None = None
    kill_timeout: Duration = 5 * SECOND
    kill_signal: str = ""
    shutdown_delay: Duration = 0
    resources: Resources = field(default_factory=Resources)
    log_config: LogConfig = field(default_factory=LogConfig)
    dispatch_payload: DispatchPayloadConfig | None = None


class TaskGroup(Base):
    name: str = ""
    count: int = 1
    tasks: list[Task] = field(default_factory=list)
    restart_policy: RestartPolicy | None = None
    ephemeral_disk: EphemeralDisk = field(default_factory=EphemeralDisk)
    meta: dict[str, str] = field(default_factory=dict)
    migrate: MigrateStrategy | None = None
    reschedule_policy: ReschedulePolicy | None = None


class Job(Base):
    region: str = "global"
    namespace: str = "default"
    id: str = field(default="", name="ID")
    name: str = ""
    type: str = "service"
    priority: int = 50
    datacenters: list[str] = field(default_factory=lambda: ["*"])
    meta: dict[str, str] = field(default_factory=dict)
    task_groups: list[TaskGroup] = field(default_factory=list)
    # Server-side bookkeeping; never set from a jobspec.
    stop: bool = False
    status: str = ""
    status_description: str = ""
    version: int = 0
    submit_time: int = 0
    create_index: int = 0
    modify_index: int = 0
    job_modify_index: int = 0
    periodic: PeriodicConfig | None = None
    parameterized: ParameterizedJobConfig | None = field(default=None, name="ParameterizedJob")
    parent_id: str = field(default="", name="ParentID")
    dispatched: bool = False
    payload: bytes | None = None
    dispatch_idempotency_token: str = ""
    stable: bool = False
    reschedule: ReschedulePolicy | None = None

    def lookup_group(self, name: str) -> TaskGroup | None:
        return next((g for g in self.task_groups if g.name == name), None)


#: Nomad's default restart policies by job type (reference §2.5).
DEFAULT_RESTART_POLICY: Final[dict[str, RestartPolicy]] = {
    "service": RestartPolicy(attempts=2, interval=30 * MINUTE, delay=15 * SECOND, mode="fail",
                             render_templates=False),
    "batch": RestartPolicy(attempts=3, interval=24 * 60 * MINUTE, delay=15 * SECOND,
                           mode="fail", render_templates=False),
}
DEFAULT_RESTART_POLICY["sysbatch"] = DEFAULT_RESTART_POLICY["batch"]


# --------------------------------------------------------------------------- runtime structs


class TaskEvent(Base):
    """One task event; `Details` carries the structured fields, the flat ones are Nomad's
    deprecated copies, kept because Nomad API clients still read them."""

    type: str = ""
    time: int = 0
    message: str = ""
    display_message: str = ""
    details: dict[str, str] = field(default_factory=dict)
    fails_task: bool = False
    restart_reason: str = ""
    setup_error: str = ""
    driver_error: str = ""
    exit_code: int = 0
    signal: int = 0
    kill_reason: str = ""
    kill_timeout: int = 0
    kill_error: str = ""
    start_delay: int = 0
    download_error: str = ""
    validation_error: str = ""
    disk_limit: int = 0
    failed_sibling: str = ""
    vault_error: str = ""
    task_signal_reason: str = ""
    task_signal: str = ""
    driver_message: str = ""
    generic_source: str = ""


class TaskState(Base):
    state: str = TASK_STATE_PENDING
    failed: bool = False
    restarts: int = 0
    last_restart: datetime = ZERO_TIME
    started_at: datetime = ZERO_TIME
    finished_at: datetime = ZERO_TIME
    events: list[TaskEvent] = field(default_factory=list)


class AllocatedDevice(Base):
    vendor: str = ""
    type: str = ""
    name: str = ""
    device_ids: list[str] = field(default_factory=list, name="DeviceIDs")


class AllocatedTaskResources(Base):
    cpu_shares: int = 0
    memory_mb: int = field(default=0, name="MemoryMB")
    memory_max_mb: int = field(default=0, name="MemoryMaxMB")
    devices: list[AllocatedDevice] = field(default_factory=list)


class AllocDeploymentStatus(Base):
    healthy: bool | None = None
    timestamp: datetime = ZERO_TIME
    canary: bool = False
    modify_index: int = 0


class AllocNetworkStatus(Base):
    interface_name: str = ""
    address: str = ""


class Allocation(Base):
    id: str = field(default="", name="ID")
    namespace: str = "default"
    eval_id: str = field(default="", name="EvalID")
    name: str = ""
    node_id: str = field(default="", name="NodeID")
    node_name: str = ""
    job_id: str = field(default="", name="JobID")
    job: Job | None = None
    task_group: str = ""
    task_resources: dict[str, AllocatedTaskResources] = field(default_factory=dict)
    desired_status: str = ALLOC_DESIRED_RUN
    desired_description: str = ""
    client_status: str = ALLOC_CLIENT_PENDING
    client_description: str = ""
    task_states: dict[str, TaskState] = field(default_factory=dict)
    deployment_status: AllocDeploymentStatus | None = None
    network_status: AllocNetworkStatus | None = None
    previous_allocation: str = ""
    next_allocation: str = ""
    preempted_allocations: list[str] = field(default_factory=list)
    preempted_by_allocation: str = ""
    create_index: int = 0
    modify_index: int = 0
    alloc_modify_index: int = 0
    create_time: int = 0
    modify_time: int = 0
    reschedule_tracker: RescheduleTracker | None = None
    followup_eval_id: str = field(default="", name="FollowupEvalID")
    desired_transition: DesiredTransition = field(default_factory=lambda: DesiredTransition())

    def is_terminal(self) -> bool:
        """Server- or client-terminal, as Nomad's `Allocation.TerminalStatus`."""
        return self.is_desired_stopped() or is_client_terminal(self.client_status)

    def is_desired_stopped(self) -> bool:
        return self.desired_status in (ALLOC_DESIRED_STOP, ALLOC_DESIRED_EVICT)


def is_client_terminal(status: str) -> bool:
    """The client is done with the allocation (Nomad's `ClientTerminalStatus`)."""
    return status in (ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST)


class DriverInfo(Base):
    detected: bool = False
    healthy: bool = False
    health_description: str = ""
    update_time: datetime = ZERO_TIME
    attributes: dict[str, str] = field(default_factory=dict)


class NodeCpuResources(Base):
    cpu_shares: int = 0
    total_cpu_cores: int = 0


class NodeMemoryResources(Base):
    memory_mb: int = field(default=0, name="MemoryMB")


class NodeDiskResources(Base):
    disk_mb: int = field(default=0, name="DiskMB")


class NodeDeviceInstance(Base):
    id: str = field(default="", name="ID")
    healthy: bool = True
    health_description: str = ""


class NodeDeviceResource(Base):
    """One device group the node has (Nomad's `NodeDeviceResource`)."""

    vendor: str = ""
    type: str = ""
    name: str = ""
    instances: list[NodeDeviceInstance] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)

    def matches(self, requested: str) -> bool:
        """Whether a request `type`, `vendor/type` or `vendor/type/name` names this group."""
        parts = requested.split("/")
        if len(parts) == 1:
            return parts[0] == self.type
        if len(parts) == 2:
            return (parts[0], parts[1]) == (self.vendor, self.type)
        return (parts[0], parts[1], parts[2]) == (self.vendor, self.type, self.name)


class NodeResources(Base):
    """What the node offers (Nomad's `NodeResources`, the parts placement uses)."""

    cpu: NodeCpuResources = field(default_factory=NodeCpuResources, name="Cpu")
    memory: NodeMemoryResources = field(default_factory=NodeMemoryResources)
    disk: NodeDiskResources = field(default_factory=NodeDiskResources)
    devices: list[NodeDeviceResource] = field(default_factory=list)


class Node(Base):
    id: str = field(default="", name="ID")
    name: str = ""
    datacenter: str = "dc1"
    node_class: str = ""
    node_pool: str = "default"
    attributes: dict[str, str] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    drivers: dict[str, DriverInfo] = field(default_factory=dict)
    node_resources: NodeResources = field(default_factory=NodeResources)
    computed_class: str = ""
    http_addr: str = field(default="", name="HTTPAddr")
    status: str = "initializing"
    status_description: str = ""
    create_index: int = 0
    modify_index: int = 0
    scheduling_eligibility: str = "eligible"
    drain: bool = False
    drain_strategy: DrainStrategy | None = None
    events: list[NodeEvent] = field(default_factory=list)
    status_updated_at: int = 0
    reserved_resources: NodeReservedResources = field(
        default_factory=lambda: NodeReservedResources())
    last_drain: DrainMetadata | None = None


# --------------------------------------------------------------------------- client-local state


class TaskMount(Base):
    """A host path a hook asks the driver to mount into the task (Nomad's `MountConfig`)."""

    task_path: str
    host_path: str
    readonly: bool = False


class TaskDeviceNode(Base):
    """A host device node a hook asks the driver to expose to the task (`DeviceConfig`)."""

    task_path: str
    host_path: str
    permissions: str = "rwm"


class HookState(Base):
    """What one task hook persisted: whether its prestart finished, its data, its env, and
    the mounts and device nodes it asked for (re-applied on restore like the env)."""

    prestart_done: bool = False
    data: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[TaskMount] = field(default_factory=list)
    devices: list[TaskDeviceNode] = field(default_factory=list)


class TaskHandle(Base):
    """Enough for a driver to find a task again after an agent restart."""

    version: int = 1
    driver: str = ""
    task_id: str = field(default="", name="TaskID")
    state: str = ""
    driver_state: dict[str, Any] = field(default_factory=dict)


class LocalState(Base):
    """The task runner's private persisted state (Nomad's `state.LocalState`)."""

    hooks: dict[str, HookState] = field(default_factory=dict)
    driver_network: dict[str, Any] | None = None
    task_handle: TaskHandle | None = None
    run_complete: bool = False
    #: A user restart was asked and the task not started again yet: a restarted agent
    #: resumes it (stops the task if need be, starts it again at once, uncounted).
    restart_requested: bool = False


class AcknowledgedState(Base):
    """The last client view of an allocation that the server acknowledged."""

    client_status: str = ""
    client_description: str = ""
    task_states: dict[str, TaskState] = field(default_factory=dict)
    deployment_status: AllocDeploymentStatus | None = None
    network_status: AllocNetworkStatus | None = None
    modify_time: int = 0


class PluginState(Base):
    """Driver- or device-manager state: opaque per-plugin blobs that let them re-attach."""

    internal_state: dict[str, dict[str, Any]] = field(default_factory=dict)


class NodeRegistration(Base):
    has_registered: bool = False


# --------------------------------------------------------------------------- node drain and
# eligibility (issue 11 item 6: runtime/server/drain.py, runtime/api/nodes.py)

NODE_ELIGIBLE: Final = "eligible"
NODE_INELIGIBLE: Final = "ineligible"


class MigrateStrategy(Base):
    """A group's `migrate {}`: how many of its allocations a drain moves at once."""

    max_parallel: int = 1
    health_check: str = "checks"
    min_healthy_time: Duration = 10 * SECOND
    healthy_deadline: Duration = 5 * MINUTE


class DrainStrategy(Base):
    """Nomad's `DrainStrategy`: its `DrainSpec` (Deadline ns: < 0 force now, 0 none, > 0
    force the rest once it passes) flattened in, as Go's embedding encodes it."""

    deadline: Duration = 0
    ignore_system_jobs: bool = False
    force_deadline: datetime = ZERO_TIME
    started_at: datetime = ZERO_TIME


class NodeEvent(Base):
    message: str = ""
    subsystem: str = ""
    details: dict[str, str] | None = None
    timestamp: datetime = ZERO_TIME
    create_index: int = 0


class DrainMetadata(Base):
    started_at: datetime = ZERO_TIME
    updated_at: datetime = ZERO_TIME
    status: str = ""
    accessor_id: str = field(default="", name="AccessorID")
    meta: dict[str, str] | None = None


class NodeReservedCpuResources(Base):
    cpu_shares: int = 0


class NodeReservedMemoryResources(Base):
    memory_mb: int = field(default=0, name="MemoryMB")


class NodeReservedDiskResources(Base):
    disk_mb: int = field(default=0, name="DiskMB")


class NodeReservedNetworkResources(Base):
    reserved_host_ports: str = ""


class NodeReservedResources(Base):
    cpu: NodeReservedCpuResources = field(default_factory=NodeReservedCpuResources,
                                          name="Cpu")
    memory: NodeReservedMemoryResources = field(default_factory=NodeReservedMemoryResources)
    disk: NodeReservedDiskResources = field(default_factory=NodeReservedDiskResources)
    networks: NodeReservedNetworkResources = field(
        default_factory=NodeReservedNetworkResources)
# --------------------------------------------------------------------------- periodic and
# parameterized jobs (Nomad's PeriodicConfig, ParameterizedJobConfig, DispatchPayloadConfig)

PERIODIC_SPEC_CRON: Final = "cron"
DISPATCH_PAYLOAD_MODES: Final = ("optional", "required", "forbidden")


class PeriodicConfig(Base):
    """`periodic {}`: launch a child job on a cron schedule. `cron` and `crons` are Nomad's
    `Spec` and `Specs` (one of the two); the schedule is read in `time_zone`."""

    enabled: bool = True
    cron: str = field(default="", name="Spec")
    crons: list[str] = field(default_factory=list, name="Specs")
    spec_type: str = PERIODIC_SPEC_CRON
    prohibit_overlap: bool = False
    time_zone: str = "UTC"

    def specs(self) -> list[str]:
        return [self.cron] if self.cron else list(self.crons)


class ParameterizedJobConfig(Base):
    """`parameterized {}`: the job is a template, run by dispatching it."""

    payload: str = "optional"
    meta_required: list[str] = field(default_factory=list)
    meta_optional: list[str] = field(default_factory=list)


class DispatchPayloadConfig(Base):
    """`dispatch_payload {}`: where, under the task's `local/`, the payload is written."""

    file: str = ""
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


class ReschedulePolicy(Base):
    """Nomad's `ReschedulePolicy`: how a failed allocation is replaced. `None` fields are
    inherited (group ← job ← job-type default); `jobspec.canonicalize` fills them all."""

    attempts: int | None = None
    interval: Duration | None = None
    delay: Duration | None = None
    delay_function: str | None = None
    max_delay: Duration | None = None
    unlimited: bool | None = None


class RescheduleEvent(Base):
    reschedule_time: int = 0
    prev_alloc_id: str = field(default="", name="PrevAllocID")
    prev_node_id: str = field(default="", name="PrevNodeID")
    delay: Duration = 0


class RescheduleTracker(Base):
    """The replacements an allocation's line went through (Nomad's `RescheduleTracker`)."""

    events: list[RescheduleEvent] = field(default_factory=list)


#: Nomad's default reschedule policies by job type (sysbatch: never rescheduled).
DEFAULT_RESCHEDULE_POLICY: Final[dict[str, ReschedulePolicy]] = {
    "service": ReschedulePolicy(attempts=0, interval=0, delay=30 * SECOND,
                                delay_function="exponential", max_delay=60 * MINUTE,
                                unlimited=True),
    "batch": ReschedulePolicy(attempts=1, interval=24 * 60 * MINUTE, delay=5 * SECOND,
                              delay_function="constant", max_delay=0, unlimited=False),
}


# --------------------------------------------------------------------------- alloc stop and drain


class DesiredTransition(Base):
    """Nomad's `DesiredTransition`: what the server wants done with a running allocation.
    `Migrate` (an `alloc stop`, a drain): the scheduler stops it and places a replacement."""

    migrate: bool | None = None
    reschedule: bool | None = None
    force_reschedule: bool | None = None
    no_shutdown_delay: bool | None = None

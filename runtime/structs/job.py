"""The jobspec's structs: Job, TaskGroup, Task and their blocks (restart, lifecycle, resources,
logs, ephemeral disk, periodic, parameterized, dispatch payload, migrate, reschedule), with
Nomad's defaults. Python attribute names are the HCL names; JSON names are Nomad's.
"""

from __future__ import annotations

from typing import Any, Final

from msgspec import field

from yurt.runtime.lib.durations import MINUTE, SECOND
from yurt.runtime.structs.artifact import TaskArtifact
from yurt.runtime.structs.base import Base, Duration
from yurt.runtime.structs.constraint import Affinity, Constraint, Spread
from yurt.runtime.structs.identity import JobUIConfig, WorkloadIdentity
from yurt.runtime.structs.network import NetworkResource
from yurt.runtime.structs.service import Service
from yurt.runtime.structs.template import Template
from yurt.runtime.structs.update import UpdateStrategy
from yurt.runtime.structs.volume import ScalingPolicy, TaskAction, VolumeMount, VolumeRequest

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
    """`device "vendor/type/name" { count = N }` — the label is `Name`. Its constraints
    choose among the node's device groups (server/scheduler/feasible.py `device_meets`); its
    affinities are kept, and do not rank them."""

    name: str = ""
    count: int = 1
    constraints: list[Constraint] = field(default_factory=list)
    affinities: list[Affinity] = field(default_factory=list)


class Resources(Base):
    cpu: int = field(default=100, name="CPU")
    memory: int = field(default=300, name="MemoryMB")
    memory_max: int = field(default=0, name="MemoryMaxMB")
    devices: list[RequestedDevice] = field(default_factory=list, name="Devices")
    #: Whole cores reserved for the task (feasible.py `unplaceable_reason`: yurt's nodes
    #: offer none to reserve, so a task asking for cores is not placed).
    cores: int = 0
    #: Deprecated in Nomad and ignored by it: `disk` (the group's ephemeral_disk decides) and
    #: `iops`. `network` here is Nomad's deprecated task network; the jobspec moves its ports
    #: to the group's network (rules_volume.py `fold_task_networks`), so it is empty after.
    disk: int = field(default=0, name="DiskMB")
    iops: int = field(default=0, name="IOPS")
    networks: list[NetworkResource] = field(default_factory=list)
    #: Nomad Enterprise's NUMA-aware scheduling and 1.11's in-memory secrets size.
    numa: dict[str, Any] | None = field(default=None, name="NUMA")
    secrets: int = field(default=0, name="SecretsMB")


class LogConfig(Base):
    max_files: int = 10
    max_file_size: int = field(default=10, name="MaxFileSizeMB")
    disabled: bool = False
    #: Nomad's older spelling of `disabled` (inverted); the jobspec folds it into `disabled`.
    enabled: bool | None = None


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
    constraints: list[Constraint] = field(default_factory=list)
    affinities: list[Affinity] = field(default_factory=list)
    default_identity: WorkloadIdentity | None = field(default=None, name="Identity")
    identities: list[WorkloadIdentity] = field(default_factory=list)
    templates: list[Template] = field(default_factory=list)
    artifacts: list[TaskArtifact] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    volume_mounts: list[VolumeMount] = field(default_factory=list)
    actions: list[TaskAction] = field(default_factory=list)
    scaling_policies: list[ScalingPolicy] = field(default_factory=list)
    #: Blocks stored but not placed (feasible.py `unplaceable_reason` says why): Nomad
    #: Enterprise's `schedule`, a CSI plugin task, 1.11's `secret` blocks.
    schedule: dict[str, Any] | None = None
    csi_plugin_config: dict[str, Any] | None = field(default=None, name="CSIPluginConfig")
    secrets: Any = None


class TaskGroup(Base):
    name: str = ""
    count: int = 1
    tasks: list[Task] = field(default_factory=list)
    restart_policy: RestartPolicy | None = None
    ephemeral_disk: EphemeralDisk = field(default_factory=EphemeralDisk)
    meta: dict[str, str] = field(default_factory=dict)
    migrate: MigrateStrategy | None = None
    reschedule_policy: ReschedulePolicy | None = None
    update: UpdateStrategy | None = None
    networks: list[NetworkResource] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    affinities: list[Affinity] = field(default_factory=list)
    spreads: list[Spread] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    #: How long allocations on a disconnected node stay unknown before they are lost
    #: (the scheduler, server/scheduler/disconnect.py); `disconnect.lost_after` is the newer
    #: spelling.
    max_client_disconnect: Duration | None = None
    disconnect: DisconnectStrategy | None = None
    volumes: dict[str, VolumeRequest] = field(default_factory=dict)
    scaling: ScalingPolicy | None = None
    #: The group's delay between deregistering its services and killing its tasks.
    shutdown_delay: Duration | None = None
    #: Nomad 1.10: how long a batch allocation may run before the client stops it.
    max_run_duration: Duration | None = None
    #: Deprecated and ignored in Nomad 1.10 (for `disconnect.stop_on_client_after` and
    #: `disconnect.replace`); kept so a job round-trips, and warned about at registration.
    stop_after_client_disconnect: Duration | None = None
    prevent_reschedule_on_lost: bool = False


class Job(Base):
    region: str = "global"
    namespace: str = "default"
    id: str = field(default="", name="ID")
    name: str = ""
    type: str = "service"
    priority: int = 50
    datacenters: list[str] = field(default_factory=lambda: ["*"])
    #: The node pool placement is confined to (`all`: any node); server/nodepools.py. ""
    #: until the register fills it in (the namespace's default pool, api/namespaces.py
    #: `check_register`), as Nomad's api `Job.Canonicalize` leaves it for the server.
    node_pool: str = ""
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
    update: UpdateStrategy | None = None
    constraints: list[Constraint] = field(default_factory=list)
    affinities: list[Affinity] = field(default_factory=list)
    spreads: list[Spread] = field(default_factory=list)
    ui: JobUIConfig | None = field(default=None, name="UI")
    #: Deprecated and without effect in Nomad (api/jobs.go); kept so a job round-trips.
    all_at_once: bool = False
    #: Nomad Enterprise's multi-region deployment (feasible.py `unplaceable_reason`).
    multiregion: dict[str, Any] | None = None
    #: Nomad 1.9's version tag (`{Name, Description, TaggedTime}`), kept with the version as
    #: given; yurt has no `job tag` command yet.
    version_tag: dict[str, Any] | None = None
    # Only while parsing: the jobspec folds a job-level block into every group.
    migrate: MigrateStrategy | None = None

    def lookup_group(self, name: str) -> TaskGroup | None:
        return next((g for g in self.task_groups if g.name == name), None)


#: Nomad's default restart policies by job type (`nomad/structs/structs.go`
#: `DefaultServiceJobRestartPolicy`, `DefaultBatchJobRestartPolicy`).
DEFAULT_RESTART_POLICY: Final[dict[str, RestartPolicy]] = {
    "service": RestartPolicy(attempts=2, interval=30 * MINUTE, delay=15 * SECOND, mode="fail",
                             render_templates=False),
    "batch": RestartPolicy(attempts=3, interval=24 * 60 * MINUTE, delay=15 * SECOND,
                           mode="fail", render_templates=False),
}
DEFAULT_RESTART_POLICY["sysbatch"] = DEFAULT_RESTART_POLICY["batch"]





class DisconnectStrategy(Base):
    """A group's `disconnect {}` (Nomad's DisconnectStrategy). The scheduler acts on
    `lost_after` (server/scheduler/disconnect.py); `stop_on_client_after`, `replace` and
    `reconcile` are validated and stored as Nomad's api/tasks.go has them."""

    lost_after: Duration = 0
    stop_on_client_after: Duration | None = None
    replace: bool | None = None
    reconcile: str = ""


class MigrateStrategy(Base):
    """A group's `migrate {}`: how many of its allocations a drain moves at once."""

    max_parallel: int = 1
    health_check: str = "checks"
    min_healthy_time: Duration = 10 * SECOND
    healthy_deadline: Duration = 5 * MINUTE


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

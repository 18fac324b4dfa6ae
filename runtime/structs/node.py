"""The node: Node, its resources, drivers, devices and host volumes, and its drain and
eligibility state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from msgspec import field

from yurt.runtime.structs.base import ZERO_TIME, Base, Duration
from yurt.runtime.structs.network import NetworkResource


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
        """Whether a request `type`, `vendor/type` or `vendor/type/name` names this group
        (structs.go `RequestedDevice.ID`: split in at most three, the name keeps any `/`)."""
        parts = requested.split("/", 2)
        if len(parts) == 1:
            return parts[0] == self.type
        if len(parts) == 2:
            return (parts[0], parts[1]) == (self.vendor, self.type)
        return (parts[0], parts[1], parts[2]) == (self.vendor, self.type, self.name)


class ClientHostVolumeConfig(Base):
    """Nomad's `structs.ClientHostVolumeConfig` (nomad/structs/volumes.go): a host volume the
    node offers, from the agent config's `host_volume` (runtime/agent/config.py). `ID` is set
    for Nomad's dynamic host volumes only (yurt has none yet: always "")."""

    name: str = ""
    path: str = ""
    read_only: bool = False
    id: str = field(default="", name="ID")


class NodeResources(Base):
    """What the node offers (Nomad's `NodeResources`, the parts placement uses)."""

    cpu: NodeCpuResources = field(default_factory=NodeCpuResources, name="Cpu")
    memory: NodeMemoryResources = field(default_factory=NodeMemoryResources)
    disk: NodeDiskResources = field(default_factory=NodeDiskResources)
    devices: list[NodeDeviceResource] = field(default_factory=list)
    #: The node's address as Nomad's network fingerprint reports it (its device, IP, CIDR
    #: and link speed, `MBits`: client/fingerprint/network.go); informational, as Nomad's
    #: scheduler no longer places on bandwidth.
    networks: list[NetworkResource] = field(default_factory=list)
    min_dynamic_port: int = 0  # 0: Nomad's default range (server/scheduler/ports.py)
    max_dynamic_port: int = 0


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
    #: Nomad's `Node.HostVolumes`, keyed by name (scheduler/feasible.py `host_volume_reason`).
    host_volumes: dict[str, ClientHostVolumeConfig] = field(default_factory=dict)



#: A node's Status, as Nomad's (a cluster's servers move it: runtime/server/cluster/heartbeat.py).
NODE_STATUS_INIT: Final = "initializing"
NODE_STATUS_READY: Final = "ready"
NODE_STATUS_DOWN: Final = "down"
NODE_STATUS_DISCONNECTED: Final = "disconnected"


# --------------------------------------------------------------------------- node drain and
# eligibility (runtime/server/scheduler/drain.py, runtime/api/nodes.py)

NODE_ELIGIBLE: Final = "eligible"
NODE_INELIGIBLE: Final = "ineligible"


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

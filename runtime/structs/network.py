"""Group networks and the ports a placement assigns: Nomad's `NetworkResource`, `Port`,
`DNSConfig`, and the allocation's shared `PortMapping`s.

Invariants:
- `Port.value` is the static (`static = N`) host port in a jobspec, 0 for a dynamic one; in an
  allocation's `NetworkResource` every port carries the host port it was given.
- `PortMapping.to` is the port the task sees (`to = N`), 0 when it is the host port itself.
"""

from __future__ import annotations

from typing import Any

from msgspec import field

from yurt.runtime.structs.base import Base


class Port(Base):
    label: str = ""
    value: int = 0
    to: int = 0
    host_network: str = "default"
    ignore_collision: bool = False


class DNSConfig(Base):
    servers: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)


class NetworkResource(Base):
    mode: str = "host"
    device: str = ""
    cidr: str = field(default="", name="CIDR")
    ip: str = field(default="", name="IP")
    hostname: str = ""
    mbits: int = field(default=0, name="MBits")
    dns: DNSConfig | None = field(default=None, name="DNS")
    reserved_ports: list[Port] = field(default_factory=list)
    dynamic_ports: list[Port] = field(default_factory=list)
    #: Nomad 1.8's `cni { args = {…} }`, passed to CNI plugins: stored; yurt's networks are
    #: host mode, whose validation (rules_network.py) refuses a CNI mode.
    cni: dict[str, Any] | None = field(default=None, name="CNI")


class PortMapping(Base):
    """One port an allocation holds on the host (`AllocatedResources.Shared.Ports`)."""

    label: str = ""
    value: int = 0
    to: int = 0
    host_ip: str = field(default="", name="HostIP")
    ignore_collision: bool = False


class AllocatedSharedResources(Base):
    """What a placement assigned to the whole group: its networks and ports. Stored on the
    allocation; the API answers it as `AllocatedResources.Shared` (with `DiskMB`)."""

    networks: list[NetworkResource] = field(default_factory=list)
    ports: list[PortMapping] = field(default_factory=list)

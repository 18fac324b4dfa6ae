"""Native (`provider = "nomad"`) service discovery: `ServiceRegistration`, one allocation's
registration of one service in the server's catalogue, as `/v1/service/<name>` answers it.

Invariant: a registration's `ID` is Nomad's
`_nomad-task-<alloc>-<task, or group-<group>>-<service>-<port label>`, stable for one allocation,
so registering again replaces rather than duplicates.
"""

from __future__ import annotations

from msgspec import field

from yurt.runtime.structs.base import Base


class ServiceRegistration(Base):
    id: str = field(default="", name="ID")
    service_name: str = ""
    namespace: str = "default"
    node_id: str = field(default="", name="NodeID")
    datacenter: str = ""
    job_id: str = field(default="", name="JobID")
    alloc_id: str = field(default="", name="AllocID")
    tags: list[str] = field(default_factory=list)
    address: str = ""
    port: int = 0
    create_index: int = 0
    modify_index: int = 0

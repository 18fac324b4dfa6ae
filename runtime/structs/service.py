"""Native (`provider = "nomad"`) service discovery: the jobspec's `service`, `check` and
`check_restart` blocks (Nomad's `Service`, `ServiceCheck`, `CheckRestart`), and
`ServiceRegistration`, one allocation's registration of one service in the server's catalogue,
as `/v1/service/<name>` answers it.

Python attribute names are the HCL names; JSON names are Nomad's (`port` is `PortLabel`,
`task` is `TaskName`). `None` on `CheckRestart.grace` means "not given" (Nomad's nil pointer:
a check's block is merged over its service's, then defaults to 1s).

Invariant: a registration's `ID` is Nomad's
`_nomad-task-<alloc>-<task, or group-<group>>-<service>-<port label>`, stable for one allocation,
so registering again replaces rather than duplicates.
"""

from __future__ import annotations

from typing import Final

from msgspec import field

from yurt.runtime.structs.base import Base, Duration

SERVICE_PROVIDER_NOMAD: Final = "nomad"
SERVICE_PROVIDER_CONSUL: Final = "consul"
ON_UPDATE_REQUIRE_HEALTHY: Final = "require_healthy"
ON_UPDATE_IGNORE_WARNINGS: Final = "ignore_warnings"
ON_UPDATE_IGNORE: Final = "ignore"
CHECK_HTTP: Final = "http"
CHECK_TCP: Final = "tcp"
CHECK_SCRIPT: Final = "script"


class CheckRestart(Base):
    limit: int = 0
    grace: Duration | None = None
    ignore_warnings: bool = False


class ServiceCheck(Base):
    name: str = ""
    type: str = ""
    command: str = ""
    args: list[str] = field(default_factory=list)
    path: str = ""
    protocol: str = ""
    port: str = field(default="", name="PortLabel")
    expose: bool = False
    address_mode: str = ""
    interval: Duration = 0
    timeout: Duration = 0
    initial_status: str = ""
    notes: str = ""
    tls_server_name: str = field(default="", name="TLSServerName")
    tls_skip_verify: bool = field(default=False, name="TLSSkipVerify")
    method: str = ""
    header: dict[str, list[str]] = field(default_factory=dict)
    check_restart: CheckRestart | None = None
    grpc_service: str = field(default="", name="GRPCService")
    grpc_use_tls: bool = field(default=False, name="GRPCUseTLS")
    task: str = field(default="", name="TaskName")
    success_before_passing: int = 0
    failures_before_critical: int = 0
    failures_before_warning: int = 0
    body: str = ""
    on_update: str = ""

    def requires_port(self) -> bool:
        """Nomad's `RequiresPort`: only script checks run without one."""
        return self.type in ("grpc", CHECK_HTTP, CHECK_TCP)

    def triggers_restarts(self) -> bool:
        return self.check_restart is not None and self.check_restart.limit > 0


class Service(Base):
    name: str = ""
    task: str = field(default="", name="TaskName")
    port: str = field(default="", name="PortLabel")
    address_mode: str = ""
    address: str = ""
    enable_tag_override: bool = False
    tags: list[str] = field(default_factory=list)
    canary_tags: list[str] = field(default_factory=list)
    checks: list[ServiceCheck] = field(default_factory=list)
    check_restart: CheckRestart | None = None
    meta: dict[str, str] = field(default_factory=dict)
    canary_meta: dict[str, str] = field(default_factory=dict)
    tagged_addresses: dict[str, str] = field(default_factory=dict)
    namespace: str = ""
    on_update: str = ""
    provider: str = ""
    cluster: str = ""
    kind: str = ""


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

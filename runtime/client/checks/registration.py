"""From an allocation's `service` blocks to what the catalogue and the check runner take:
registrations with Nomad's IDs and addresses, and one `CheckJob` per check.

- A service's ID is Nomad's `_nomad-task-<alloc>-<owner>-<service>-<port label>`, the owner
  being the task's name, or `group-<group>` for a group service (client/serviceregistration/
  id.go, and the group service hook's `group-` prefix).
- A check's ID is Nomad's `NomadCheckID`: the hex SHA-256 of the allocation, group, and the
  check's task, name, type, port label, on_update, address mode, interval, timeout, protocol,
  path, method and tls_skip_verify.
- The address of a service (and of a check, whose port label defaults to its service's) is
  its `address` when set; else the host IP and host port of the allocation's assigned port
  with that label (`Allocation.allocated_shared.ports`); else, for a numeric label, that
  port on the node's address (Nomad accepts `port = "8080"`); with no port, the node's
  address and port 0.
- Services and checks are registered and run as interpolated (`interpolated`,
  `every_service`): `${NOMAD_JOB_NAME}`, `${NOMAD_ALLOC_INDEX}`, `${NOMAD_PORT_x}`… in names,
  tags, meta, port labels and check fields, against the task's environment (without its task
  directory variables) or, for a group service, the allocation's.
- A `provider = "consul"` service is registered in the native catalogue too (yurt runs no
  Consul), with only the checks yurt runs (http, tcp, script).
- `expected_checks` is the number of checks allocation health waits for: every check of the
  group's and its tasks' Nomad services except readiness ones (`on_update = "ignore"`);
  `no_checks` stands in for it where the client runs no service checks.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final, Protocol

import msgspec

from yurt.runtime.client.checks.probes import HttpTarget, ScriptRunner
from yurt.runtime.client.checks.runner import CheckJob, CheckRunner
from yurt.runtime.client.taskenv import alloc_env, build_env, interpolate_service, node_values
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.structs import Allocation, Node, TaskGroup
from yurt.runtime.structs.checks import (
    CHECK_MODE_HEALTHINESS,
    CHECK_MODE_READINESS,
    CheckQueryResult,
)
from yurt.runtime.structs.service import (
    CHECK_HTTP,
    CHECK_SCRIPT,
    CHECK_TCP,
    ON_UPDATE_IGNORE,
    SERVICE_PROVIDER_CONSUL,
    SERVICE_PROVIDER_NOMAD,
    Service,
    ServiceCheck,
    ServiceRegistration,
)

NODE_IP_ATTRIBUTE: Final = "unique.network.ip-address"


class Catalogue(Protocol):
    """What the client's service hooks write to (the server's `ServiceCatalogue`)."""

    async def upsert(self, regs: list[ServiceRegistration]) -> int | None: ...

    async def deregister(self, ids: list[str]) -> int | None: ...


@dataclass(frozen=True)
class ServiceDeps:
    """What every allocation's service hooks share: the catalogue and the agent's one check
    runner. The node gives addresses, NodeID and Datacenter."""

    catalogue: Catalogue
    checks: CheckRunner
    node: Node


def owner_of(group: TaskGroup, task: str | None) -> str:
    return task if task is not None else f"group-{group.name}"


def service_id(alloc_id: str, owner: str, service: Service) -> str:
    return f"_nomad-task-{alloc_id}-{owner}-{service.name}-{service.port}"


def check_id(alloc_id: str, group: str, check: ServiceCheck) -> str:
    h = hashlib.sha256()
    for part in (alloc_id, group, check.task, check.name, check.type, check.port,
                 check.on_update, check.address_mode):
        h.update(part.encode())
    h.update(struct.pack("<q", check.interval))
    h.update(struct.pack("<q", check.timeout))
    for part in (check.protocol, check.path, check.method,
                 "true" if check.tls_skip_verify else "false"):
        h.update(part.encode())
    return h.hexdigest()


def nomad_services(services: list[Service]) -> list[Service]:
    """The services the native catalogue holds: the Nomad provider's, and the Consul
    provider's too (yurt runs no Consul, so its catalogue stands in for Consul's), each of the
    latter with only the checks yurt runs (http, tcp, script)."""
    out = []
    for s in services:
        provider = s.provider or SERVICE_PROVIDER_NOMAD
        if provider == SERVICE_PROVIDER_NOMAD:
            out.append(s)
        elif provider == SERVICE_PROVIDER_CONSUL:
            out.append(msgspec.structs.replace(s, checks=[
                c for c in s.checks if c.type.lower() in (CHECK_HTTP, CHECK_TCP, CHECK_SCRIPT)]))
    return out


def group_and_task_services(group: TaskGroup) -> list[Service]:
    """Every service of the group: its own, then each task's."""
    return [*group.services, *(s for t in group.tasks for s in t.services)]


def service_lookup(alloc: Allocation, group: TaskGroup, task: str | None, node: Node
                   ) -> dict[str, str]:
    """What a service's `${…}` read: the task's environment for a task's service, the
    allocation's for a group's (Nomad's service hook and group service hook), with the node's
    `${node.…}`/`${attr.…}`/`${meta.…}`."""
    owner = next((t for t in group.tasks if t.name == task), None) if task else None
    env = (build_env(alloc, owner, task_dir=None, node=node) if owner is not None
           else alloc_env(alloc, node))
    return {**node_values(node), **env}


def interpolated(alloc: Allocation, group: TaskGroup, services: list[Service],
                 task: str | None, node: Node) -> list[Service]:
    """The Nomad services of `services` (the group's when `task` is None), interpolated as
    Nomad's client/taskenv/services.go `InterpolateService` does."""
    nomad = nomad_services(services)
    if not nomad:
        return []
    lookup = service_lookup(alloc, group, task, node)
    return [interpolate_service(s, lookup) for s in nomad]


def every_service(alloc: Allocation, group: TaskGroup, node: Node) -> list[Service]:
    """Every Nomad service of the group, interpolated: its own, then each task's."""
    return [*interpolated(alloc, group, group.services, None, node),
            *(s for t in group.tasks for s in interpolated(alloc, group, t.services, t.name,
                                                             node))]


def address_of(alloc: Allocation, node: Node, label: str,
               custom: str = "") -> tuple[str, int]:
    """(host, port) of a service or check (see the module header)."""
    node_ip = node.attributes.get(NODE_IP_ATTRIBUTE) or "127.0.0.1"
    ports = alloc.allocated_shared.ports if alloc.allocated_shared else []
    mapped = next((p for p in ports if p.label == label), None)
    if mapped is not None:
        return custom or mapped.host_ip or node_ip, mapped.value
    if label.isdigit():
        return custom or node_ip, int(label)
    return custom or node_ip, 0


def registrations(alloc: Allocation, group: TaskGroup, services: list[Service],
                  task: str | None, node: Node) -> list[ServiceRegistration]:
    owner = owner_of(group, task)
    regs = []
    for s in interpolated(alloc, group, services, task, node):
        host, port = address_of(alloc, node, s.port, s.address)
        regs.append(ServiceRegistration(
            id=service_id(alloc.id, owner, s), service_name=s.name,
            namespace=alloc.namespace, node_id=node.id, datacenter=node.datacenter,
            job_id=alloc.job_id, alloc_id=alloc.id, tags=list(s.tags), address=host,
            port=port))
    return regs


def expected_checks(alloc: Allocation) -> int:
    """The number of healthiness checks of the allocation's Nomad services (what allocation
    health waits for in `health_check = "checks"` mode)."""
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job else None
    if group is None:
        return 0
    return sum(1 for s in nomad_services(group_and_task_services(group)) for c in s.checks
               if c.on_update != ON_UPDATE_IGNORE)


def no_checks(alloc: Allocation) -> int:
    """The count of expected service checks where the client runs none: 0 (task states alone
    decide allocation health)."""
    return 0


def check_template(alloc: Allocation, group: TaskGroup, service: Service,
                   check: ServiceCheck) -> CheckQueryResult:
    """A check's `pending` result: its identity, before it first ran."""
    return CheckQueryResult(
        id=check_id(alloc.id, group.name, check),
        mode=CHECK_MODE_READINESS if check.on_update == ON_UPDATE_IGNORE
        else CHECK_MODE_HEALTHINESS,
        group=alloc.name,  # Nomad's: the allocation's name, `<job>.<group>[<index>]`
        task=check.task, service=service.name, check=check.name)


def check_job(alloc: Allocation, group: TaskGroup, service: Service, check: ServiceCheck,
              node: Node, on_result: CheckResultSink,
              script: ScriptRunner | None = None) -> CheckJob:
    template = check_template(alloc, group, service, check)
    host, port = address_of(alloc, node, check.port or service.port, service.address)
    kind = check.type.lower()
    return CheckJob(
        template=template, kind=kind, interval=check.interval / SECOND,
        timeout=check.timeout / SECOND, on_result=on_result,
        http=HttpTarget(host, port, check.path, check.method or "GET",
                        check.protocol or "http", dict(check.header), check.body)
        if kind == CHECK_HTTP else None,
        tcp=(host, port) if kind == CHECK_TCP else None,
        script=script if kind == CHECK_SCRIPT else None)


class CheckResultSink(Protocol):
    def __call__(self, result: CheckQueryResult) -> None: ...

"""Nomad's `AllocatedResources` of an allocation, built from what the allocation holds.

yurt keeps what a placement reserved per task (`Allocation.task_resources`: CPU shares, memory,
devices) and the group's ephemeral disk in the job; Nomad answers the same facts in the shape
of its `structs.AllocatedResources`: per task `Cpu`, `Memory`, `Networks`, `Devices`; the tasks'
lifecycle hooks (`TaskLifecycles`, null for a main task); the group's `Shared` disk, networks
and ports. The group's `network` gets its ports at placement (`Allocation.allocated_shared`,
server/scheduler/ports.py): `Shared.Networks` is the group's network with every port's host
value and the node's address, `Shared.Ports` the label → host port mappings; both null for a
group with no network. Per task `Networks` is null, as Nomad's is for a group network (only the long
deprecated task-level network fills it); `ReservedCores` the cores a `cores` task holds.
Derived on every answer, never stored: it cannot drift from the placement it describes.

It is the allocation's wire encoding, not an API handler: the HTTP API (runtime/api/) and the
event stream (runtime/eventstream.py `encode_record`) both answer allocations with it, so it
sits with the structs, below both.
"""

from __future__ import annotations

from typing import Any

import msgspec

from yurt.runtime.structs import Allocation, TaskGroup
from yurt.runtime.structs.network import NetworkResource


def _group(alloc: Allocation) -> TaskGroup | None:
    if alloc.job is None:
        return None
    return next((g for g in alloc.job.task_groups if g.name == alloc.task_group), None)


def allocated_resources(alloc: Allocation) -> dict[str, Any]:
    group = _group(alloc)
    tasks = {
        name: {"Cpu": {"CpuShares": r.cpu_shares, "ReservedCores": r.reserved_cores or None},
               "Memory": {"MemoryMB": r.memory_mb, "MemoryMaxMB": r.memory_max_mb},
               "Networks": None,
               "Devices": [{"Vendor": d.vendor, "Type": d.type, "Name": d.name,
                            "DeviceIDs": d.device_ids} for d in r.devices] or None}
        for name, r in alloc.task_resources.items()}
    lifecycles = {t.name: ({"Hook": t.lifecycle.hook, "Sidecar": t.lifecycle.sidecar}
                           if t.lifecycle is not None and t.lifecycle.hook else None)
                  for t in (group.tasks if group is not None else [])}
    shared = alloc.allocated_shared
    return {"Tasks": tasks, "TaskLifecycles": lifecycles,
            "Shared": {"DiskMB": group.ephemeral_disk.size if group is not None else 0,
                       "Networks": [_network_json(n) for n in shared.networks]
                       if shared is not None and shared.networks else None,
                       "Ports": msgspec.to_builtins(shared.ports)
                       if shared is not None and shared.ports else None}}


def _network_json(network: NetworkResource) -> dict[str, Any]:
    """One network as Nomad encodes its `NetworkResource`: no `Hostname` when empty, null
    port lists when empty, and `CNI` (always null here: yurt has no CNI)."""
    answer: dict[str, Any] = msgspec.to_builtins(network)
    if not answer.get("Hostname"):
        answer.pop("Hostname", None)
    for key in ("ReservedPorts", "DynamicPorts"):
        answer[key] = answer.get(key) or None
    answer["CNI"] = None
    return answer


def alloc_json(alloc: Allocation) -> dict[str, Any]:
    """A whole allocation as the API answers it (Nomad's `Allocation`): the struct's fields
    and its `AllocatedResources`. For every endpoint that answers full allocations."""
    answer: dict[str, Any] = msgspec.to_builtins(alloc)
    answer.pop("AllocatedShared", None)  # shown inside AllocatedResources.Shared
    answer["AllocatedResources"] = allocated_resources(alloc)
    return answer

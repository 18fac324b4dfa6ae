"""The group `network` block: Nomad's rules for it (stage 4) and its canonical form.

What lives here: `check_networks` (Nomad's `TaskGroup.validateNetworks` messages: duplicate
port labels, a static port reserved twice, ports and `to` out of range, `ignore_collision`
outside host mode; plus more than one network block, since Nomad only ever assigns the
first). A `bridge` or `cni/*` mode is valid, as in Nomad; placement asks for the CNI plugins
no yurt node has. And `fold_networks`, which `canonicalize` calls.

Invariants: the checks read the job and never change it. After `fold_networks` every port
with a static value is in `reserved_ports` and every other in `dynamic_ports` (as Nomad's
HCL parser splits `port` blocks, so HCL and `nomad job run -output` JSON give the same job),
every port names its host network ("default" when unset) and an unset mode is "host".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from yurt.runtime.jobspec.fields import _At, _Problems
from yurt.runtime.structs import Job, TaskGroup
from yurt.runtime.structs.network import NetworkResource, Port

#: The highest port number (Go's math.MaxUint16).
MAX_PORT: Final = 65535
HOST_MODE: Final = "host"
_DNS_LABEL: Final = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def _ports(network: NetworkResource) -> list[tuple[str, int, Port]]:
    """Every port with where it sits: (field, index, port), reserved ones first."""
    return ([("reserved_ports", i, p) for i, p in enumerate(network.reserved_ports)]
            + [("dynamic_ports", i, p) for i, p in enumerate(network.dynamic_ports)])


def _is_dns_name(name: str) -> bool:
    """Go's `dns.IsDomainName`, for the names people write: dot-separated labels of at
    most 63 characters, 255 in all."""
    labels = name.removesuffix(".").split(".")
    return len(name) <= 255 and all(_DNS_LABEL.fullmatch(label) for label in labels)


def check_networks(group: TaskGroup, at: _At, problems: _Problems) -> None:
    """Nomad's checks of one group's networks; `at` is the group."""
    labels: dict[str, str] = {}
    statics: dict[tuple[str, int], str] = {}
    for ni, network in enumerate(group.networks):
        n_at = at.item(TaskGroup, "networks", ni, str(ni))
        if ni > 0:
            problems.add(n_at, "only one network block per group is supported (Nomad assigns "
                               "the first one only)")
        # Any mode is valid, as in Nomad's `TaskGroup.Validate`: a `bridge` or `cni/*` network
        # needs CNI plugins on the node, which placement asks for (scheduler/feasible.py
        # `filter_reason`: "missing network" on a yurt node, which has none).
        if (network.hostname and "${" not in network.hostname
                and not _is_dns_name(network.hostname)):
            problems.add(n_at.field(NetworkResource, "hostname"),
                         "Hostname is not a valid DNS name")
        for attr, pi, port in _ports(network):
            p_at = n_at.item(NetworkResource, attr, pi, port.label or str(pi))
            if not port.label:
                problems.add(p_at, "a port needs a label, as in port \"http\" { … }")
            elif port.label in labels:
                problems.add(p_at, f"Port label {port.label} already in use by "
                                   f"{labels[port.label]}")
            else:
                labels[port.label] = "taskgroup network"
            if port.value != 0:
                key = (port.host_network or "default", port.value)
                if key in statics:
                    if not port.ignore_collision:
                        problems.add(p_at.field(Port, "value"),
                                     f"Static port {port.value} already reserved by "
                                     f"{statics[key]}")
                elif port.value > MAX_PORT:
                    problems.add(p_at.field(Port, "value"),
                                 f"Port {port.label} ({port.value}) cannot be greater than "
                                 f"{MAX_PORT}")
                elif port.value < 0:
                    problems.add(p_at.field(Port, "value"),
                                 f"Port {port.label} ({port.value}) cannot be less than 0")
                else:
                    statics[key] = f"taskgroup network:{port.label}"
            if port.to < -1:
                problems.add(p_at.field(Port, "to"),
                             f'Port "{port.label}" cannot be mapped to negative value '
                             f"{port.to}")
            elif port.to > MAX_PORT:
                problems.add(p_at.field(Port, "to"),
                             f'Port "{port.label}" cannot be mapped to a port ({port.to}) '
                             f"greater than {MAX_PORT}")
            if port.ignore_collision and network.mode not in ("", HOST_MODE):
                problems.add(p_at.field(Port, "ignore_collision"),
                             f'Port "{port.label}" collision may not be ignored on non-host '
                             f'network mode "{network.mode}"')


def check_job_networks(job: Job, group_at: Callable[[int], _At], problems: _Problems) -> None:
    """`check_networks` for every group of `job`."""
    for gi, group in enumerate(job.task_groups):
        if group.networks:
            check_networks(group, group_at(gi), problems)


def fold_networks(job: Job) -> None:
    """The canonical networks, in place (see the module's invariants)."""
    for group in job.task_groups:
        for network in group.networks:
            ports = network.reserved_ports + network.dynamic_ports
            for port in ports:
                port.host_network = port.host_network or "default"
            network.mode = network.mode or HOST_MODE
            network.reserved_ports = [p for p in ports if p.value > 0]
            network.dynamic_ports = [p for p in ports if p.value <= 0]

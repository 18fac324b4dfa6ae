"""Host ports for a group's `network` block: which are taken, and which a placement gets.
Pure: no I/O, no clock; randomness comes from a `random.Random` the caller may seed.

What lives here, as Nomad's `NetworkIndex` (nomad/structs/network.go) does it for one node:

- `alloc_ports` and `node_reserved_ports`: the host ports a live allocation holds (its
  `allocated_shared.ports`) and the node's reserved ports (`reserved.reserved_ports`, Nomad's
  port-range syntax); the scheduler's usage adds them up. There is no separate table: the
  assignment lives in the stored allocation, so after an agent restart the index is rebuilt
  from the live allocations and nothing is leaked or given twice.
- `assign`: the ports one allocation of a group gets. Static ports (`static = N`) must be
  free ("reserved port collision db=6379" otherwise, unless `ignore_collision`); dynamic
  ports are drawn at random from the dynamic range (20000–32000 by default) up to 20 times,
  then by a scan of the free ports in the range ("dynamic port selection failed" when none
  is left). Every port is bound on the node's address (`attr.unique.network.ip-address`),
  which is the one host network yurt has ("default").

Invariants: a port `assign` returns is never in `used`, never a static port of the same
ask, never given twice in one answer; a dynamic one is within [min_port, max_port]. Only
the group's first network is assigned, as Nomad's scheduler does.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Final

import msgspec

from yurt.runtime.structs import Allocation, Node, TaskGroup
from yurt.runtime.structs.network import (
    AllocatedSharedResources,
    NetworkResource,
    Port,
    PortMapping,
)

DEFAULT_MIN_DYNAMIC_PORT: Final = 20000
DEFAULT_MAX_DYNAMIC_PORT: Final = 32000
#: Random draws per dynamic port before the scan (Nomad's maxRandPortAttempts).
MAX_RAND_PORT_ATTEMPTS: Final = 20
#: One past the highest port (Nomad's MaxValidPort).
MAX_VALID_PORT: Final = 65536
DEFAULT_HOST_NETWORK: Final = "default"
#: What Nomad's scheduler puts before an `assign` refusal in `DimensionExhausted`.
EXHAUSTED_PREFIX: Final = "network: "
#: The node attribute that names the address ports are bound on.
IP_ATTRIBUTE: Final = "unique.network.ip-address"


def parse_port_ranges(spec: str) -> list[int]:
    """Nomad's `ParsePortRanges`: "22,80,8000-8100" → the ports, sorted and distinct.
    Raises ValueError with Nomad's wording on a malformed spec."""
    if spec == "":
        return []
    ports: set[int] = set()
    for raw in spec.split(","):
        part = raw.strip()
        bounds = part.split("-")
        if len(bounds) == 1:
            if part == "":
                raise ValueError("can't specify empty port")
            port = _port_number(part)
            if port == 0:
                raise ValueError("port must be > 0")
            if port > MAX_VALID_PORT:
                raise ValueError(f"port must be < {MAX_VALID_PORT} but found {port}")
            ports.add(port)
        elif len(bounds) == 2:
            start, end = _port_number(bounds[0]), _port_number(bounds[1])
            if end < start:
                raise ValueError(f"invalid range: starting value ({end}) less than "
                                 f"ending ({start}) value")
            if start == 0:
                raise ValueError("port must be > 0")
            if end > MAX_VALID_PORT:
                raise ValueError(f"port must be < {MAX_VALID_PORT} but found {end}")
            ports.update(range(start, end + 1))
        else:
            raise ValueError("can only parse single port numbers or port ranges "
                             "(ex. 80,100-120,150)")
    return sorted(ports)


def _port_number(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f'strconv.ParseUint: parsing "{text}": invalid syntax')
    return int(text)


def alloc_ports(alloc: Allocation) -> frozenset[int]:
    """The host ports `alloc` holds."""
    shared = alloc.allocated_shared
    if shared is None:
        return frozenset()
    return frozenset(p.value for p in shared.ports)


def node_reserved_ports(node: Node) -> frozenset[int]:
    """The node's reserved ports; a spec that does not parse reserves nothing here (the
    agent refuses such a configuration before it registers the node)."""
    return _reserved(node.reserved_resources.networks.reserved_host_ports)


@functools.lru_cache(maxsize=8)
def _reserved(spec: str) -> frozenset[int]:
    """Parsed once per spec: every placement asks, and a range may hold thousands."""
    try:
        return frozenset(parse_port_ranges(spec))
    except ValueError:
        return frozenset()


def assign(group: TaskGroup, node: Node, used: frozenset[int] | set[int], *,
           rng: random.Random | None = None
           ) -> tuple[AllocatedSharedResources | None, str]:
    """The ports one allocation of `group` gets on `node`, none of them in `used`: the
    allocation's shared resources (None for a group without a network), or why there are
    none, in Nomad's words (its `DimensionExhausted` key is "network: " + why). Dynamic
    ports come from the node's range (`NodeResources.MinDynamicPort`/`MaxDynamicPort`, Nomad's
    20000–32000 when unset)."""
    if not group.networks:
        return None, ""
    # The random module's own generator by default: seeded by whoever seeds `random`
    # (Hypothesis does, so its state machines replay).
    randrange = rng.randrange if rng is not None else random.randrange
    choice = rng.choice if rng is not None else random.choice
    min_port = node.node_resources.min_dynamic_port or DEFAULT_MIN_DYNAMIC_PORT
    max_port = node.node_resources.max_dynamic_port or DEFAULT_MAX_DYNAMIC_PORT
    ask = group.networks[0]
    host_ip = node.attributes.get(IP_ATTRIBUTE, "127.0.0.1")
    offer: list[PortMapping] = []
    taken: list[int] = []
    for port in ask.reserved_ports:
        if _host_network(port) != DEFAULT_HOST_NETWORK:
            return None, f"no addresses available for {port.host_network} network"
        if not 0 <= port.value < MAX_VALID_PORT:
            return None, f"invalid port {port.value} (out of range)"
        if not port.ignore_collision and port.value in used:
            return None, f"reserved port collision {port.label}={port.value}"
        offer.append(PortMapping(label=port.label, value=port.value, to=port.to,
                                 host_ip=host_ip, ignore_collision=port.ignore_collision))
        taken.append(port.value)
    for port in ask.dynamic_ports:
        if _host_network(port) != DEFAULT_HOST_NETWORK:
            return None, f"no addresses available for {port.host_network} network"
        value = _dynamic_port(randrange, choice, used, taken, min_port, max_port)
        if value is None:
            return None, "dynamic port selection failed"
        offer.append(PortMapping(label=port.label, value=value,
                                 to=value if port.to == -1 else port.to, host_ip=host_ip))
        taken.append(value)
    return AllocatedSharedResources(networks=[_network(ask, offer, host_ip)],
                                    ports=offer), ""


def _host_network(port: Port) -> str:
    return port.host_network or DEFAULT_HOST_NETWORK


def _dynamic_port(randrange: Callable[[int], int], choice: Callable[[list[int]], int],
                  used: frozenset[int] | set[int], taken: list[int], low: int, high: int
                  ) -> int | None:
    """One port in [low, high] neither `used` nor `taken` (the ask's static ports and the
    dynamic ones given so far): random draws first (cheap while the range is mostly free),
    then a scan of what is left, so a free port is always found if there is one."""
    def free(p: int) -> bool:
        return p not in used and p not in taken

    for _ in range(MAX_RAND_PORT_ATTEMPTS):
        candidate = low + randrange(high - low) if high > low else low
        if free(candidate):
            return candidate
    left = [p for p in range(low, min(high, MAX_VALID_PORT - 1) + 1) if free(p)]
    return choice(left) if left else None


def _network(ask: NetworkResource, offer: list[PortMapping], host_ip: str) -> NetworkResource:
    """The network as the allocation shows it (Nomad's AllocatedPortsToNetworkResouce): the
    ask with every port's host value filled in and the node's address."""
    given = {p.label: p for p in offer}

    def filled(port: Port) -> Port:
        mapping = given[port.label]
        return msgspec.structs.replace(port, value=mapping.value, to=mapping.to)

    return msgspec.structs.replace(
        ask, ip=host_ip, reserved_ports=[filled(p) for p in ask.reserved_ports],
        dynamic_ports=[filled(p) for p in ask.dynamic_ports])

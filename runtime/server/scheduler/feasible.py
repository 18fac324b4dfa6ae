"""Feasibility: may this node take one more allocation of this group? Pure: no I/O, no clock.

Nomad's scheduler/feasible: a node passes the job's constraints, then has the group's
drivers (`has_drivers`, else "missing drivers"), then the group's and its tasks' constraints
(ANDed, in that order), then `distinct_hosts`, then `distinct_property`. The
first that fails names the node's filter reason, the key of `AllocMetric.ConstraintFiltered`:
the constraint as `"<attribute> <operator> <value>"`, `distinct_hosts`, `missing property
"…"` or `distinct_property: <property>=<value> used by N allocs`.

Targets (`resolve_target`): a string not starting with `${` is a literal; `${node.unique.id}`,
`${node.datacenter}`, `${node.unique.name}`, `${node.class}`, `${node.pool}`, `${attr.*}` and
`${meta.*}` read the node; anything else is "not found". Operators (`check_constraint`) are
Nomad's checkConstraint, value for value: `<`…`>=` compare as int64, else as float64, else
lexically; `version`/`semver` are runtime/lib/goversion.py; `set_contains*` split on commas and
trim spaces.

`regexp` is Go's regexp, RE2 (runtime/lib/goregexp.py), as in Nomad: the pattern comes from the
job, and a backtracking engine would let one constraint (`(a+)+$` against a long value) stall
the scheduler. A pattern that does not compile never matches, as in Nomad, so the node is
filtered with the constraint as its reason (validation refuses such a pattern at registration;
this is the path of one taken from `${meta.*}` or stored before).

A match is bounded as Nomad's is not (runtime/lib/goregexp.py `compile_regexp` and
`regexp_refusal`: the pattern's length and program memory, the value's length, the work of one
match): one past a bound is not run, the constraint is not met, and the node's filter reason
says why.

Compiled patterns are kept in a cache of `_CACHE_SIZE` entries, as Nomad keeps them per
evaluation. A program is at most goregexp's `MAX_PROGRAM_MEMORY` plus its parse tree (measured
worst: a 4 KB case-folded literal, ~640 KiB retained), so the cache holds at most ~40 MiB.

Everything else compared here is job text too, so no Python `re` pattern that could backtrack
on it is used: numbers are recognised by RE2, and integers longer than int64 refused before
`int()` sees them (Python refuses past 4300 digits, with an exception).

Affinities and spreads only rank nodes: affinities are scored in binpack.py; spreads
are not scored yet.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Final

import msgspec

from yurt.runtime.lib.goregexp import (
    MAX_TEXT,
    GoRegexp,
    GoRegexpError,
    compile_regexp,
    regexp_refusal,
)
from yurt.runtime.lib.goversion import go_int, satisfies
from yurt.runtime.structs import Allocation, AllocMetric, Job, Node, NodeDeviceResource, TaskGroup
from yurt.runtime.structs.constraint import (
    CONSTRAINT_DISTINCT_HOSTS,
    CONSTRAINT_DISTINCT_PROPERTY,
    CONSTRAINT_REGEX,
    CONSTRAINT_SEMVER,
    Constraint,
)
from yurt.runtime.structs.hostvolume import HostVolume, claimable
from yurt.runtime.structs.hostvolumes import host_volume_source
from yurt.runtime.structs.volume import VOLUME_TYPE_HOST

#: The filter reason of a node lacking one of the group's drivers (Nomad's
#: FilterConstraintDrivers, scheduler/feasible/feasible.go).
FILTER_MISSING_DRIVERS: Final = "missing drivers"

#: What Go's strconv.ParseBool takes as true.
_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})

#: Compiled patterns kept: a job has a handful; the bound is on memory (see above).
_CACHE_SIZE: Final = 64

_FLOAT: Final = GoRegexp(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_FLOAT_SPECIAL: Final = GoRegexp(r"(?i)[+-]?(inf|infinity|nan)")


def resolve_target(target: str, node: Node) -> tuple[str, bool]:
    """Nomad's resolveTarget: the target's value on `node`, and whether it exists."""
    if not target.startswith("${"):
        return target, True
    exact = {"${node.unique.id}": node.id, "${node.datacenter}": node.datacenter,
             "${node.unique.name}": node.name, "${node.class}": node.node_class,
             "${node.pool}": node.node_pool}
    if target in exact:
        return exact[target], True
    for prefix, values in (("${attr.", node.attributes), ("${meta.", node.meta)):
        if target.startswith(prefix):
            key = target.removeprefix(prefix).removesuffix("}")
            return (values[key], True) if key in values else ("", False)
    return "", False


def _go_float(text: str) -> float | None:
    """Go's strconv.ParseFloat(text, 64) for decimal and special forms, or None (an
    overflow is an error in Go, so it is None here too)."""
    if _FLOAT_SPECIAL.fullmatch(text) is not None:
        return float(text)
    if _FLOAT.fullmatch(text) is None:
        return None
    value = float(text)
    return None if math.isinf(value) else value


_ORDER: Final = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def _compare(op: str, left: float | str, right: float | str) -> bool:
    compare = _ORDER.get(op)
    return compare is not None and bool(compare(left, right))


def check_order(op: str, left: str | None, right: str | None) -> bool:
    """Nomad's checkOrder: as integers if both parse, else as floats, else lexically."""
    if left is None or right is None:
        return False
    li, ri = go_int(left), go_int(right)
    if li is not None and ri is not None:
        return _compare(op, li, ri)
    lf, rf = _go_float(left), _go_float(right)
    if lf is not None and rf is not None:
        return _compare(op, lf, rf)
    return _compare(op, left, right)


@lru_cache(maxsize=_CACHE_SIZE)
def _regexp(pattern: str) -> GoRegexp | None:
    try:
        return compile_regexp(pattern)
    except GoRegexpError:
        return None


def check_regexp(value: str | None, pattern: str | None) -> bool:
    """Nomad's checkRegexpMatch: the pattern matches anywhere in the value (within the
    bounds above: a refused match is no match)."""
    if value is None or pattern is None or len(value) > MAX_TEXT:
        return False
    compiled = _regexp(pattern)
    return (compiled is not None and regexp_refusal(value, compiled) is None
            and compiled.search(value))


def _members(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


def set_contains_all(left: str | None, right: str | None) -> bool:
    if left is None or right is None:
        return False
    have = set(_members(left))
    return all(r in have for r in _members(right))


def set_contains_any(left: str | None, right: str | None) -> bool:
    if left is None or right is None:
        return False
    have = set(_members(left))
    return any(r in have for r in _members(right))


def check_constraint(operand: str, left: str | None, right: str | None,
                     left_found: bool, right_found: bool) -> bool:
    """Nomad's checkConstraint. `distinct_*` pass here: they are checked against the
    allocations (`filter_reason`), not against the node's values."""
    both = left_found and right_found
    match operand:
        case "distinct_hosts" | "distinct_property":
            return True
        case "=" | "==" | "is":
            return both and left == right
        case "!=" | "not":
            return left != right
        case "<" | "<=" | ">" | ">=":
            return both and check_order(operand, left, right)
        case "is_set":
            return left_found
        case "is_not_set":
            return not left_found
        case "version" | "semver":
            return (both and left is not None and right is not None
                    and satisfies(left, right, semver=operand == CONSTRAINT_SEMVER))
        case "regexp":
            return both and check_regexp(left, right)
        case "set_contains" | "set_contains_all":
            return both and set_contains_all(left, right)
        case "set_contains_any":
            return both and set_contains_any(left, right)
    return False


def meets(constraint: Constraint, node: Node) -> bool:
    """Whether `node` satisfies one constraint (Nomad's meetsConstraint)."""
    left, left_found = resolve_target(constraint.attribute, node)
    right, right_found = resolve_target(constraint.value, node)
    return check_constraint(constraint.operator, left, right, left_found, right_found)


def _filter_text(constraint: Constraint, node: Node) -> str:
    """The filter reason of a constraint `node` does not meet: the constraint itself, as in
    Nomad, with why a regexp was not even run (a bound Nomad does not have) appended."""
    text = str(constraint)
    if constraint.operator != CONSTRAINT_REGEX:
        return text
    value, value_found = resolve_target(constraint.attribute, node)
    pattern, pattern_found = resolve_target(constraint.value, node)
    if not (value_found and pattern_found) or (compiled := _regexp(pattern)) is None:
        return text
    why = regexp_refusal(value, compiled)
    return text if why is None else f"{text} ({why})"


def has_drivers(node: Node, group: TaskGroup) -> bool:
    """Nomad's DriverChecker `hasDrivers` (scheduler/feasible/feasible.go): every driver of
    the group's tasks is on `node`, detected and healthy; a driver the node does not report
    in `Drivers` counts if its `driver.<name>` attribute parses as a true Go bool.

    A node that reports no driver at all (no `Drivers`, no `driver.*` attribute) passes: it
    has not fingerprinted (every yurt agent registers after its first driver fingerprint,
    agent/agent.py, and simulated nodes report theirs), where Nomad would filter it."""
    if not node.drivers and not any(k.startswith("driver.") for k in node.attributes):
        return True
    for driver in {t.driver for t in group.tasks}:
        info = node.drivers.get(driver)
        if info is not None:
            if not (info.detected and info.healthy):
                return False
            continue
        if node.attributes.get(f"driver.{driver}") not in _GO_TRUE:
            return False
    return True


#: scheduler/feasible/feasible.go `FilterConstraintHostVolumes`.
FILTER_HOST_VOLUMES: Final = "missing compatible host volumes"


def unplaceable_reason(group: TaskGroup) -> str | None:
    """Why no yurt node can take `group` whatever its state, or None. yurt's nodes offer no
    CSI volumes, CSI plugins or secret providers, so a group asking for one is filtered as
    Nomad's checkers filter a node lacking it (feasible.go `CSIVolumeChecker`: "missing CSI
    Volume <id>"). Host volumes are the node's (`host_volume_reason`); cores are reserved at
    placement (placement.py `_assign_cores`)."""
    for vol in group.volumes.values():
        if vol.type != VOLUME_TYPE_HOST:
            return f"missing CSI Volume {vol.source}"
    for task in group.tasks:
        if task.csi_plugin_config:
            return "missing CSI plugin"
        if task.secrets:
            return "missing secrets provider"
    return None


#: A dynamic host volume by ID, as the server's state has it (None: no such volume).
VolumeLookup = Callable[[str], HostVolume | None]


def host_volume_reason(group: TaskGroup, node: Node, alloc_name: str = "",
                       namespace: str = "default",
                       lookup: VolumeLookup | None = None) -> str | None:
    """Nomad's HostVolumeChecker (scheduler/feasible/feasible.go `nodeIsFeasibleForRequest`):
    every host volume request names one of the node's `HostVolumes`. A static one (no ID)
    is not asked `sticky` (dynamic volumes only), nor read-write when it is read-only; a
    dynamic one (its ID) must be, in the state `lookup` reads, of the job's `namespace`,
    ready and offer the requested capability (structs/hostvolume.py `claimable`; no
    `lookup`: none is). Else `FILTER_HOST_VOLUMES`. `alloc_name` is the allocation's name,
    for `per_alloc` sources (structs/hostvolumes.py: the client mounts the volume the same
    rule names). `sticky` on a dynamic volume is met by any volume of the name: yurt keeps no
    claims, and one node offers one volume per name."""
    for vol in group.volumes.values():
        if vol.type != VOLUME_TYPE_HOST:
            continue
        offered = node.host_volumes.get(host_volume_source(vol, alloc_name))
        if offered is None:
            return FILTER_HOST_VOLUMES
        if offered.id:
            dynamic = lookup(offered.id) if lookup is not None else None
            if dynamic is None or not claimable(dynamic, namespace, vol.access_mode,
                                                vol.attachment_mode, vol.read_only):
                return FILTER_HOST_VOLUMES
        elif vol.sticky or (offered.read_only and not vol.read_only):
            return FILTER_HOST_VOLUMES
    return None


def resolve_device_target(target: str, device: NodeDeviceResource) -> tuple[str, bool]:
    """Nomad's resolveDeviceTarget: a literal, or `${device.ids}`, `${device.model}`,
    `${device.vendor}`, `${device.type}`, `${device.attr.<name>}` of `device`. Attributes are
    compared as the strings the node reports (Nomad parses units, e.g. "11 GiB")."""
    if not target.startswith("${"):
        return target, True
    exact = {"${device.ids}": ",".join(i.id for i in device.instances),
             "${device.model}": device.name, "${device.vendor}": device.vendor,
             "${device.type}": device.type}
    if target in exact:
        return exact[target], True
    if target.startswith("${device.attr."):
        key = target.removeprefix("${device.attr.").removesuffix("}")
        return (device.attributes[key], True) if key in device.attributes else ("", False)
    return "", False


def device_meets(constraints: Iterable[Constraint], device: NodeDeviceResource) -> bool:
    """Whether `device` meets every constraint of a device request (Nomad's
    nodeDeviceMatches, past the name)."""
    for c in constraints:
        left, left_found = resolve_device_target(c.attribute, device)
        right, right_found = resolve_device_target(c.value, device)
        if not check_constraint(c.operator, left, right, left_found, right_found):
            return False
    return True


def group_constraints(group: TaskGroup) -> list[Constraint]:
    """The group's constraints, then each task's (Nomad's taskGroupConstraints)."""
    return [*group.constraints, *(c for t in group.tasks for c in t.constraints)]


def _distinct_hosts(constraints: Sequence[Constraint]) -> bool:
    """Nomad's hasDistinctHostsConstraint: the first distinct_hosts constraint decides; an
    empty or unparsable value counts as true."""
    for c in constraints:
        if c.operator == CONSTRAINT_DISTINCT_HOSTS:
            return c.value not in ("0", "f", "F", "FALSE", "false", "False")
    return False


def _allowed(constraint: Constraint) -> int:
    """A distinct_property's allowed count (validation made it a positive integer)."""
    value = constraint.value  # at most 20 digits: int() refuses past 4300, with an exception
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 20 else 1


def filter_reason(job: Job, group: TaskGroup, node: Node, proposed: Iterable[Allocation],
                  node_of: Callable[[str], Node | None] | None = None,
                  alloc_name: str = "", volumes: VolumeLookup | None = None) -> str | None:
    """Why `node` cannot take one more allocation of `group`, or None if it can.

    `proposed` are the allocations the cluster would hold once the plan so far is applied
    (live ones not being stopped, and the plan's placements); only the job's own matter, and
    they are read only when a distinct_* constraint asks (a generator costs nothing else).
    With `node_of` (a node by ID), `distinct_hosts` counts those on `node` and
    `distinct_property` those on nodes with the same value of the property, as Nomad's
    propertySet does; without it every allocation counts as on `node` (one node).
    `alloc_name`: the allocation's name, for `per_alloc` host volumes, and `volumes` the
    dynamic host volumes by ID (`host_volume_reason`).
    """
    unplaceable = unplaceable_reason(group)
    if unplaceable is not None:
        return unplaceable
    for constraint in job.constraints:
        if not meets(constraint, node):
            return _filter_text(constraint, node)
    if not has_drivers(node, group):
        return FILTER_MISSING_DRIVERS
    for constraint in group_constraints(group):
        if not meets(constraint, node):
            return _filter_text(constraint, node)
    if any(n.mode not in ("", "host") for n in group.networks):
        # Nomad's scheduler/feasible.go `NetworkChecker`: a bridge or CNI network needs the
        # node's CNI plugins, which no yurt node has.
        return "missing network"
    # Nomad's stack checks host volumes among the "available" checkers, after the group's
    # drivers, constraints and network (scheduler/feasible/stack.go `NewGenericStack`).
    missing = host_volume_reason(group, node, alloc_name, job.namespace, volumes)
    if missing is not None:
        return missing
    job_hosts, group_hosts = _distinct_hosts(job.constraints), _distinct_hosts(group.constraints)
    scoped = [(c, "") for c in job.constraints if c.operator == CONSTRAINT_DISTINCT_PROPERTY]
    scoped += [(c, group.name) for c in group.constraints
               if c.operator == CONSTRAINT_DISTINCT_PROPERTY]
    if not (job_hosts or group_hosts or scoped):
        return None
    mine = [a for a in proposed if a.job_id == job.id and a.namespace == job.namespace]
    here = mine if node_of is None else [a for a in mine if a.node_id == node.id]
    if (job_hosts and here) or (group_hosts and any(a.task_group == group.name for a in here)):
        return CONSTRAINT_DISTINCT_HOSTS
    for constraint, group_name in scoped:
        value, found = resolve_target(constraint.attribute, node)
        if not found:
            return f'missing property "{constraint.attribute}"'
        used = sum(1 for a in mine if (not group_name or a.task_group == group_name)
                   and _same_value(constraint.attribute, value, a, node, node_of))
        if used >= _allowed(constraint):
            return f"distinct_property: {constraint.attribute}={value} used by {used} allocs"
    return None


def _same_value(attribute: str, value: str, alloc: Allocation, node: Node,
                node_of: Callable[[str], Node | None] | None) -> bool:
    """Whether `alloc` runs where `attribute` has `value` (on `node` itself without
    `node_of`)."""
    if node_of is None or alloc.node_id == node.id:
        return True
    other = node_of(alloc.node_id)
    if other is None:
        return False
    theirs, found = resolve_target(attribute, other)
    return found and theirs == value


def without_placement(group: TaskGroup) -> TaskGroup:
    """`group` with no constraints, affinities or spreads, its tasks' included: a change to
    those alone does not replace an allocation (Nomad updates it in place when the node
    still fits, which the scheduler checks with `filter_reason`)."""
    return msgspec.structs.replace(
        group, constraints=[], affinities=[], spreads=[],
        tasks=[msgspec.structs.replace(t, constraints=[], affinities=[]) for t in group.tasks])


def filtered_metric(node: Node, reason: str) -> AllocMetric:
    """Nomad's AllocMetric for a group whose one node was filtered out for `reason`."""
    return AllocMetric(nodes_evaluated=1, nodes_filtered=1, nodes_in_pool=1,
                       nodes_available={node.datacenter: 1}, constraint_filtered={reason: 1})

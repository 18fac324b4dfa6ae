"""Placement: which node takes one allocation of a group, with which resources, evicting whom.

Nomad's scheduler stack (`scheduler/stack.go`, `rank.go`, `preemption.go`), used by both
schedulers: the generic one (generic.py) asks `Placer.select` for the best of all candidate
nodes, the system one (system.py) for one given node at a time.

- **Usage** (`Usage`): what live allocations hold on a node: CPU MHz, memory MB, device
  instance IDs, host ports, reserved CPU cores. `Placer` starts from the live allocations of
  every node and follows the plan as it is made (`commit`: the placement holds its node, the
  allocation it replaces frees its own).
- **Fit** (`fit`): the node is eligible and not draining (drain.py), its CPU and memory less
  the usage fit the group, its free host ports take the group's network (ports.py), it has
  enough healthy unused device instances (`assign_devices`) and, for tasks asking for
  `cores`, enough of its `TotalCpuCores` no other task holds (`_assign_cores`, the lowest
  free IDs; Nomad's "cores" dimension when short). Cores are held exclusively among the
  tasks that reserve them; their MHz are not taken from the shared CPU.
- **Select** (`Placer.select`): feasibility (feasible.py), then fit, then rank (binpack.py:
  fitness, job anti-affinity, rescheduling penalty, affinities, spreads); where nothing fits,
  preemption (`_preemption`: allocations of jobs at least `PREEMPTION_DELTA` priority lower,
  lowest first, as few as possible) on the first full node where it makes room. What it
  finds is a `Choice`, or an `AllocMetric` saying why not, in Nomad's words.

Pure: no I/O, no clock; a `Placer` lives for one pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from yurt.runtime.server.scheduler import binpack, ports
from yurt.runtime.server.scheduler.binpack import Candidates
from yurt.runtime.server.scheduler.drain import node_refusal
from yurt.runtime.server.scheduler.feasible import VolumeLookup, device_meets, filter_reason
from yurt.runtime.server.scheduler.ports import alloc_ports
from yurt.runtime.structs import (
    AllocatedDevice,
    AllocatedTaskResources,
    Allocation,
    AllocMetric,
    Job,
    Node,
    TaskGroup,
)
from yurt.runtime.structs.constraint import CONSTRAINT_DISTINCT_PROPERTY
from yurt.runtime.structs.network import AllocatedSharedResources

#: A job may evict allocations of jobs at least this much lower in priority.
PREEMPTION_DELTA = 10


@dataclass(frozen=True)
class Usage:
    """What live allocations hold: CPU MHz, memory MB, device instance IDs, host ports,
    reserved core IDs."""

    cpu: int
    mem: int
    devices: frozenset[str]
    ports: frozenset[int] = frozenset()
    cores: frozenset[int] = frozenset()

    def plus(self, alloc: Allocation) -> Usage:
        c, m = alloc_needs(alloc)
        return Usage(self.cpu + c, self.mem + m, self.devices | _device_ids(alloc),
                     self.ports | alloc_ports(alloc), self.cores | _core_ids(alloc))

    def without(self, *allocs: Allocation) -> Usage:
        cpu, mem, devices, held = self.cpu, self.mem, set(self.devices), set(self.ports)
        cores = set(self.cores)
        for alloc in allocs:
            c, m = alloc_needs(alloc)
            cpu, mem = cpu - c, mem - m
            devices -= _device_ids(alloc)
            held -= alloc_ports(alloc)
            cores -= _core_ids(alloc)
        return Usage(cpu, mem, frozenset(devices), frozenset(held), frozenset(cores))


def _device_ids(alloc: Allocation) -> frozenset[str]:
    return frozenset(i for res in alloc.task_resources.values() for d in res.devices
                     for i in d.device_ids)


def _core_ids(alloc: Allocation) -> frozenset[int]:
    return frozenset(c for res in alloc.task_resources.values() for c in res.reserved_cores)


def _assign_cores(group: TaskGroup, node: Node, used: frozenset[int],
                  resources: dict[str, AllocatedTaskResources]) -> str:
    """The lowest free core IDs for every task of `group` asking for `cores`, written into
    `resources`; or why there are not enough (Nomad's "cores" dimension)."""
    total = node.node_resources.cpu.total_cpu_cores
    free = [c for c in range(total) if c not in used]
    for task in group.tasks:
        wanted = task.resources.cores
        if wanted <= 0:
            continue
        if len(free) < wanted:
            return (f"Resources exhausted: cores (task {task.name!r} needs {wanted}, "
                    f"{len(free)} of {total} free)")
        resources[task.name].reserved_cores, free = free[:wanted], free[wanted:]
    return ""


def group_needs(group: TaskGroup) -> tuple[int, int]:
    """(CPU MHz, memory MB) one allocation of `group` asks for."""
    return (sum(t.resources.cpu for t in group.tasks),
            sum(t.resources.memory for t in group.tasks))


def alloc_needs(alloc: Allocation) -> tuple[int, int]:
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    return group_needs(group) if group is not None else (0, 0)


def assign_devices(group: TaskGroup, node: Node, used: frozenset[str] | set[str]
                   ) -> tuple[dict[str, AllocatedTaskResources], str]:
    """Healthy, unused device instances for every task of one allocation of `group`:
    the per-task allocated resources, or an empty dict and why it cannot be placed."""
    taken: set[str] = set()
    resources: dict[str, AllocatedTaskResources] = {}
    for task in group.tasks:
        allocated = AllocatedTaskResources(cpu_shares=task.resources.cpu,
                                           memory_mb=task.resources.memory,
                                           memory_max_mb=task.resources.memory_max)
        for request in task.resources.devices:
            found = False
            for device in node.node_resources.devices:
                if not (device.matches(request.name)
                        and device_meets(request.constraints, device)):
                    continue
                free = [i.id for i in device.instances
                        if i.healthy and i.id not in used and i.id not in taken]
                if len(free) >= request.count:
                    ids = free[:request.count]
                    taken.update(ids)
                    allocated.devices.append(AllocatedDevice(
                        vendor=device.vendor, type=device.type, name=device.name,
                        device_ids=ids))
                    found = True
                    break
            if not found:
                healthy_free = sum(1 for d in node.node_resources.devices
                                   if d.matches(request.name)
                                   and device_meets(request.constraints, d) for i in d.instances
                                   if i.healthy and i.id not in used and i.id not in taken)
                return {}, (f"Resources exhausted: devices (task {task.name!r} needs "
                            f"{request.count} × {request.name}, {healthy_free} healthy and "
                            "free)")
        resources[task.name] = allocated
    return resources, ""


def try_place(node: Node, group: TaskGroup, usage: Usage
              ) -> tuple[dict[str, AllocatedTaskResources], str]:
    """Resources for one allocation of `group` on top of `usage`, or why it does not fit."""
    resources, _, why = fit(node, group, usage)
    return resources, why


def fit(node: Node, group: TaskGroup, usage: Usage
        ) -> tuple[dict[str, AllocatedTaskResources], AllocatedSharedResources | None, str]:
    """`try_place`, with the group's ports too (ports.py): the per-task resources,
    the shared ones, or why it does not fit."""
    if refusal := node_refusal(node):  # ineligible or draining (drain.py)
        return {}, None, refusal
    cpu, mem = group_needs(group)
    total_cpu = node.node_resources.cpu.cpu_shares
    total_mem = node.node_resources.memory.memory_mb
    if total_cpu and usage.cpu + cpu > total_cpu:
        return {}, None, (f"Resources exhausted: cpu (needs {cpu} MHz, "
                          f"{max(total_cpu - usage.cpu, 0)} of {total_cpu} MHz free)")
    if total_mem and usage.mem + mem > total_mem:
        return {}, None, (f"Resources exhausted: memory (needs {mem} MB, "
                          f"{max(total_mem - usage.mem, 0)} of {total_mem} MB free)")
    shared, why = ports.assign(group, node, usage.ports | ports.node_reserved_ports(node))
    if why:
        return {}, None, f"{ports.EXHAUSTED_PREFIX}{why}"
    resources, why = assign_devices(group, node, usage.devices)
    if not why:
        why = _assign_cores(group, node, usage.cores, resources)
    return (resources if not why else {}), shared if not why else None, why


def _dimension(why: str) -> str:
    """Nomad's DimensionExhausted key for one of `try_place`'s reasons."""
    for dim in ("cpu", "memory", "devices", "cores"):
        if why.startswith(f"Resources exhausted: {dim}"):
            return dim
    return why  # as Nomad's "network: reserved port collision db=6379"


def _preemption(node: Node, on_node: Iterable[Allocation], job: Job, group: TaskGroup,
                usage: Usage, protected: set[str]) -> list[Allocation]:
    """Allocations on `node` (`on_node`, its live ones) to evict so one allocation of `group`
    fits on top of `usage`: only of jobs at least PREEMPTION_DELTA priority lower, lowest
    priority first, and none that does not help (each chosen one is dropped again if the rest
    suffice). Empty if nothing would."""
    candidates = sorted(
        (a for a in on_node
         if a.id not in protected and a.job is not None and a.job_id != job.id
         and a.job.priority + PREEMPTION_DELTA <= job.priority),
        key=lambda a: (a.job.priority if a.job else 0, -a.create_index))
    chosen: list[Allocation] = []
    trial = usage
    for candidate in candidates:
        chosen.append(candidate)
        trial = trial.without(candidate)
        if not try_place(node, group, trial)[1]:
            break
    else:
        return []
    for candidate in list(reversed(chosen[:-1])):  # as few as possible
        rest = [c for c in chosen if c is not candidate]
        if not try_place(node, group, usage.without(*rest))[1]:
            chosen = rest
    return chosen


@dataclass
class Choice:
    """Where one allocation goes: the node, its resources there, whom it evicts, and the
    node's usage with the replaced allocation and the victims freed (before it is added)."""

    node: Node
    task_resources: dict[str, AllocatedTaskResources]
    shared: AllocatedSharedResources | None
    victims: list[Allocation]
    trial: Usage


@dataclass
class Selection:
    choice: Choice | None
    why: str = ""  # why nothing fits, in the one-node wording when there is one node
    metric: AllocMetric | None = None
    preemption_failed: bool = False


@dataclass
class _Verdict:
    """One node's answer for one allocation of a group: filtered (`reason`), exhausted
    (`why`), or a `choice` and its `score` once known (unless other nodes' placements
    move it: spreads)."""

    reason: str | None = None
    why: str = ""
    choice: Choice | None = None
    score: float | None = None


class Placer:
    """Per-node usage over one pass, and node selection (Nomad's stack: feasibility, fit,
    rank, then preemption where nothing fits).

    Usage starts from the live allocations on each node and follows the plan: placements
    add, replaced allocations and victims free. The job's own allocations (`mine`, what
    distinct_* constraints and the anti-affinity count) start from its live ones that stay
    and gain the plan's placements. A placement changes only its node (and the node of the
    allocation it replaces), so each node's verdict for a group is kept until then: placing
    N allocations over M nodes costs about N + M node evaluations, not N × M."""

    def __init__(self, job: Job, cands: Candidates, live: Iterable[Allocation],
                 mine: Iterable[Allocation], algorithm: str, nodes: dict[str, Node],
                 volumes: VolumeLookup | None = None) -> None:
        self.job, self.cands, self.algorithm, self.nodes = job, cands, algorithm, nodes
        self.volumes = volumes  # the dynamic host volumes, by ID (feasible.py)
        self.usage: dict[str, Usage] = {}
        self.on_node: dict[str, list[Allocation]] = {}
        for alloc in live:
            self.usage[alloc.node_id] = self._usage(alloc.node_id).plus(alloc)
            self.on_node.setdefault(alloc.node_id, []).append(alloc)
        self.mine: list[Allocation] = []
        self.mine_ids: set[str] = set()
        self.collisions: dict[tuple[str, str], int] = {}  # (node, group) → the job's allocs
        for alloc in mine:
            self._add_mine(alloc)
        self._verdicts: dict[str, dict[str, _Verdict]] = {}  # group → node → verdict

    def _add_mine(self, alloc: Allocation) -> None:
        self.mine.append(alloc)
        self.mine_ids.add(alloc.id)
        key = (alloc.node_id, alloc.task_group)
        self.collisions[key] = self.collisions.get(key, 0) + 1

    def _usage(self, node_id: str) -> Usage:
        return self.usage.get(node_id, Usage(0, 0, frozenset()))

    def trial(self, node: Node, prev: Allocation | None) -> Usage:
        """The node's usage, less `prev` (the allocation being replaced) if it is there."""
        usage = self._usage(node.id)
        return usage.without(prev) if prev is not None and prev.node_id == node.id else usage

    def select(self, group: TaskGroup, prev: Allocation | None = None, *,
               penalized: frozenset[str] = frozenset(), preempt: bool = False,
               protected: set[str] | None = None, only: Node | None = None,
               name: str = "") -> Selection:
        """The best node for one allocation of `group`, replacing `prev` if any.
        `penalized`: nodes a failed allocation being replaced ran on (Nomad's rescheduling
        penalty); `only`: the one candidate to try (the system scheduler's); `name`: the
        allocation's name, which picks `per_alloc` host volumes (feasible.py
        `host_volume_source`)."""
        evaluated = filtered = exhausted = 0
        constraint_filtered: dict[str, int] = {}
        class_filtered: dict[str, int] = {}
        dimensions: dict[str, int] = {}
        first_filtered = first_exhausted = ""
        best: _Verdict | None = None
        full: list[Node] = []
        ready = self.cands.ready if only is None else [only]
        # Verdicts are reused unless this placement is special for some node: it replaces
        # an allocation there, or its feasibility counts allocations across nodes
        # (distinct_property), or depends on its name (per_alloc volumes).
        reuse = prev is None and not any(
            c.operator == CONSTRAINT_DISTINCT_PROPERTY
            for c in (*self.job.constraints, *group.constraints)) and not any(
            v.per_alloc for v in group.volumes.values())
        verdicts = self._verdicts.setdefault(group.name, {}) if reuse else {}
        spreads = [*group.spreads, *self.job.spreads]
        spread_use = binpack.spread_counts(
            spreads, (a for a in self.mine if a.task_group == group.name and a is not prev),
            self.nodes.get) if spreads else []
        best_score = 0.0
        # Without spreads or penalties a node's score moves only with its own placements.
        fixed_score = reuse and not spreads and not penalized
        for node in ready:
            evaluated += 1
            verdict = verdicts.get(node.id)
            if verdict is None:
                verdict = self._evaluate(node, group, prev, name)
                if reuse:
                    verdicts[node.id] = verdict
            if verdict.reason is not None:  # constraints and distinct_*: no eviction helps
                filtered += 1
                constraint_filtered[verdict.reason] = (
                    constraint_filtered.get(verdict.reason, 0) + 1)
                if node.node_class:  # Nomad's AllocMetric.FilterNode
                    class_filtered[node.node_class] = class_filtered.get(node.node_class, 0) + 1
                first_filtered = first_filtered or verdict.reason
            elif verdict.choice is None:
                exhausted += 1
                dim = _dimension(verdict.why)
                dimensions[dim] = dimensions.get(dim, 0) + 1
                first_exhausted = first_exhausted or verdict.why
                full.append(node)
            else:
                score = verdict.score if fixed_score else None
                if score is None:
                    score = self._score(node, group, verdict.choice.trial, prev, penalized,
                                        spread_use)
                    if fixed_score:
                        verdict.score = score
                if best is None or score > best_score:  # ties: the first node
                    best, best_score = verdict, score
        if best is not None and best.choice is not None:
            return Selection(best.choice)
        if preempt:
            for node in full:
                trial = self.trial(node, prev)
                victims = _preemption(node, self.on_node.get(node.id, ()), self.job, group,
                                      trial, protected or set())
                if not victims:
                    continue
                freed = trial.without(*victims)
                task_resources, shared, why = fit(node, group, freed)
                if not why:
                    return Selection(Choice(node, task_resources, shared, victims, freed))
        if not ready:
            # No candidate at all (ineligible, draining, down, no node in the job's
            # datacenters): nothing evaluated, as Nomad's ready-node list leaves them out.
            why = self.cands.refusal or (
                "no node is ready in datacenters " + ", ".join(self.job.datacenters))
        elif first_exhausted:
            why = first_exhausted
        else:
            why = (f'Constraint "{first_filtered}" filtered '
                   f"{constraint_filtered[first_filtered]} nodes")
        metric = AllocMetric(
            nodes_evaluated=evaluated, nodes_filtered=filtered, nodes_exhausted=exhausted,
            nodes_in_pool=self.cands.in_pool, nodes_available=dict(self.cands.available),
            constraint_filtered=constraint_filtered or None,
            class_filtered=class_filtered or None, node_pool=self.job.node_pool or "default",
            dimension_exhausted=dimensions or None)
        return Selection(None, why, metric, preemption_failed=preempt and bool(full))

    def _evaluate(self, node: Node, group: TaskGroup, prev: Allocation | None,
                  name: str = "") -> _Verdict:
        """Whether `node` passes the constraints and fits one allocation of `group`."""
        reason = filter_reason(self.job, group, node, (a for a in self.mine if a is not prev),
                               self.nodes.get, name, self.volumes)
        if reason is not None:
            return _Verdict(reason=reason)
        trial = self.trial(node, prev)
        task_resources, shared, why = fit(node, group, trial)
        if why:
            return _Verdict(why=why)
        return _Verdict(choice=Choice(node, task_resources, shared, [], trial))

    def _score(self, node: Node, group: TaskGroup, trial: Usage, prev: Allocation | None,
               penalized: frozenset[str], spread_use: list[dict[str, int]]) -> float:
        """Nomad's final score of a node that fits (binpack.py)."""
        cpu, mem = group_needs(group)
        collisions = self.collisions.get((node.id, group.name), 0) - (
            1 if prev is not None and prev.node_id == node.id
            and prev.task_group == group.name and prev.id in self.mine_ids else 0)
        return binpack.final_score((
            binpack.fitness(node, trial.cpu + cpu, trial.mem + mem, self.algorithm),
            binpack.anti_affinity(collisions, group.count),
            -1.0 if node.id in penalized else None,
            binpack.affinity_score(
                [*self.job.affinities, *group.affinities,
                 *(a for t in group.tasks for a in t.affinities)], node),
            binpack.spread_score([*group.spreads, *self.job.spreads], group.count, node,
                                 spread_use)))

    def commit(self, choice: Choice, placed: Allocation, prev: Allocation | None) -> None:
        """`placed` is in the plan: its node holds it, and `prev` (replaced) is freed."""
        touched = {choice.node.id}
        if prev is not None and prev.node_id != choice.node.id:
            self.release(prev)
            touched.add(prev.node_id)
        self.usage[choice.node.id] = choice.trial.plus(placed)
        for victim in choice.victims:
            self.on_node[choice.node.id].remove(victim)
        self._add_mine(placed)
        for verdicts in self._verdicts.values():
            for node_id in touched:
                verdicts.pop(node_id, None)

    def release(self, alloc: Allocation) -> None:
        if alloc.node_id in self.usage:
            self.usage[alloc.node_id] = self.usage[alloc.node_id].without(alloc)

"""The scheduler: one evaluation in, one plan out. Pure: no I/O, no clock, no storage.

It reads what it needs through `SchedulerState` (the job's allocations, the live allocations
that hold resources, every node the server knows, the job's blocked evaluations) and returns a
`Plan`: the allocations to place, to stop (evictions included), to update in place, the
evaluation's own outcome, and evaluations to create or cancel. The server applies a plan in
one commit; the embedded agent's state has one node, a cluster's many, and this module is the
same for both.

What it does, as Nomad's generic scheduler does (system and sysbatch jobs: systemsched.py):

- **Reconcile** desired (`count` allocations per group, named `<job>.<group>[<i>]`) against
  the job's live allocations: a live one whose group spec is unchanged is kept (updated in
  place when the job changed), a changed group's is replaced (the new one names it in
  `PreviousAllocation`), one no longer wanted is stopped. A stopped job stops everything. A
  batch allocation that completed is done; one that ended on its own is not placed again by a
  retry (only a register or a forced evaluation places it again).
- **Nodes gone wrong** (disconnect.py): an allocation on a down node, or on one the server
  no longer knows, is lost (stopped, ClientStatus lost) and replaced at once elsewhere; on a
  disconnected node within the group's disconnect window it is unknown and replaced, and
  reconciled when it returns.
- **Place** on the best candidate node (binpack.py: ready, eligible, not draining, in the
  job's datacenters; ranked by Nomad's binpack or spread fitness, job anti-affinity,
  rescheduling penalty, affinities and spreads): one that meets the constraints (feasible.py) and
  whose CPU and memory, less what live allocations on it hold, fit the group, with enough
  healthy unused device instances and the host ports its network asks for (server/ports.py).
- **Preempt**: where no node fits, allocations of jobs at least 10 priority lower may be
  evicted (lowest first, as few as possible) on the first node where that makes room; the
  job's own are never evicted.
- **Block**: a group that still does not fit is reported in `FailedTGAllocs` (Nomad's
  `AllocMetric` summed over the nodes: evaluated, filtered by which constraint, exhausted in
  which dimension, available per datacenter) and leaves one blocked evaluation per job (an
  older one is canceled), retried when capacity changes. A blocked evaluation that is
  retried and still does not fit stays blocked; once everything is placed it is complete.
  With one node every message reads as it always has ("Resources exhausted: cpu …",
  `Constraint "…" filtered 1 nodes`).

Invariant: allocations being replaced keep their resources until their replacement is placed,
so a replacement that does not fit leaves the old allocation running as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from yurt.runtime.server.scheduler import binpack, deployments, disconnect, ports
from yurt.runtime.server.scheduler.binpack import Candidates
from yurt.runtime.server.scheduler.drain import node_refusal
from yurt.runtime.server.scheduler.feasible import filter_reason, without_placement
from yurt.runtime.server.scheduler.ports import alloc_ports
from yurt.runtime.server.scheduler.reschedule import Decision, as_time, decide, needs_reschedule
from yurt.runtime.structs import (
    ALLOC_CLIENT_COMPLETE,
    ALLOC_CLIENT_FAILED,
    ALLOC_CLIENT_LOST,
    ALLOC_CLIENT_UNKNOWN,
    ALLOC_DESIRED_EVICT,
    ALLOC_DESIRED_RUN,
    ALLOC_DESIRED_STOP,
    EVAL_STATUS_BLOCKED,
    EVAL_STATUS_CANCELED,
    EVAL_STATUS_COMPLETE,
    EVAL_STATUS_PENDING,
    TRIGGER_FAILED_FOLLOW_UP,
    TRIGGER_JOB_REGISTER,
    TRIGGER_QUEUED_ALLOCS,
    AllocatedDevice,
    AllocatedTaskResources,
    Allocation,
    AllocDeploymentStatus,
    AllocMetric,
    Evaluation,
    Job,
    Node,
    TaskGroup,
    is_client_terminal,
)
from yurt.runtime.structs.constraint import CONSTRAINT_DISTINCT_PROPERTY
from yurt.runtime.structs.identity import default_identity
from yurt.runtime.structs.network import AllocatedSharedResources
from yurt.runtime.structs.update import Deployment

#: A job may evict allocations of jobs at least this much lower in priority.
PREEMPTION_DELTA = 10


class SchedulerState(Protocol):
    """What the scheduler reads: a consistent view of the server's state."""

    def nodes(self) -> list[Node]:
        """Every node the server knows, whatever its status (binpack.py picks candidates)."""
        ...

    def job_allocs(self, job_id: str) -> list[Allocation]:
        """Every allocation of the job, oldest first."""
        ...

    def live_allocs(self) -> Iterable[Allocation]:
        """Every allocation that is not terminal (they hold the node's resources)."""
        ...

    def blocked_evals(self, job_id: str) -> list[Evaluation]:
        """The job's evaluations waiting for capacity."""
        ...


@dataclass
class DesiredUpdates:
    """Per group, what the plan does (Nomad's `DesiredUpdates`, for plan annotations)."""

    place: int = 0
    stop: int = 0
    ignore: int = 0
    in_place_update: int = 0
    destructive_update: int = 0
    migrate: int = 0
    preemptions: int = 0
    canary: int = 0


@dataclass
class Plan:
    eval: Evaluation  # the evaluation processed, with its outcome
    place: list[Allocation] = field(default_factory=list)
    stop: list[Allocation] = field(default_factory=list)
    update: list[Allocation] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # group → why, in words
    evals: list[Evaluation] = field(default_factory=list)  # to create or update
    desired: dict[str, DesiredUpdates] = field(default_factory=dict)
    #: Deployments to write: created, cancelled, completed (deployments.py).
    deployments: list[Deployment] = field(default_factory=list)

    @property
    def changes_nothing(self) -> bool:
        return not (self.place or self.stop or self.update)


@dataclass(frozen=True)
class _Usage:
    """What live allocations hold: CPU MHz, memory MB, device instance IDs, host ports."""

    cpu: int
    mem: int
    devices: frozenset[str]
    ports: frozenset[int] = frozenset()

    def plus(self, alloc: Allocation) -> _Usage:
        c, m = alloc_needs(alloc)
        return _Usage(self.cpu + c, self.mem + m, self.devices | _device_ids(alloc),
                      self.ports | alloc_ports(alloc))

    def without(self, *allocs: Allocation) -> _Usage:
        cpu, mem, devices, held = self.cpu, self.mem, set(self.devices), set(self.ports)
        for alloc in allocs:
            c, m = alloc_needs(alloc)
            cpu, mem = cpu - c, mem - m
            devices -= _device_ids(alloc)
            held -= alloc_ports(alloc)
        return _Usage(cpu, mem, frozenset(devices), frozenset(held))


def _device_ids(alloc: Allocation) -> frozenset[str]:
    return frozenset(i for res in alloc.task_resources.values() for d in res.devices
                     for i in d.device_ids)


def group_needs(group: TaskGroup) -> tuple[int, int]:
    """(CPU MHz, memory MB) one allocation of `group` asks for."""
    return (sum(t.resources.cpu for t in group.tasks),
            sum(t.resources.memory for t in group.tasks))


def alloc_needs(alloc: Allocation) -> tuple[int, int]:
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    return group_needs(group) if group is not None else (0, 0)


def group_spec(group: TaskGroup) -> bytes:
    """What makes a group's allocations replaceable: everything but the count (a count
    change adds or stops allocations, it does not restart the others) and the reschedule
    policy (it only says what happens after a failure: Nomad updates it in place)."""
    group = without_placement(group)
    # The default identity gives the task nothing (no token) and jobs stored before it existed
    # lack it: the same job file run again after an upgrade must not replace allocations.
    tasks = [msgspec.structs.replace(t, default_identity=None)
             if t.default_identity == default_identity() else t for t in group.tasks]
    return msgspec.json.encode(msgspec.structs.replace(group, count=0, tasks=tasks,
                                                       reschedule_policy=None))


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
                if not device.matches(request.name):
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
                                   if d.matches(request.name) for i in d.instances
                                   if i.healthy and i.id not in used and i.id not in taken)
                return {}, (f"Resources exhausted: devices (task {task.name!r} needs "
                            f"{request.count} × {request.name}, {healthy_free} healthy and "
                            "free)")
        resources[task.name] = allocated
    return resources, ""


def try_place(node: Node, group: TaskGroup, usage: _Usage
              ) -> tuple[dict[str, AllocatedTaskResources], str]:
    """Resources for one allocation of `group` on top of `usage`, or why it does not fit."""
    resources, _, why = fit(node, group, usage)
    return resources, why


def fit(node: Node, group: TaskGroup, usage: _Usage
        ) -> tuple[dict[str, AllocatedTaskResources], AllocatedSharedResources | None, str]:
    """`try_place`, with the group's ports too (server/ports.py): the per-task resources,
    the shared ones, or why it does not fit."""
    if refusal := node_refusal(node):  # ineligible or draining (server/drain.py)
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
    return resources, shared if not why else None, why


def _dimension(why: str) -> str:
    """Nomad's DimensionExhausted key for one of `try_place`'s reasons."""
    for dim in ("cpu", "memory", "devices"):
        if why.startswith(f"Resources exhausted: {dim}"):
            return dim
    return why  # as Nomad's "network: reserved port collision db=6379"


def _preemption(node: Node, on_node: Iterable[Allocation], job: Job, group: TaskGroup,
                usage: _Usage, protected: set[str]) -> list[Allocation]:
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
class _Choice:
    """Where one allocation goes: the node, its resources there, whom it evicts, and the
    node's usage with the replaced allocation and the victims freed (before it is added)."""

    node: Node
    task_resources: dict[str, AllocatedTaskResources]
    shared: AllocatedSharedResources | None
    victims: list[Allocation]
    trial: _Usage


@dataclass
class _Selection:
    choice: _Choice | None
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
    choice: _Choice | None = None
    score: float | None = None


class _Placer:
    """Per-node usage over one pass, and node selection (Nomad's stack: feasibility, fit,
    rank, then preemption where nothing fits).

    Usage starts from the live allocations on each node and follows the plan: placements
    add, replaced allocations and victims free. The job's own allocations (`mine`, what
    distinct_* constraints and the anti-affinity count) start from its live ones that stay
    and gain the plan's placements. A placement changes only its node (and the node of the
    allocation it replaces), so each node's verdict for a group is kept until then: placing
    N allocations over M nodes costs about N + M node evaluations, not N × M."""

    def __init__(self, job: Job, cands: Candidates, live: Iterable[Allocation],
                 mine: Iterable[Allocation], algorithm: str, nodes: dict[str, Node]) -> None:
        self.job, self.cands, self.algorithm, self.nodes = job, cands, algorithm, nodes
        self.usage: dict[str, _Usage] = {}
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

    def _usage(self, node_id: str) -> _Usage:
        return self.usage.get(node_id, _Usage(0, 0, frozenset()))

    def trial(self, node: Node, prev: Allocation | None) -> _Usage:
        """The node's usage, less `prev` (the allocation being replaced) if it is there."""
        usage = self._usage(node.id)
        return usage.without(prev) if prev is not None and prev.node_id == node.id else usage

    def select(self, group: TaskGroup, prev: Allocation | None = None, *,
               penalized: frozenset[str] = frozenset(), preempt: bool = False,
               protected: set[str] | None = None, only: Node | None = None) -> _Selection:
        """The best node for one allocation of `group`, replacing `prev` if any.
        `penalized`: nodes a failed allocation being replaced ran on (Nomad's rescheduling
        penalty); `only`: the one candidate to try (the system scheduler's)."""
        evaluated = filtered = exhausted = 0
        constraint_filtered: dict[str, int] = {}
        dimensions: dict[str, int] = {}
        first_filtered = first_exhausted = ""
        best: _Verdict | None = None
        full: list[Node] = []
        ready = self.cands.ready if only is None else [only]
        # Verdicts are reused unless this placement is special for some node: it replaces
        # an allocation there, or its feasibility counts allocations across nodes
        # (distinct_property).
        reuse = prev is None and not any(
            c.operator == CONSTRAINT_DISTINCT_PROPERTY
            for c in (*self.job.constraints, *group.constraints))
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
                verdict = self._evaluate(node, group, prev)
                if reuse:
                    verdicts[node.id] = verdict
            if verdict.reason is not None:  # constraints and distinct_*: no eviction helps
                filtered += 1
                constraint_filtered[verdict.reason] = (
                    constraint_filtered.get(verdict.reason, 0) + 1)
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
            return _Selection(best.choice)
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
                    return _Selection(_Choice(node, task_resources, shared, victims, freed))
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
            dimension_exhausted=dimensions or None)
        return _Selection(None, why, metric, preemption_failed=preempt and bool(full))

    def _evaluate(self, node: Node, group: TaskGroup, prev: Allocation | None) -> _Verdict:
        """Whether `node` passes the constraints and fits one allocation of `group`."""
        reason = filter_reason(self.job, group, node, (a for a in self.mine if a is not prev),
                               self.nodes.get)
        if reason is not None:
            return _Verdict(reason=reason)
        trial = self.trial(node, prev)
        task_resources, shared, why = fit(node, group, trial)
        if why:
            return _Verdict(why=why)
        return _Verdict(choice=_Choice(node, task_resources, shared, [], trial))

    def _score(self, node: Node, group: TaskGroup, trial: _Usage, prev: Allocation | None,
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

    def commit(self, choice: _Choice, placed: Allocation, prev: Allocation | None) -> None:
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


def stopped(alloc: Allocation, index: int, now: int, why: str,
            status: str = ALLOC_DESIRED_STOP) -> Allocation:
    return msgspec.structs.replace(alloc, desired_status=status, desired_description=why,
                                   modify_index=index, alloc_modify_index=index,
                                   modify_time=now)


def _same_version(alloc: Allocation, job: Job) -> bool:
    """Whether `alloc` ran this version of `job` (Nomad's filterOldTerminalAllocs: a batch
    allocation of an older version, or of a job since stopped and registered again, does not
    count as done; its slot runs again)."""
    return alloc.job is not None and (alloc.job.version, alloc.job.create_index) == (
        job.version, job.create_index)


def _replaced_by(failed: Allocation, new: Allocation, index: int, now: int) -> Allocation:
    """`failed`, replaced by `new`: no other evaluation replaces it again."""
    return msgspec.structs.replace(failed, next_allocation=new.id, modify_index=index,
                                   alloc_modify_index=index, modify_time=now)


def schedule(state: SchedulerState, ev: Evaluation, job: Job | None, *, index: int,
             now: int, new_id: Callable[[], str], can_preempt: bool = True,
             deployment: Deployment | None = None,
             algorithm: str = binpack.ALGORITHM_BINPACK) -> Plan:
    """The plan for evaluation `ev` of `job` (None or stopped: stop everything).

    `index` numbers what the plan writes, `now` (unix ns) times it. A live allocation's
    group, as the job version it runs has it, is compared with the job's: the same, it is
    kept (updated in place to the new version); changed, it is replaced, at the pace of the
    group's `update` strategy (deployments.py; `deployment` is the job's latest).
    `algorithm` is the scheduler configuration's `SchedulerAlgorithm` (binpack.py).

    Placements go to the best candidate node (binpack.py); a live allocation whose node is
    down or gone is lost: stopped (ClientStatus lost) and replaced on another node at once.
    """
    plan = Plan(eval=ev)
    allocs = state.job_allocs(ev.job_id)
    live = [a for a in allocs if not a.is_terminal()]
    nodes = state.nodes()
    nodes_by_id = {n.id: n for n in nodes}
    states = disconnect.classify(live, nodes_by_id, now, allocs)
    lost_ids = states.lost
    rollout, plan.deployments = deployments.start(job, deployment, index, now)
    if job is None or job.stop or rollout is None:
        for alloc in live:
            plan.stop.append(stopped(alloc, index, now, "alloc is being stopped"))
            plan.desired.setdefault(alloc.task_group, DesiredUpdates()).stop += 1
        _mark_lost(plan, lost_ids)
        _finish(state, plan, index, now, new_id)
        return plan
    if job.type in ("system", "sysbatch"):
        # One allocation per node (systemsched.py). Imported here: it builds on this
        # module's pieces, so it cannot be imported before them.
        from yurt.runtime.server.scheduler.system import schedule_system
        return schedule_system(state, plan, job, nodes, states, index=index, now=now,
                               new_id=new_id, can_preempt=can_preempt, algorithm=algorithm)
    cands = binpack.candidates(nodes, job)
    # Waiting unknown allocations and reconnect losers take no part (disconnect.py). A
    # waiting one's name placed in this pass (its replacement could not be placed when it
    # went unknown: no node was free) names it as the allocation it replaces, as the
    # replacement placed at once does: when its node comes back, the reconnect finds the
    # two and keeps one (disconnect.classify follows `previous_allocation`).
    waiting_unknown = {a.name: a.id for a in live
                       if a.id in states.aside and a.client_status == ALLOC_CLIENT_UNKNOWN}
    live = [a for a in live if a.id not in states.aside]
    for alloc, why in states.stop:
        plan.stop.append(stopped(alloc, index, now, why))
        plan.desired.setdefault(alloc.task_group, DesiredUpdates()).stop += 1
    disconnecting = {a.id for a in states.disconnecting}
    # Names a replacement already holds: a lost allocation of such a name is not replaced.
    held = {a.name for a in live if a.id not in lost_ids and a.id not in disconnecting}
    wanted = {f"{job.id}.{g.name}[{i}]": g for g in job.task_groups for i in range(g.count)}
    # What ended on its own is not placed again by a retry: a completed batch allocation is
    # done; any other is for a register or a forced evaluation to place again.
    user_asked = ev.triggered_by == TRIGGER_JOB_REGISTER
    # One already replaced is not (its `next_allocation` holds the name: Nomad's reconciler
    # ignores a rescheduled allocation), or a replacement that was lost would leave the
    # name empty for good: its own replacement, blocked for want of a node, would find the
    # name "done" once unblocked.
    done: set[str] = set()
    for alloc in allocs:
        if alloc.next_allocation:
            continue
        if alloc.desired_status == "run" and is_client_terminal(alloc.client_status) and (
                (job.type != "service" and alloc.client_status == ALLOC_CLIENT_COMPLETE
                 and _same_version(alloc, job))
                or not user_asked):
            done.add(alloc.name)
    # A failed allocation is replaced as its reschedule policy says (reschedule.py).
    failures = decide(job, allocs, now, user_asked=user_asked)
    if rollout.failed and rollout.current is not None:
        # Nomad's `partOfFailedDeployment`: a failed deployment's own failed allocations are
        # not replaced (the rollout failed; a rollback or a new version replaces them).
        for name, (gone, _) in list(failures.now.items()):
            if gone.deployment_id == rollout.current.id:
                del failures.now[name]
                failures.never.add(name)
    respec = _outdated_failures(failures, allocs, wanted)
    done = (done - set(failures.now) - set(failures.later)) | failures.never
    _follow_up(plan, ev, failures, index, now, new_id)
    kept: list[Allocation] = []
    previous: dict[str, Allocation] = {}
    #: Stopped whether or not a replacement is placed (one that is not is blocked).
    migrating: dict[str, Allocation] = {}
    unneeded = rollout.canaries_to_stop(live)
    # A waiting canary asked to move (an alloc stop, a drain) is stopped and counts no more
    # among the canaries, so a fresh one is placed (Nomad's `cancelUnneededCanaries`).
    moving_canaries = [a for a in live if rollout.is_waiting_canary(a)
                       and a.desired_transition.migrate and a not in unneeded]
    waiting = [a for a in live if rollout.is_waiting_canary(a) and a not in unneeded
               and a not in moving_canaries]
    # A failed canary still holds its place among the deployment's canaries (Nomad counts
    # every placed canary): it is rescheduled as a canary by its policy, not replaced by a
    # fresh one at once. One already replaced counts through its replacement.
    failed_canaries = {a.id: a for a in allocs if a.desired_status == ALLOC_DESIRED_RUN
                       and a.client_status == ALLOC_CLIENT_FAILED and not a.next_allocation
                       and rollout.is_waiting_canary(a)}
    canary_retries = {name: failures.now.pop(name) for name, (failed, _) in
                      list(failures.now.items()) if failed.id in failed_canaries}
    for alloc in live:
        if (alloc.id in lost_ids or alloc.id in disconnecting) and alloc not in unneeded:
            # Its node is down, gone or disconnected: lost (stopped) or unknown, and
            # replaced at once elsewhere (Nomad's reconciler: not paced by the rollout nor
            # the reschedule policy).
            if alloc.name in wanted and alloc.name not in migrating and alloc.name not in held:
                migrating[alloc.name] = previous[alloc.name] = alloc
            else:
                unneeded.append(alloc)
            continue
        if alloc in unneeded or alloc in waiting or alloc in moving_canaries:
            continue  # stopped, or a canary beside the allocation it is to replace
        group = wanted.get(alloc.name)
        old = alloc.job.lookup_group(group.name) if alloc.job and group else None
        if group is None:
            unneeded.append(alloc)
        elif alloc.desired_transition.migrate:  # an alloc stop, a drain: Nomad's migrate
            migrating[alloc.name] = previous[alloc.name] = alloc
        elif old is None or group_spec(old) == group_spec(group):
            kept.append(alloc)
        else:
            previous[alloc.name] = alloc
    # A promoted canary took its name over: the allocation it replaces is no longer needed.
    unneeded += [previous.pop(a.name) for a in kept if a.name in previous
                 and a.name not in migrating]
    unneeded_ids = {a.id for a in unneeded + moving_canaries}
    placer = _Placer(job, cands, (a for a in state.live_allocs() if a.id not in unneeded_ids),
                     (a for a in live if a.id not in unneeded_ids and a.id not in lost_ids
                      and a.id not in disconnecting), algorithm, nodes_by_id)
    evicted: dict[str, Allocation] = {}
    outdated = [a for a in kept if a.job is not None
                and a.job.job_modify_index != job.job_modify_index]
    # Updated in place only where its node still fits the new job; else replaced
    # (feasible.py).
    unfit = {a.id for a in outdated if (node := nodes_by_id.get(a.node_id)) is None
             or filter_reason(job, wanted[a.name], node, (
                 b for b in live if b.id not in unneeded_ids and b.id != a.id),
                 nodes_by_id.get) is not None}
    previous.update({a.name: a for a in outdated if a.id in unfit})
    kept = [a for a in kept if a.id not in unfit]
    outdated = [a for a in outdated if a.id not in unfit]
    outdated_names = {a.name for a in outdated}
    kept_names = {a.name for a in kept}
    hopeless: set[str] = set()  # groups for which no eviction helps: don't search again
    protected = {a.id for a in live}  # the job's own allocations are never evicted
    metrics: dict[str, AllocMetric] = {}
    rolling = deployments.plan_groups(
        rollout, job, wanted, live, waiting + list(failed_canaries.values()), kept, outdated,
        previous, migrating,
        {n for n in wanted if n in done and n not in previous} | set(failures.later),
        held=[a for a in allocs if needs_reschedule(a) and a.name not in failures.now])
    current = rollout.create({g.name: [a for a in allocs if a.task_group == g.name]
                              for g in job.task_groups}, rolling.updating, ev, new_id)
    # The deployment this pass's placements join (none once it is over).
    joining = current.id if current is not None and current.active() else ""

    def placement(name: str, group_name: str, choice: _Choice, **fields: Any) -> Allocation:
        """A new allocation of this pass on the chosen node, numbered and timed by the plan."""
        return Allocation(
            id=new_id(), namespace=job.namespace, eval_id=ev.id, name=name,
            node_id=choice.node.id, node_name=choice.node.name, job_id=job.id, job=job,
            task_group=group_name, task_resources=choice.task_resources,
            allocated_shared=choice.shared, create_index=index, modify_index=index,
            alloc_modify_index=index, create_time=now, modify_time=now,
            deployment_id=joining, **fields)

    for name, group in wanted.items():
        desired = plan.desired.setdefault(group.name, DesiredUpdates())
        if name in kept_names:
            if name in outdated_names:
                desired.in_place_update += 1
            else:
                desired.ignore += 1
            continue
        prev = previous.get(name)
        if (prev is None and name in done) or name in failures.later:
            desired.ignore += 1
            continue
        if not deployments.admit(rollout, rolling, group.name, destructive=prev is not None,
                                 forced=name in migrating
                                 or (name in failures.now and name not in respec)):
            desired.ignore += 1  # held by the rollout: a later pass makes it
            continue
        failed, tracker = failures.now.get(name, (None, None))
        selection = placer.select(
            group, prev,
            penalized=frozenset({failed.node_id}) if failed is not None else frozenset(),
            preempt=can_preempt and group.name not in hopeless,
            protected=protected | set(evicted))
        if selection.preemption_failed:
            hopeless.add(group.name)
        choice = selection.choice
        # Counted as Nomad's reconciler counts, before placement: a plan whose placement
        # fails still says what it meant to do, beside why it could not.
        if prev is not None and (prev.id in lost_ids or prev.id in disconnecting):
            desired.place += 1
        elif name in migrating:
            desired.migrate += 1
        elif prev is not None:
            desired.destructive_update += 1
        else:
            desired.place += 1
        if choice is None:
            plan.failed.setdefault(group.name, selection.why)
            if group.name in metrics:
                metrics[group.name].coalesced_failures += 1
            elif selection.metric is not None:
                metrics[group.name] = selection.metric
            continue  # the previous allocation, if any, keeps running as it is
        for victim in choice.victims:
            evicted[victim.id] = victim
        desired.preemptions += len(choice.victims)
        placed = placement(
            name, group.name, choice,
            preempted_allocations=[v.id for v in choice.victims], reschedule_tracker=tracker,
            previous_allocation=(prev.id if prev is not None else failed.id if failed
                                 else waiting_unknown.get(name, "")),
            deployment_status=AllocDeploymentStatus(canary=True) if prev is not None
            and name in migrating and deployments.is_canary(prev) else None)
        placer.commit(choice, placed, prev)
        plan.place.append(placed)
        if failed is not None:
            plan.update.append(_replaced_by(failed, placed, index, now))
    for new in plan.place:
        for victim_id in new.preempted_allocations:
            victim = evicted[victim_id]
            plan.stop.append(msgspec.structs.replace(
                stopped(victim, index, now, f"Preempted by allocation {new.id} of job "
                        f"{job.id!r} (priority {job.priority})", ALLOC_DESIRED_EVICT),
                preempted_by_allocation=new.id))
        if new.name in previous and new.name not in migrating:  # a destructive update
            replaced = stopped(previous[new.name], index, now, "alloc is being updated")
            replaced.next_allocation = new.id
            plan.stop.append(replaced)
    replacements = {new.name: new.id for new in plan.place}
    retried = [(a.task_group, name) for name, (a, _) in canary_retries.items()]
    fresh = [(g, n) for g, names in rolling.canaries.items() for n in names]
    for group_name, name in fresh + retried:
        group = wanted[name]
        selection = placer.select(group)
        if selection.choice is None:
            plan.failed.setdefault(group.name, selection.why)
            continue
        failed, tracker = canary_retries.get(name, (None, None))
        canary = placement(
            name, group_name, selection.choice, reschedule_tracker=tracker,
            previous_allocation=failed.id if failed is not None else "",
            deployment_status=AllocDeploymentStatus(canary=True))
        placer.commit(selection.choice, canary, None)
        plan.place.append(canary)
        if failed is None:
            plan.desired.setdefault(group_name, DesiredUpdates()).canary += 1
            continue
        plan.desired.setdefault(group_name, DesiredUpdates()).place += 1
        plan.update.append(_replaced_by(failed, canary, index, now))
    fresh_canaries = {a.name: a.id for a in plan.place if a.name not in replacements}
    for alloc in moving_canaries:
        moved = stopped(alloc, index, now, "alloc is being migrated")
        moved.next_allocation = fresh_canaries.get(alloc.name, "")
        plan.stop.append(moved)
    for name, alloc in migrating.items():
        moved = stopped(alloc, index, now, "alloc is being migrated")
        moved.next_allocation = replacements.get(name, "")
        plan.stop.append(moved)
    for alloc in unneeded:
        plan.stop.append(stopped(alloc, index, now, "alloc not needed due to job update"))
        plan.desired.setdefault(alloc.task_group, DesiredUpdates()).stop += 1
    plan.update += [deployments.joined(msgspec.structs.replace(
        a, job=job, modify_index=index, alloc_modify_index=index), current) for a in outdated]
    for group_name, desired in plan.desired.items():
        if (desired.place + desired.destructive_update + desired.in_place_update
                + desired.migrate + desired.canary or group_name in plan.failed
                or any(a.task_group == group_name for a, _ in failures.later.values())):
            rolling.left[group_name] = True
    rollout.finish(rolling.left)
    plan.deployments += rollout.writes
    plan.eval = msgspec.structs.replace(ev, failed_tg_allocs=metrics or None)
    _mark_lost(plan, lost_ids)
    _mark_unknown(plan, states.disconnecting, ev, index, now, new_id)
    _finish(state, plan, index, now, new_id)
    return plan


def _mark_lost(plan: Plan, lost_ids: set[str]) -> None:
    """The plan's stops of allocations on lost nodes, in Nomad's words: lost, not stopped."""
    plan.stop = [msgspec.structs.replace(a, client_status=ALLOC_CLIENT_LOST,
                                         desired_status=ALLOC_DESIRED_STOP,
                                         desired_description=disconnect.ALLOC_LOST)
                 if a.id in lost_ids else a for a in plan.stop]


def _mark_unknown(plan: Plan, allocs: list[Allocation], ev: Evaluation, index: int,
                  now: int, new_id: Callable[[], str]) -> None:
    """Allocations on a disconnected node within their window: not stopped (the plan moved
    them as it moves a lost one) but unknown, still desired to run, with a follow-up
    evaluation at the end of the window that finds them lost if the node is still away."""
    ids = {a.id for a in allocs}
    plan.stop = [a for a in plan.stop if a.id not in ids]
    for alloc in allocs:
        window = disconnect.lost_after(alloc)
        follow = Evaluation(
            id=new_id(), namespace=ev.namespace, priority=ev.priority, type=ev.type,
            triggered_by=disconnect.TRIGGER_DISCONNECT_TIMEOUT, job_id=ev.job_id,
            job_modify_index=ev.job_modify_index, status=EVAL_STATUS_PENDING,
            status_description=disconnect.DISCONNECT_FOLLOW_UP, previous_eval=ev.id,
            wait_until=as_time(_ceil_us(now + window)), wait=window, create_index=index,
            modify_index=index, create_time=now, modify_time=now)
        plan.evals.append(follow)
        plan.update.append(msgspec.structs.replace(
            alloc, client_status=ALLOC_CLIENT_UNKNOWN,
            client_description=disconnect.ALLOC_UNKNOWN, followup_eval_id=follow.id,
            modify_index=index, alloc_modify_index=index, modify_time=now))


def _ceil_us(ns: int) -> int:
    """`ns` rounded up to the microsecond, and one microsecond more. A follow-up's
    `wait_until` is a datetime (µs), made through float seconds (`as_time`, which rounds
    to the nearest µs; today's epoch in float ns is exact only to 256 ns): made from the
    window's end (ns) itself, it could fall before it, the evaluation run a few hundred ns
    early, find the allocation not yet expired and leave it unknown, and nothing would
    look at it again while its node stays away."""
    return (-(-ns // 1000) + 1) * 1000


def _outdated_failures(failures: Decision, allocs: list[Allocation],
                       wanted: dict[str, TaskGroup]) -> set[str]:
    """Moves to `failures.now` the failed allocations left for later (or never) whose group
    spec is not the job's, and returns their names: Nomad's reconciler keeps such an
    allocation among the untainted ones and updates it destructively like any allocation of
    an older spec, so a new version, or a rollback, replaces a crashed allocation of the
    version before at once rather than at its reschedule time. Their replacements are paced
    by the rollout (not forced) and start a new reschedule tracker."""
    failed = {a.name: a for a in allocs if needs_reschedule(a)}
    names = set()
    for name in [*failures.later, *failures.never]:
        alloc, group = failed.get(name), wanted.get(name)
        old = alloc.job.lookup_group(group.name) if alloc and alloc.job and group else None
        if alloc is None or group is None or old is None or group_spec(old) == group_spec(group):
            continue
        failures.later.pop(name, None)
        failures.never.discard(name)
        failures.now[name] = (alloc, None)
        names.add(name)
    return names


def _follow_up(plan: Plan, ev: Evaluation, failures: Decision, index: int, now: int,
               new_id: Callable[[], str]) -> None:
    """A follow-up evaluation (WaitUntil) for each failed allocation to replace later, named
    in its FollowupEvalID; none again for one that already waits on another."""
    for alloc, when in failures.later.values():
        if alloc.followup_eval_id and alloc.followup_eval_id != ev.id:
            continue
        follow = Evaluation(
            id=new_id(), namespace=ev.namespace, priority=ev.priority, type=ev.type,
            triggered_by=TRIGGER_FAILED_FOLLOW_UP, job_id=ev.job_id,
            job_modify_index=ev.job_modify_index, status=EVAL_STATUS_PENDING,
            previous_eval=ev.id, wait_until=as_time(when),
            wait=when - now, create_index=index, modify_index=index, create_time=now,
            modify_time=now)
        plan.evals.append(follow)
        plan.update.append(msgspec.structs.replace(
            alloc, followup_eval_id=follow.id, modify_index=index,
            alloc_modify_index=index, modify_time=now))


def _finish(state: SchedulerState, plan: Plan, index: int, now: int,
            new_id: Callable[[], str]) -> None:
    """The evaluation's outcome: complete, or blocked where groups could not be placed (one
    blocked evaluation per job; older ones are canceled)."""
    ev = plan.eval
    queued = {name: 0 for name in plan.desired}
    if ev.failed_tg_allocs:
        for name, metric in ev.failed_tg_allocs.items():
            queued[name] = 1 + metric.coalesced_failures
    others = [b for b in state.blocked_evals(ev.job_id) if b.id != ev.id]
    if ev.failed_tg_allocs and ev.status == EVAL_STATUS_BLOCKED:
        # A retried blocked evaluation that still does not fit: it stays blocked.
        plan.eval = msgspec.structs.replace(ev, queued_allocations=queued, modify_index=index,
                                            modify_time=now)
    elif ev.failed_tg_allocs:
        blocked = Evaluation(
            id=new_id(), namespace=ev.namespace, priority=ev.priority, type=ev.type,
            triggered_by=TRIGGER_QUEUED_ALLOCS, job_id=ev.job_id,
            job_modify_index=ev.job_modify_index, status=EVAL_STATUS_BLOCKED,
            status_description="created to place remaining allocations",
            previous_eval=ev.id, failed_tg_allocs=ev.failed_tg_allocs,
            queued_allocations=queued, create_index=index, modify_index=index,
            create_time=now, modify_time=now)
        plan.evals.append(blocked)
        plan.eval = msgspec.structs.replace(
            ev, status=EVAL_STATUS_COMPLETE, blocked_eval=blocked.id,
            queued_allocations=queued, modify_index=index, modify_time=now)
    else:
        plan.eval = msgspec.structs.replace(
            ev, status=EVAL_STATUS_COMPLETE, queued_allocations=queued,
            status_description="" if ev.status != EVAL_STATUS_BLOCKED
            else "placed once capacity was free", modify_index=index, modify_time=now)
    for other in others:
        plan.evals.append(msgspec.structs.replace(
            other, status=EVAL_STATUS_CANCELED,
            status_description=f"evaluation {plan.eval.id} replaced it",
            modify_index=index, modify_time=now))

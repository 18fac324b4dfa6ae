"""Which nodes may take a placement, and how good each one is. Pure: no I/O, no clock.

The scheduler (placement.py) checks every candidate node for feasibility and fit;
this module says which nodes are candidates at all and ranks the ones that fit, as Nomad's
`readyNodesInDCsAndPool` and rank iterators (scheduler/feasible/rank.go) do:

- **Candidates** (`candidates`): nodes whose status is ready, eligible and not draining
  (Nomad's `Node.Ready`, drain.py's `node_refusal`), in the job's node pool and one of its
  datacenters (globs, Nomad's `IsInAnyDC`: `*` matches any run of characters; no
  datacenters means all). A node built in memory and never registered (status
  "initializing", the embedded agent's node and the test fakes) counts as ready: only a
  registered node has a liveness, and the cluster's registration marks it ready.
- **Fitness** (`fitness`): Nomad's `ScoreFitBinPack` (BestFit v3: the fuller the node once
  the allocation is on it, the higher) or `ScoreFitSpread` (worst fit: the emptier, the
  higher), per the scheduler configuration's `SchedulerAlgorithm`, normalised to [0, 1]
  by Nomad's maximum of 18.
- **Penalties and preferences**: Nomad's job anti-affinity (`-(collisions + 1) / count`
  for a node already holding allocations of the same job and group), the rescheduling
  penalty (-1 on the node a failed allocation being replaced ran on), node affinities
  (matched weights over the sum of absolute weights), spreads (Nomad's SpreadIterator: the
  further a value is below its target share, or below the others for an even spread, the
  higher). Each present score is averaged into
  the final one, as Nomad's `ScoreNormalizationIterator` does; an absent one (no
  collision, no affinity) is not averaged in.

Rejected: Nomad's limit iterator (look at two shuffled nodes for a service job, log2(n) for
batch, then stop). yurt looks at every candidate and takes the best, ties to the first in
the server's order: deterministic, which the tests and `job plan` want, and cluster sizes
here are small.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from yurt.runtime.server.scheduler.drain import node_refusal
from yurt.runtime.server.scheduler.feasible import check_constraint, resolve_target
from yurt.runtime.structs import NODE_STATUS_INIT, NODE_STATUS_READY, Allocation, Job, Node
from yurt.runtime.structs.constraint import Affinity, Spread

ALGORITHM_BINPACK: Final = "binpack"
ALGORITHM_SPREAD: Final = "spread"
#: Nomad's binPackingMaxFitScore: fitness scores lie in [0, 18].
MAX_FIT_SCORE: Final = 18.0
DEFAULT_POOL: Final = "default"
ALL_POOL: Final = "all"


def glob_match(pattern: str, value: str) -> bool:
    """ryanuber/go-glob's Glob, as Nomad matches datacenters: `*` matches any run of
    characters, nothing else is special."""
    if pattern == "*":
        return True
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == value
    if not value.startswith(parts[0]):
        return False
    at = len(parts[0])
    for part in parts[1:-1]:
        found = value.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return value.endswith(parts[-1]) and len(value) - len(parts[-1]) >= at


def in_datacenters(node: Node, datacenters: Sequence[str]) -> bool:
    return not datacenters or any(glob_match(dc, node.datacenter) for dc in datacenters)


def status_refusal(node: Node) -> str | None:
    """Why a node's status keeps placements off it, or None."""
    if node.status in (NODE_STATUS_READY, NODE_STATUS_INIT):
        return None
    return f"node is {node.status}"


@dataclass(frozen=True)
class Candidates:
    """The nodes a job may be placed on, and what Nomad's AllocMetric says of the pool."""

    ready: list[Node]
    #: Nodes of the job's pool and datacenters, whatever their status (NodesInPool).
    in_pool: int
    #: Ready nodes per datacenter (NodesAvailable); 0 for a datacenter with none ready.
    available: dict[str, int] = field(default_factory=dict)
    #: Why the first node of the pool that is not a candidate is not ("" if none).
    refusal: str = ""


def is_in_pool(node: Node, pool: str) -> bool:
    """Nomad's Node.IsInPool: `all` holds every node; no pool is `default` (a job the
    register did not fill in, as nomad/job_endpoint_hook_node_pool_ce.go would)."""
    return pool == ALL_POOL or node.node_pool == (pool or "default")


def candidates(nodes: Iterable[Node], job: Job, pool: str | None = None) -> Candidates:
    """The job's candidate nodes among `nodes`, in their order: those of its node pool
    (`pool`, else the job's; Nomad's readyNodesInDCsAndPool) and datacenters."""
    pool = job.node_pool if pool is None else pool
    ready: list[Node] = []
    in_pool = 0
    available: dict[str, int] = {}
    refusal = ""
    for node in nodes:
        if not is_in_pool(node, pool) or not in_datacenters(node, job.datacenters):
            continue
        in_pool += 1
        available.setdefault(node.datacenter, 0)
        why = status_refusal(node) or node_refusal(node)
        if why:
            refusal = refusal or why
            continue
        ready.append(node)
        available[node.datacenter] += 1
    return Candidates(ready, in_pool, available, refusal)


def fitness(node: Node, cpu: int, mem: int, algorithm: str = ALGORITHM_BINPACK) -> float:
    """Nomad's ScoreFitBinPack (or ScoreFitSpread) for `node` holding `cpu` MHz and `mem` MB
    (the new allocation included), normalised to [0, 1]. A node that reports no CPU or
    memory counts that dimension as empty."""
    total_cpu = node.node_resources.cpu.cpu_shares - node.reserved_resources.cpu.cpu_shares
    total_mem = (node.node_resources.memory.memory_mb
                 - node.reserved_resources.memory.memory_mb)
    free_cpu = 1 - cpu / total_cpu if total_cpu > 0 else 1.0
    free_mem = 1 - mem / total_mem if total_mem > 0 else 1.0
    total = 10 ** free_cpu + 10 ** free_mem
    score = total - 2 if algorithm == ALGORITHM_SPREAD else 20.0 - total
    return min(max(score, 0.0), MAX_FIT_SCORE) / MAX_FIT_SCORE


def anti_affinity(collisions: int, desired: int) -> float | None:
    """Nomad's job anti-affinity penalty for a node already holding `collisions`
    allocations of the same job and group (None: no collision, no score)."""
    if collisions <= 0:
        return None
    return -(collisions + 1) / max(desired, 1)


def affinity_score(affinities: Sequence[Affinity], node: Node) -> float | None:
    """Nomad's NodeAffinityIterator score: the weights of the affinities `node` matches
    over the sum of all absolute weights (None when there are none)."""
    total = sum(abs(a.weight) for a in affinities)
    if not affinities or total == 0:
        return None
    matched = 0
    for a in affinities:
        left, left_found = resolve_target(a.attribute, node)
        right, right_found = resolve_target(a.value, node)
        if check_constraint(a.operator, left, right, left_found, right_found):
            matched += a.weight
    return matched / total


#: Nomad's implicitTarget: the spread target of every value no target names.
IMPLICIT_TARGET: Final = "*"


def _targeted(spread: Spread, value: str) -> str:
    """Nomad's targetedPropertyValue: the value itself if targeted (or no target is
    named), else the implicit target."""
    targets = {t.value for t in spread.target}
    return value if not targets or value in targets else IMPLICIT_TARGET


def spread_counts(spreads: Sequence[Spread], allocs: Iterable[Allocation],
                  node_of: Callable[[str], Node | None]) -> list[dict[str, int]]:
    """Per spread, how many of `allocs` (the group's, the plan's placements included) run
    on each value of its attribute (Nomad's propertySet combined use map)."""
    counts: list[dict[str, int]] = [{} for _ in spreads]
    for alloc in allocs:
        node = node_of(alloc.node_id)
        if node is None:
            continue
        for spread, count in zip(spreads, counts, strict=True):
            value, found = resolve_target(spread.attribute, node)
            if found:
                key = _targeted(spread, value)
                count[key] = count.get(key, 0) + 1
    return counts


def spread_score(spreads: Sequence[Spread], desired_total: int, node: Node,
                 counts: Sequence[dict[str, int]]) -> float | None:
    """Nomad's SpreadIterator score for one more allocation on `node` (None: no spread, or
    a sum of exactly 0, which Nomad does not average in). `spreads` are the group's then
    the job's, `counts` from `spread_counts`. Nomad's `lowestSpreadBoost` for a target of
    0 % is the lowest boost it has seen so far, starting at -1; here it is -1."""
    if not spreads:
        return None
    weights = sum(s.weight for s in spreads) or 1
    total = 0.0
    for spread, used in zip(spreads, counts, strict=True):
        value, found = resolve_target(spread.attribute, node)
        if not found:
            total -= 1.0  # missing property
            continue
        desired: dict[str, float] = {}
        for target in spread.target:
            desired[target.value] = target.percent / 100 * desired_total
        wanted = sum(desired.values())
        if 0 < wanted < desired_total:
            desired[IMPLICIT_TARGET] = desired_total - wanted
        if not desired:
            total += _even_spread_boost(used, value)
            continue
        key = _targeted(spread, value)
        goal = desired.get(key, desired.get(IMPLICIT_TARGET))
        if goal is None or goal == 0:  # no target for the value, or a 0 % one
            total -= 1.0
        else:
            total += (goal - (used.get(key, 0) + 1)) / goal * (spread.weight / weights)
    return total if total != 0.0 else None


def _even_spread_boost(used: dict[str, int], value: str) -> float:
    """Nomad's evenSpreadScoreBoost: prefer the values with the fewest allocations."""
    if not used:
        return 0.0
    current = used.get(value, 0)
    low = min(used.values())
    high = max(used.values())
    boost = -1.0 if low == 0 else (low - current) / low
    if current != low:
        return boost
    if low == high:
        return -1.0
    if low == 0:
        return 1.0
    return (high - low) / low


def final_score(scores: Iterable[float | None]) -> float:
    """Nomad's ScoreNormalizationIterator: the mean of the scores present."""
    present = [s for s in scores if s is not None]
    return sum(present) / len(present) if present else 0.0

"""What the leader decides about node liveness, as pure code with time passed in: the
heartbeat TTL a node is told, and what the server writes when a node goes down or comes back
(Nomad's nomad/heartbeat.go and the status half of nomad/node_endpoint.go).

A node's deadline itself is not kept here: it is an etcd lease that the node's heartbeats
renew (runtime/server/cluster/server.py), so it outlives a change of leader and no server tracks
timers. When the lease lapses the leader writes `node_down_changes(...)`: the node `down` (or
`disconnected` when one of its allocations may outlive a disconnect), a "Node heartbeat
missed" event and one `node-update` evaluation per job with work on the node, so the
scheduler marks those allocations lost (or unknown) and replaces them. When the node
heartbeats again, `node_up_changes(...)` gives the way back, again with evaluations.

TTLs are computed in integer nanoseconds, as Go's `time.Duration` does, so the formula is
Nomad's to the nanosecond; `heartbeat_ttl` hands them back as float seconds. What is written (a
node's StatusUpdatedAt, an event's Timestamp, an evaluation's CreateTime) is wall-clock Unix
nanoseconds (`wall_ns`), as Nomad stores it.

Not modelled (yurt's structs lack the fields): node pools that do not exist yet (Nomad keeps
such a node `initializing`), node identities, and Node.LastMissedHeartbeatIndex /
LastAllocUpdateIndex, which the caller passes as `allocs_updated`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import msgspec

from yurt.runtime.server.nodestate import MAX_EVENTS
from yurt.runtime.server.scheduler.binpack import glob_match
from yurt.runtime.server.scheduler.drain import from_unix_ns
from yurt.runtime.structs import (
    ALLOC_CLIENT_UNKNOWN,
    ALLOC_DESIRED_RUN,
    NODE_STATUS_DISCONNECTED,
    NODE_STATUS_DOWN,
    NODE_STATUS_INIT,
    NODE_STATUS_READY,
    TRIGGER_NODE_UPDATE,
    Allocation,
    Evaluation,
    Job,
    Node,
    NodeEvent,
    is_client_terminal,
)

SECOND_NS: Final = 1_000_000_000

#: Nomad's server defaults (nomad/config.go).
MIN_HEARTBEAT_TTL: Final = 10.0
MAX_HEARTBEATS_PER_SECOND: Final = 50.0
FAILOVER_HEARTBEAT_TTL: Final = 300.0

#: helper/cluster.go `minRate`: below one action a day the rate is not scaled.
_MIN_RATE: Final = 1.0 / 86400


#: Nomad's node event messages and subsystem (nomad/heartbeat.go, nomad/node_endpoint.go).
NODE_HEARTBEAT_MISSED: Final = "Node heartbeat missed"
NODE_REREGISTERED: Final = "Node reregistered by heartbeat"
NODE_REGISTERED: Final = "Node registered"  # nomad/state/state_store.go
SUBSYSTEM_CLUSTER: Final = "Cluster"

#: Nomad's `NodePoolAll`: a job in this pool may run on any node.
NODE_POOL_ALL: Final = "all"


# --------------------------------------------------------------------------- the TTL


def rate_scaled_interval_ns(rate: float, min_ns: int, n: int) -> int:
    """Nomad's `helper.RateScaledInterval`: the interval at which `n` actors together act
    `rate` times a second, never below `min_ns`."""
    if rate <= _MIN_RATE:
        return min_ns
    interval = int(float(SECOND_NS) * float(n) / rate)  # Go's conversion truncates
    return max(interval, min_ns)


def random_stagger_ns(interval_ns: int, rng: random.Random) -> int:
    """Nomad's `helper.RandomStagger`: uniform in [0, interval), from a non-negative int63."""
    if interval_ns <= 0:
        return 0
    return rng.getrandbits(63) % interval_ns


def heartbeat_ttl(node_count: int, rng: random.Random, *, min_ttl: float = MIN_HEARTBEAT_TTL,
                  max_per_second: float = MAX_HEARTBEATS_PER_SECOND) -> float:
    """The TTL the leader hands a heartbeating node, in seconds.

    Nomad's `resetHeartbeatTimer`: `RateScaledInterval(max_per_second, min_ttl, node_count)`
    plus `RandomStagger` of that, so the result lies in [base, 2 × base) where `base` is
    `max(min_ttl, node_count / max_per_second)`: 10–20 s up to 500 nodes by default, then
    growing so the cluster as a whole stays under 50 heartbeats a second. The jitter spreads
    nodes that registered together (after a leader change) over time.

    Args:
        node_count: the nodes the leader tracks (Nomad counts its heartbeat timers).
        rng: the randomness (seed it in tests).
    """
    base = rate_scaled_interval_ns(max_per_second, round(min_ttl * SECOND_NS), node_count)
    return (base + random_stagger_ns(base, rng)) / SECOND_NS


# --------------------------------------------------------------------------- what is written


@dataclass(frozen=True)
class NodeStatusChange:
    """What the server writes for a node status change (Nomad's Node.UpdateStatus).

    `node` is the node as it is to be stored (a copy: the caller's is untouched), or None when
    nothing about the node changes (a heartbeat from a node already ready). `evaluations` are
    the `node-update` evaluations to create with it, pending.
    """

    node: Node | None
    evaluations: list[Evaluation] = field(default_factory=list)

    @property
    def status(self) -> str | None:
        return self.node.status if self.node is not None else None


def _job_pool(job: Job) -> str:
    return job.node_pool or "default"


def _wants_eval(alloc: Allocation, job: Job) -> bool:
    """Whether an allocation's job gets a node-update evaluation (createNodeEvals' switch)."""
    if job.type == "service":
        # Skipped only when the server stopped it and the client finished stopping it.
        return not (alloc.is_desired_stopped() and is_client_terminal(alloc.client_status))
    if job.type == "batch":
        # Terminal batch work is never retried, or the job's status would flap.
        return not is_client_terminal(alloc.client_status)
    # sysbatch: only periodic or register evaluations place it; system: the loop over system
    # jobs below; anything else: no node-update evaluations, as Nomad's default case.
    return False


def node_evaluations(node: Node, allocs: Iterable[Allocation],
                     jobs: Mapping[tuple[str, str], Job], *, node_index: int, wall_ns: int,
                     new_id: Callable[[], str]) -> list[Evaluation]:
    """Nomad's `createNodeEvals`: one pending `node-update` evaluation per job with live work
    on the node, then one per system job that may run on it (its pool and datacenters, not
    stopped), deduplicated by (namespace, job ID).

    Args:
        allocs: the allocations on the node (every one, terminal or not).
        jobs: the current jobs by (namespace, ID); an allocation's own `Job` wins when set (its
            type and priority are what Nomad reads), this map is the fallback and the source of
            system jobs.
        node_index: the index of the node write this follows (the evaluations'
            NodeModifyIndex; 0 when the node was not written).
    """
    evals: list[Evaluation] = []
    seen: set[tuple[str, str]] = set()

    def add(namespace: str, job_id: str, job: Job) -> None:
        evals.append(Evaluation(
            id=new_id(), namespace=namespace, priority=job.priority, type=job.type,
            triggered_by=TRIGGER_NODE_UPDATE, job_id=job_id, node_id=node.id,
            node_modify_index=node_index, create_time=wall_ns, modify_time=wall_ns))
        seen.add((namespace, job_id))

    for alloc in allocs:
        key = (alloc.namespace, alloc.job_id)
        if key in seen:
            continue
        job = alloc.job if alloc.job is not None else jobs.get(key)
        if job is None or not _wants_eval(alloc, job):
            continue
        add(alloc.namespace, alloc.job_id, job)
    for (namespace, _), job in sorted(jobs.items()):
        if job.type != "system" or (namespace, job.id) in seen or job.stop:
            continue
        pool = _job_pool(job)
        if pool != NODE_POOL_ALL and pool != node.node_pool:
            continue
        if not any(glob_match(dc, node.datacenter) for dc in job.datacenters):
            continue
        add(namespace, job.id, job)
    return evals


def status_change_requires_eval(new: str, old: str) -> bool:
    """Nomad's `nodeStatusTransitionRequiresEval` (a node going `down` always does, through
    `ShouldDrainNode`, checked by the callers)."""
    return ((old == NODE_STATUS_INIT and new == NODE_STATUS_READY)
            or (old == NODE_STATUS_DOWN and new == NODE_STATUS_READY)
            or (old == NODE_STATUS_DISCONNECTED) != (new == NODE_STATUS_DISCONNECTED))


def _written(node: Node, status: str, message: str | None, *, index: int,
             wall_ns: int) -> Node:
    # Nomad's updateNodeStatusTxn: status, StatusUpdatedAt (Unix seconds), the event with the
    # write's index, the last MAX_EVENTS events kept. StatusDescription is left as it was:
    # Nomad does not touch it on a status change.
    events = list(node.events)
    if message is not None:
        events.append(NodeEvent(message=message, subsystem=SUBSYSTEM_CLUSTER,
                                timestamp=from_unix_ns(wall_ns), create_index=index))
    return msgspec.structs.replace(node, status=status, status_updated_at=wall_ns // SECOND_NS,
                                   events=events[-MAX_EVENTS:], modify_index=index)


def _always_lost(alloc: Allocation) -> int:
    return 0


def disconnect_state(node: Node, allocs: Iterable[Allocation], *, wall_ns: int,
                     lost_after: Callable[[Allocation], int] = _always_lost,
                     unknown_since: Mapping[str, int] | None = None) -> tuple[bool, bool]:
    """Nomad's `disconnectState`: (the node has an allocation that may outlive a disconnect,
    one such allocation still wants to run and its window has not run out).

    Args:
        lost_after: an allocation's group's `disconnect.lost_after` (or the older
            `max_client_disconnect`) in ns, 0 when it has none. yurt's TaskGroup does not carry
            these yet; the caller reads them from wherever the job spec keeps them.
        unknown_since: Unix ns at which each `unknown` allocation became unknown (Nomad reads
            it from the allocation's AllocStates); an unknown allocation without an entry
            never expires, as Nomad's zero LastUnknown.
    """
    if node.status in (NODE_STATUS_DOWN, NODE_STATUS_INIT):
        return False, False
    since = unknown_since or {}
    can_disconnect = False
    for alloc in allocs:
        window = lost_after(alloc)
        if window <= 0:
            continue
        can_disconnect = True
        started = since.get(alloc.id)
        expired = (alloc.client_status == ALLOC_CLIENT_UNKNOWN and started is not None
                   and started + window <= wall_ns)
        if alloc.desired_status == ALLOC_DESIRED_RUN and not expired:
            return True, True
    return can_disconnect, False


def node_down_changes(node: Node, allocs: Iterable[Allocation],
                      jobs: Mapping[tuple[str, str], Job], *, index: int, wall_ns: int,
                      new_id: Callable[[], str],
                      lost_after: Callable[[Allocation], int] = _always_lost,
                      unknown_since: Mapping[str, int] | None = None) -> NodeStatusChange:
    """What the leader writes when a node's heartbeat deadline passes (Nomad's
    `invalidateHeartbeat` followed by `Node.UpdateStatus`).

    The node becomes `down`, or `disconnected` when `disconnect_state` says one of its
    allocations may ride out the disconnect; either way with a "Node heartbeat missed" event
    (subsystem Cluster) and a `node-update` evaluation per job with live work on it (a node
    going down always triggers them; going disconnected does as a transition into
    `disconnected`).

    Args:
        allocs: every allocation on the node.
        jobs: the current jobs by (namespace, ID) (see `node_evaluations`).
        index: the index the node write takes (its ModifyIndex, the event's CreateIndex, the
            evaluations' NodeModifyIndex).
        wall_ns: the wall-clock time of the write, Unix ns.
    """
    allocs = list(allocs)
    can_disconnect, pending_reconnects = disconnect_state(
        node, allocs, wall_ns=wall_ns, lost_after=lost_after, unknown_since=unknown_since)
    status = (NODE_STATUS_DISCONNECTED if can_disconnect and pending_reconnects
              else NODE_STATUS_DOWN)
    updated = _written(node, status, NODE_HEARTBEAT_MISSED, index=index, wall_ns=wall_ns)
    evals: list[Evaluation] = []
    if status == NODE_STATUS_DOWN or status_change_requires_eval(status, node.status):
        evals = node_evaluations(node, allocs, jobs, node_index=index, wall_ns=wall_ns,
                                 new_id=new_id)
    return NodeStatusChange(updated, evals)


def node_up_changes(node: Node, allocs: Iterable[Allocation],
                    jobs: Mapping[tuple[str, str], Job], *, index: int, wall_ns: int,
                    new_id: Callable[[], str], status: str = NODE_STATUS_READY,
                    allocs_updated: bool = True) -> NodeStatusChange:
    """What the server writes when a node heartbeats with `status` (Nomad's Node.UpdateStatus
    as a client calls it).

    - `down` → `ready`: ready, with a "Node reregistered by heartbeat" event, and evaluations
      (its jobs get their allocations back in the plan; system jobs place on it again);
    - `disconnected` → `ready`: `initializing` first, as Nomad (the client must report its
      allocations before it is trusted again), with evaluations (leaving `disconnected`);
    - `initializing` → `ready`: ready with evaluations, unless the node has live allocations
      and has not sent an allocation update since it missed a heartbeat (`allocs_updated`
      False: Nomad's LastAllocUpdateIndex ≤ LastMissedHeartbeatIndex), then it stays
      initializing;
    - same status: no write (`node` None) and no evaluations.

    Args: as `node_down_changes`; `index` is used only when the node is written.
    """
    allocs = list(allocs)
    new = status
    if node.status == NODE_STATUS_INIT and status == NODE_STATUS_READY:
        if not allocs_updated and any(not a.is_terminal() for a in allocs):
            new = NODE_STATUS_INIT
    elif node.status == NODE_STATUS_DISCONNECTED and status == NODE_STATUS_READY:
        new = NODE_STATUS_INIT
    updated: Node | None = None
    node_index = 0
    if new != node.status:
        message = NODE_REREGISTERED if node.status == NODE_STATUS_DOWN else None
        updated = _written(node, new, message, index=index, wall_ns=wall_ns)
        node_index = index
    evals: list[Evaluation] = []
    if new == NODE_STATUS_DOWN or status_change_requires_eval(new, node.status):
        evals = node_evaluations(node, allocs, jobs, node_index=node_index, wall_ns=wall_ns,
                                 new_id=new_id)
    return NodeStatusChange(updated, evals)


#: The node fields the scheduler's feasibility checks read: a registration that changes one
#: of them is re-evaluated even without a status change (Nomad's shouldCreateNodeEval).
_FEASIBILITY_FIELDS: Final = ("id", "datacenter", "name", "node_class", "attributes", "meta",
                              "drivers", "host_volumes")


def node_register_changes(original: Node | None, registered: Node,
                          allocs: Iterable[Allocation], jobs: Mapping[tuple[str, str], Job],
                          *, index: int, wall_ns: int,
                          new_id: Callable[[], str]) -> NodeStatusChange:
    """What the server writes when a node registers (Nomad's Node.Register).

    A registration never changes a known node's status (only heartbeats do: a `down` node
    that registers stays down until its first heartbeat, `node_up_changes`); a new node
    starts as what it sent, `initializing` by default. Evaluations follow when the status
    transition asks for them, the node is `down`, or a field the feasibility checks read
    changed (devices are compared through `node_resources`).
    """
    status = registered.status or NODE_STATUS_INIT
    if original is not None and original.status:
        status = original.status
    # Nomad's upsertNodeTxn: a known node keeps its events, eligibility, drain and create
    # index; a new one starts with a "Node registered" event stamped with its StatusUpdatedAt.
    seconds = wall_ns // SECOND_NS
    if original is not None:
        node = msgspec.structs.replace(
            registered, status=status, status_updated_at=seconds, modify_index=index,
            create_index=original.create_index, events=list(original.events),
            scheduling_eligibility=original.scheduling_eligibility,
            drain_strategy=original.drain_strategy, drain=original.drain,
            last_drain=original.last_drain)
    else:
        event = NodeEvent(message=NODE_REGISTERED, subsystem=SUBSYSTEM_CLUSTER,
                          timestamp=from_unix_ns(seconds * SECOND_NS), create_index=index)
        node = msgspec.structs.replace(registered, status=status, status_updated_at=seconds,
                                       modify_index=index, create_index=index, events=[event])
    if original is None:
        wants = status_change_requires_eval(status, NODE_STATUS_INIT)
    else:
        wants = (status_change_requires_eval(status, original.status)
                 or any(getattr(original, f) != getattr(registered, f)
                        for f in _FEASIBILITY_FIELDS)
                 or original.node_resources.devices != registered.node_resources.devices)
    evals: list[Evaluation] = []
    if status == NODE_STATUS_DOWN or wants:
        evals = node_evaluations(node, allocs, jobs, node_index=index, wall_ns=wall_ns,
                                 new_id=new_id)
    return NodeStatusChange(node, evals)

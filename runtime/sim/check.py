"""The whole-cluster simulation's invariants: what must hold after every step (safety) and
once the cluster was healed and left alone (liveness).

Safety, after each step (`safety`):
- **No allocation runs twice.** Ground truth: the simulated runners of every live node; an
  allocation ID running (client status `running`) on two nodes, or on a node other than
  the one it was placed on, is a violation. Checked after each step, and at the instant a
  runner reports `running` (`runner_update`).
- **One live copy per allocation name.** In every running server's view (after each
  step) and the observer's (after every revision it applies): among allocations the
  servers want running (desired `run`, client status not terminal), one per (namespace,
  job, name). Weakened only where Nomad's semantics allow two: a group with a disconnect
  window (`max_client_disconnect`) keeps the original on a disconnected node (`unknown`)
  beside its replacement, and when the node comes back both may be live until the
  scheduler picks one (`duplicate_names`). After settling, one per name is required
  (liveness). Canaries would be the other case (a canary takes the name of the
  allocation it replaces); the scenarios use none, so that case is not weakened.
- **No placement on a down or ineligible node**, checked at commit time by the
  `ObserverServer`: before it applies a revision, every allocation that revision creates
  (desired `run`) must be on a node that its view — the state just before that commit —
  holds `ready` (or `initializing`, see `PLACEABLE`) and `eligible`. Exact: a later change
  of the node cannot make it fail.
- **No server dies** of an exception (`SimCluster.failures`).
- **Indexes never go back**: each server's `visible_index` (across its restarts: the state
  is etcd's), each node incarnation's pulled index, and, in the observer, the counter and
  each allocation's ModifyIndex and AllocModifyIndex revision after revision.

Liveness, after `heal` and a bounded settle (`liveness`):
- every job not stopped converges: a service job has, for each of its `count` names, one
  allocation of its current version running in the servers' view, and the live runners
  running it number exactly `count`; a batch job has one complete allocation per name;
- a stopped job has no allocation the servers want running and no live runner running;
- every live runner running belongs to an allocation the servers want running (a purged
  job's, or a stopped one's, is stopped on its node);
- every lost allocation is replaced (an allocation names it as `previous_allocation`) or
  its job converged anyway;
- no server answered a node call with a 5xx (an unexpected exception in a server).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from yurt.runtime.server.cluster.server import ClusterServer
from yurt.runtime.server.scheduler.disconnect import lost_after
from yurt.runtime.server.state.etcd import ClusterChange
from yurt.runtime.structs import (
    ALLOC_CLIENT_COMPLETE,
    ALLOC_CLIENT_LOST,
    ALLOC_CLIENT_RUNNING,
    ALLOC_CLIENT_UNKNOWN,
    ALLOC_DESIRED_RUN,
    NODE_ELIGIBLE,
    NODE_STATUS_INIT,
    NODE_STATUS_READY,
    Allocation,
    Job,
    is_client_terminal,
)

# A type-only cycle inside sim/, kept on purpose: the checks read the cluster they judge, and
# cluster.py runs them after each step; no run-time import.
if TYPE_CHECKING:
    from yurt.runtime.sim.cluster import SimCluster


#: Node statuses a placement may go to. `initializing` too: yurt's scheduler counts it as
#: ready (server/scheduler/binpack.py), and in a cluster a node is `initializing` only between
#: coming back from `disconnected` and its next heartbeat (server/cluster/heartbeat.py
#: `node_up_changes`). Nomad places only on `ready` nodes; that difference is known and
#: reported on its own, not a placement on a node that is down.
PLACEABLE: Final = (NODE_STATUS_READY, NODE_STATUS_INIT)


class InvariantViolation(Exception):
    """An invariant failed; the message lists each violation."""


class ObserverServer(ClusterServer):
    """A follower that never leads and serves no node: it checks each revision before it
    applies it (`violations`), and keeps what it saw for the liveness checks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.violations: list[str] = []
        #: How many allocations the servers created (the runs report it).
        self.placed = 0

    def _apply(self, change: ClusterChange) -> None:
        if change.index is not None and change.index < self.visible_index:
            self.violations.append(f"the index went back: {self.visible_index} → "
                                   f"{change.index} (revision {change.revision})")
        for alloc in change.allocs.put.values():
            before = self.allocs.get(alloc.id)
            if before is None:
                self.placed += 1
                if alloc.desired_status == ALLOC_DESIRED_RUN and not is_client_terminal(
                        alloc.client_status):
                    node = self.cluster_nodes.get(alloc.node_id)
                    if node is None or node.status not in PLACEABLE or (
                            node.scheduling_eligibility != NODE_ELIGIBLE):
                        state = "unknown" if node is None else (
                            f"{node.status}/{node.scheduling_eligibility}")
                        self.violations.append(
                            f"allocation {alloc.name} ({alloc.id[:8]}) placed on node "
                            f"{alloc.node_id[:8]} which is {state} (revision "
                            f"{change.revision})")
            elif (alloc.modify_index < before.modify_index
                  or alloc.alloc_modify_index < before.alloc_modify_index):
                self.violations.append(
                    f"allocation {alloc.name} ({alloc.id[:8]}): modify index "
                    f"{before.modify_index}/{before.alloc_modify_index} → "
                    f"{alloc.modify_index}/{alloc.alloc_modify_index}")
        super()._apply(change)
        if any(not a.is_terminal() for a in change.allocs.put.values()):
            self.violations += [f"{v} (revision {change.revision})"
                                for v in duplicate_names("observer", self.allocs.values())]


def _wanted(allocs: Iterable[Allocation]) -> list[Allocation]:
    """What the servers want running: desired `run`, not terminal on the client."""
    return [a for a in allocs
            if a.desired_status == ALLOC_DESIRED_RUN and not is_client_terminal(a.client_status)]


def duplicate_names(view: str, allocs: Iterable[Allocation]) -> list[str]:
    """More than one allocation the servers want running under one (namespace, job,
    name), not counting the originals Nomad lets stand beside their replacements: one on a
    disconnected node (`unknown`, within its group's disconnect window), and one whose
    node came back while the scheduler has not yet picked between it and what replaced it
    (directly, or through replacements that failed or were lost meanwhile)."""
    every = {a.id: a for a in allocs}
    wanted = _wanted(every.values())
    replaced: set[str] = set()  # ancestors of a wanted allocation (its chain of replacements)
    for a in wanted:
        previous = a.previous_allocation
        while previous and previous not in replaced:
            replaced.add(previous)
            before = every.get(previous)
            previous = before.previous_allocation if before is not None else ""
    names: dict[tuple[str, str, str], list[Allocation]] = {}
    for a in wanted:
        if not _disconnect_original(a, replaced):
            names.setdefault((a.namespace, a.job_id, a.name), []).append(a)
    return [f"{view}: {len(same)} live allocations named {key[2]}: "
            + "; ".join(describe(a) for a in same)
            for key, same in sorted(names.items()) if len(same) > 1]


def describe(alloc: Allocation) -> str:
    """One allocation, as a violation's message shows it."""
    return (f"{alloc.id[:8]} on {alloc.node_id[:8]} v{alloc.job.version if alloc.job else '?'} "
            f"{alloc.desired_status}/{alloc.client_status} "
            f"prev={alloc.previous_allocation[:8] or '-'} "
            f"next={alloc.next_allocation[:8] or '-'} modify={alloc.modify_index}")


def _disconnect_original(alloc: Allocation, replaced: set[str]) -> bool:
    if lost_after(alloc) <= 0:
        return False
    return alloc.client_status == ALLOC_CLIENT_UNKNOWN or alloc.id in replaced


def runner_update(cluster: SimCluster, node_id: str, alloc: Allocation) -> None:
    """A node's runner reported `alloc`: running here while running on another live node
    is a violation, recorded at the instant it happens (the observer's list)."""
    if alloc.client_status != ALLOC_CLIENT_RUNNING or cluster.observer is None:
        return
    for slot in cluster.nodes:
        if slot.sim is None or slot.id == node_id:
            continue
        other = slot.sim.client.runners.get(alloc.id)
        if other is not None and other.client_status() == ALLOC_CLIENT_RUNNING:
            cluster.observer.violations.append(
                f"allocation {alloc.name} ({alloc.id[:8]}) started running on "
                f"{node_id[:8]} while running on {slot.id[:8]}")


class IndexWatch:
    """The highest index seen per component, to tell one that went back."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def check(self, name: str, index: int) -> list[str]:
        before = self.seen.get(name, 0)
        self.seen[name] = max(before, index)
        return [f"{name}: index went back {before} → {index}"] if index < before else []


def running_runners(cluster: SimCluster) -> dict[str, list[tuple[str, Allocation]]]:
    """Ground truth: per allocation ID, the (node, allocation) of each live runner running
    it."""
    running: dict[str, list[tuple[str, Allocation]]] = {}
    for slot in cluster.nodes:
        if slot.sim is None:
            continue
        for alloc_id, runner in slot.sim.client.runners.items():
            if runner.client_status() == ALLOC_CLIENT_RUNNING:
                running.setdefault(alloc_id, []).append((slot.id, runner.alloc))
    return running


def safety(cluster: SimCluster, indexes: IndexWatch) -> list[str]:
    """Every safety violation now (see the module header); empty when all hold."""
    found: list[str] = []
    observer = cluster.observer
    assert observer is not None
    found += observer.violations + cluster.failures
    observer.violations = []
    for alloc_id, where in running_runners(cluster).items():
        if len(where) > 1:
            found.append(f"allocation {alloc_id[:8]} runs on {len(where)} nodes: "
                         f"{sorted(n[:8] for n, _ in where)}")
        for node_id, alloc in where:
            if alloc.node_id != node_id:
                found.append(f"allocation {alloc_id[:8]} placed on {alloc.node_id[:8]} "
                             f"runs on {node_id[:8]}")
    views: list[tuple[str, ClusterServer]] = [("observer", observer)]
    views += [(s.name, s.server) for s in cluster.servers if s.server is not None]
    for name, server in views:
        found += duplicate_names(name, server.allocs.values())
        if name != "observer":
            found += indexes.check(f"server {name}", server.visible_index)
    for slot in cluster.nodes:
        if slot.sim is not None:
            found += indexes.check(f"node {slot.node.name}#{slot.starts}",
                                   slot.sim.remote.visible_index)
    return found


def _converged(job: Job, allocs: list[Allocation],
               running: dict[str, list[tuple[str, Allocation]]]) -> str | None:
    """Why `job` has not converged, or None when it has."""
    group = job.task_groups[0]
    names = {f"{job.id}.{group.name}[{i}]" for i in range(group.count)}
    if job.stop:
        live = _wanted(allocs)
        runs = [i for i, w in running.items() if any(a.job_id == job.id for _, a in w)]
        if live or runs:
            return f"stopped, yet {len(live)} wanted and {len(runs)} running"
        return None
    if job.type == "batch":
        done = {a.name for a in allocs if a.client_status == ALLOC_CLIENT_COMPLETE}
        if not names <= done:
            return f"batch: {sorted(names - done)} not complete"
        return None
    current = [a for a in _wanted(allocs) if a.client_status == ALLOC_CLIENT_RUNNING
               and a.job is not None and a.job.version == job.version]
    have = Counter(a.name for a in current)
    if set(have) != names or any(n != 1 for n in have.values()):
        return f"service: running {dict(sorted(have.items()))}, want {sorted(names)}"
    runners = sum(1 for w in running.values() for _, a in w if a.job_id == job.id)
    if runners != group.count:
        return f"service: {runners} runners running, want {group.count}"
    return None


def liveness(cluster: SimCluster) -> list[str]:
    """Every liveness violation now (see the module header); empty when all hold. Meant
    for a healed cluster that had time to settle."""
    observer = cluster.observer
    assert observer is not None
    found: list[str] = []
    running = running_runners(cluster)
    by_job: dict[str, list[Allocation]] = {}
    for alloc in observer.allocs.values():
        by_job.setdefault(alloc.job_id, []).append(alloc)
    converged: set[str] = set()
    for job in sorted(observer.jobs.values(), key=lambda j: j.id):
        why = _converged(job, by_job.get(job.id, []), running)
        if why is None:
            converged.add(job.id)
        else:
            found.append(f"job {job.id} (v{job.version}, count "
                         f"{job.task_groups[0].count}): {why}")
    for alloc_id, where in sorted(running.items()):
        known = observer.allocs.get(alloc_id)
        if known is None or known.desired_status != ALLOC_DESIRED_RUN:
            state = "gone" if known is None else f"desired {known.desired_status}"
            found.append(f"allocation {alloc_id[:8]} ({where[0][1].name}) still runs on "
                         f"{where[0][0][:8]}, yet the servers have it {state}")
    replaced = {a.previous_allocation for a in observer.allocs.values()}
    for alloc in observer.allocs.values():
        if (alloc.client_status == ALLOC_CLIENT_LOST and alloc.id not in replaced
                and alloc.job_id not in converged):
            found.append(f"lost allocation {alloc.name} ({alloc.id[:8]}) not replaced")
    found += [f"a server failed a node call: {e}" for e in cluster.network.errors]
    return found

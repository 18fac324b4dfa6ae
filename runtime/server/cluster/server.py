"""`ClusterServer`: the embedded server's logic over the cluster's state in etcd.

Every `yurt server` holds the whole cluster state in memory (`LocalServer`'s maps, plus the
nodes), read once from etcd (`ClusterStore.snapshot`) and kept current by a watch on the key
prefix. A change is decided on that view under the server's lock and written as one etcd
transaction that compares the counter key's revision with the one the view has seen
(`StoreConflict` otherwise): two servers never both commit a decision made on the same state.
A conflicted operation changes nothing; it waits until the watch has brought the view up to
date and runs again from the top (`_retrying`).

Only the leader (runtime/server/cluster/leader.py) runs the scheduler: an evaluation written by any
server is stored `pending` and processed by whoever leads, now or after a failover, so a
leader lost mid-evaluation loses nothing (the evaluation is still pending) and does nothing
twice (processing commits the plan and the evaluation's outcome in one transaction).

Invariants:
- The watch applies a revision only if it is newer than what this server has applied or
  written itself; every write moves the counter key, so a successful compare means every
  earlier revision was already applied here.
- Node liveness is etcd's: each node's heartbeat keeps a lease alive that holds its key
  under `<prefix>alive/`; when the lease lapses etcd deletes the key and the leader marks
  the node down (its allocations are then lost and replaced by the scheduler).

Load at 1,000 nodes (what one server on two cores must take):
- A heartbeat is one lease keepalive. The binding transaction is skipped when this server's
  watch of the alive keys shows the key bound to the lease it renews (`_keep_alive`), and a
  lease is granted with headroom and kept while it covers the TTL told plus the grace, so a
  growing cluster does not re-grant one at nearly every heartbeat.
- Nodes' allocation updates are batched as Nomad's Node.UpdateAlloc does (`batchUpdate`,
  `batchUpdateInterval` = 50 ms): every post that arrives within 50 ms of the first shares
  one commit (`update_node_allocs`, `_run_update_batches`). Each caller is answered when
  the commit carrying its updates is done, or gets its error (its node sends again).
  The batcher is a task of `follow`'s nursery: every server runs `follow` for as long as
  it serves, and a caller that gives up (its request timed out) leaves its updates to be
  committed anyway, as Nomad's do. Rejected: flush-on-demand by the first waiter, whose
  cancellation would cancel, or orphan, the commit of everyone else in its batch.
- A plan larger than one etcd transaction takes fails its evaluation with the reason
  (`_process`); the leader goes on leading.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec
import trio

from yurt.runtime.eventstream import Event, EventBroker, alloc_event, deployment_event, job_event
from yurt.runtime.server.cluster.etcd.client import (
    Compare,
    EtcdCompacted,
    EtcdError,
    Op,
    WatchEvent,
)
from yurt.runtime.server.cluster.etcd.kv import KV
from yurt.runtime.server.cluster.heartbeat import (
    FAILOVER_HEARTBEAT_TTL,
    MAX_HEARTBEATS_PER_SECOND,
    MIN_HEARTBEAT_TTL,
    SECOND_NS,
    NodeStatusChange,
    heartbeat_ttl,
    node_down_changes,
    node_evaluations,
    node_register_changes,
    node_up_changes,
    rate_scaled_interval_ns,
    status_change_requires_eval,
)
from yurt.runtime.server.deploymentwatcher import Outcome
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.records import Registration, eval_event, new_id, without_job
from yurt.runtime.server.schedconfig import SchedulerConfiguration
from yurt.runtime.server.scheduler.disconnect import lost_after
from yurt.runtime.server.scheduler.plan import Plan
from yurt.runtime.server.state.etcd import (
    ClusterChange,
    ClusterSnapshot,
    ClusterStore,
    StoreConflict,
    StoreTooLarge,
)
from yurt.runtime.structs import (
    ALLOC_CLIENT_UNKNOWN,
    EVAL_STATUS_BLOCKED,
    EVAL_STATUS_FAILED,
    EVAL_STATUS_PENDING,
    NODE_ELIGIBLE,
    NODE_INELIGIBLE,
    NODE_STATUS_DISCONNECTED,
    NODE_STATUS_DOWN,
    NODE_STATUS_READY,
    TRIGGER_ALLOC_STOP,
    ZERO_TIME,
    Allocation,
    Evaluation,
    Job,
    Node,
)
from yurt.runtime.structs.noderpc import HEARTBEAT_GRACE
from yurt.runtime.structs.submission import JobSubmission
from yurt.runtime.structs.update import Deployment

log = logging.getLogger("yurt.cluster.server")
_config = msgspec.json.Decoder(SchedulerConfiguration)

T = TypeVar("T")

#: How often one operation is tried again after a conflict before it gives up.
MAX_ATTEMPTS: Final = 100
#: How long a conflicted operation waits for the watch before trying again anyway.
CATCH_UP_WAIT: Final = 1.0
#: Nomad's `batchUpdateInterval`: node allocation updates arriving within this window of
#: the first share one commit.
BATCH_UPDATE_INTERVAL: Final = 0.05
#: Allocation updates per batch commit at most. etcd applies a transaction at once, and a
#: lease keepalive waits until what was committed before it is applied: one commit of every
#: update of 1,000 nodes held the heartbeats up for seconds (measured before allocations
#: were stored without their job; smaller rows apply faster, the cap keeps the bound).
#: Nomad has no such cap (its heartbeats are no Raft writes).
MAX_BATCH_UPDATES: Final = 1000
#: A node's lease is granted this much longer than the cluster's size calls for now, so
#: it still covers the heartbeats of a cluster that grew meanwhile (fewer re-grants).
LEASE_HEADROOM: Final = 1.25


class UpdateNotCommitted(Exception):
    """A node's allocation updates were not committed (the server stopped first)."""


@dataclass(eq=False)
class _PendingUpdate:
    """One node's update post, waiting for the batch commit that carries it."""

    updates: list[Allocation]
    done: trio.Event = field(default_factory=trio.Event)
    index: int = 0
    error: BaseException | None = None

    def answer(self, index: int, error: BaseException | None = None) -> None:
        self.index, self.error = index, error
        self.done.set()


class NodeAuthError(Exception):
    """A node RPC with a missing or wrong SecretID, or about another node (HTTP 403)."""


class UnknownNode(Exception):
    """A heartbeat from a node the cluster does not know (HTTP 404: register again)."""


@dataclass(frozen=True)
class HeartbeatConfig:
    """Nomad's server heartbeat settings (`min_heartbeat_ttl`, `max_heartbeats_per_second`,
    `heartbeat_grace`), shortened by tests."""

    min_ttl: float = MIN_HEARTBEAT_TTL
    max_per_second: float = MAX_HEARTBEATS_PER_SECOND
    grace: float = HEARTBEAT_GRACE
    #: Nomad's `failover_heartbeat_ttl`: what a new leader gives a node whose heartbeats
    #: nobody took while no server led, before calling it down.
    failover_ttl: float = FAILOVER_HEARTBEAT_TTL


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ClusterServer(LocalServer):
    def __init__(self, broker: EventBroker, store: ClusterStore, kv: KV, prefix: bytes, *,
                 heartbeat: HeartbeatConfig | None = None,
                 unix_clock: Callable[[], int] = time.time_ns,
                 rng: random.Random | None = None) -> None:
        # A server is no node: the scheduler places over `nodes()`; this placeholder is never
        # listed or placed on (LocalServer's single-node parts do not run in a cluster).
        super().__init__(Node(id="", name="", status=NODE_STATUS_DOWN), broker, store,
                         owns_events=True, reschedule=True, unix_clock=unix_clock)
        self.cluster_store = store
        self.kv = kv
        self.prefix = prefix
        self._config_key = prefix + b"objects/scheduler-config"
        self.alive_prefix = prefix.rstrip(b"/") + b"-alive/"
        self.heartbeat = heartbeat or HeartbeatConfig()
        self._rng = rng or random.Random()
        self.cluster_nodes: dict[str, Node] = {}
        #: The etcd revision this view has applied (through the watch or its own writes).
        self.applied_revision = 0
        self._applied = trio.Event()
        #: Whether this server leads now: only the leader runs the scheduler.
        self.leading = False
        #: A commit was refused since the watch last applied a change: this view is behind.
        self._stale = False
        #: Per node, the lease this server renews for its alive key.
        self._leases: dict[str, int] = {}
        #: Per node, the lease its alive key is bound to in etcd and the revision that says
        #: so (this server's binding writes and its watch of the alive keys, newest wins).
        self._bound: dict[str, tuple[int, int]] = {}
        #: Update posts waiting for the next batch commit (`_run_update_batches`).
        self._update_queue: list[_PendingUpdate] = []
        self._updates_waiting = trio.Event()
        #: When (trio clock) the first post of the batch being gathered arrived.
        self._batch_opened = 0.0
        self._node_index: dict[str, int] = {}
        self._node_index_at = -1
        #: Per node, the allocations it held when the indexes were last computed, and the
        #: index at which one was last seen gone.
        self._node_held: dict[str, set[str]] = {}
        self._node_removed: dict[str, int] = {}
        self._loaded_at = 0

    # ------------------------------------------------------------------ state

    def nodes(self) -> list[Node]:
        return list(self.cluster_nodes.values())

    def allocs_on(self, node_id: str) -> list[Allocation]:
        return [a for a in self.allocs.values() if a.node_id == node_id]

    async def load(self) -> None:
        snap = await self.cluster_store.snapshot()
        self._load_snapshot(snap)
        stored, _ = await self.kv.get(self._config_key)
        if stored is not None:
            self.scheduler_config = _config.decode(stored.value)

    async def set_scheduler_config(self, config: SchedulerConfiguration, cas: int | None
                                   ) -> tuple[bool, int]:
        """Nomad's Operator.SchedulerSetConfiguration for the cluster: stored in etcd with
        the index (every server's scheduler reads it through the watch); (updated, index),
        not updated when `cas` is not the current ModifyIndex."""
        async def attempt() -> tuple[bool, int]:
            async with self._lock:
                current = self.scheduler_config
                if cas is not None and cas != current.modify_index:
                    await trio.lowlevel.checkpoint()
                    return False, self.visible_index
                index = self.take_index()
                stored = msgspec.structs.replace(
                    config, create_index=current.create_index or index, modify_index=index)
                try:
                    await self.cluster_store.save_rows(
                        index, {self._config_key: msgspec.json.encode(stored)})
                except BaseException:
                    self._undo_index()
                    raise
                self.scheduler_config = stored
                self._capacity.set()  # preemption switched on may place what waits,
                self._delayed.set()  # the eval broker unpaused processes what is pending
                self._notify_changed()
                return True, index

        return await self._retrying(attempt)

    def _load_snapshot(self, snap: ClusterSnapshot) -> None:
        self.jobs = {j.id: j for j in snap.jobs}
        self.allocs = {a.id: a for a in snap.allocs}
        self.evals = {e.id: e for e in snap.evals}
        self.versions = {}
        for version in sorted(snap.versions, key=lambda j: -j.version):
            self.versions.setdefault(version.id, []).append(version)
        self.deployments = {d.id: d for d in snap.deployments}
        self.cluster_nodes = {n.id: n for n in snap.nodes}
        self._open_evals = {}
        for ev in self.evals.values():
            if not ev.is_terminal():
                self._open_evals.setdefault(ev.job_id, set()).add(ev.id)
        self.observe_index(snap.index)
        self.applied_revision = snap.revision
        self._stale = False
        self._node_held, self._node_removed, self._node_index_at = {}, {}, -1
        self._loaded_at = self.visible_index
        self.node_alloc_index("")  # what each node holds now: later removals are seen
        self._capacity.set()
        self._delayed.set()

    async def follow(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                     ) -> None:
        """Apply every change other servers write, until cancelled. History compacted away
        before this view caught up (a server partitioned for long): read everything again.
        Its nursery also runs what every serving server needs: the watch of the alive keys'
        bindings and the batcher of node allocation updates."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._follow_bindings)
                nursery.start_soon(self._run_update_batches)
                task_status.started()
                await self._follow_state()
        finally:
            # No batcher left: nobody waits forever for a commit that will not come.
            queued, self._update_queue = self._update_queue, []
            for pending in queued:
                pending.answer(0, UpdateNotCommitted("the server stopped"))

    async def _follow_state(self) -> None:
        while True:
            try:
                async with aclosing(self.kv.watch(self.prefix,
                                                  self.applied_revision + 1)) as changes:
                    async for revision, events in changes:
                        async with self._lock:
                            self._follow_one(revision, events)
            except EtcdCompacted as e:
                log.warning("the watch fell behind etcd's history (%s): reading the whole "
                            "state again", e)
                async with self._lock:
                    while True:
                        try:
                            snapshot = await self.cluster_store.snapshot()
                            config, _ = await self.kv.get(self._config_key)
                            if config is not None:
                                self.scheduler_config = _config.decode(config.value)
                            break
                        except EtcdError as failed:
                            log.warning("cannot read the cluster state: %s", failed)
                            await trio.sleep(CATCH_UP_WAIT)
                    self._load_snapshot(snapshot)
                    self._notify_changed()

    def _follow_one(self, revision: int, events: list[WatchEvent]) -> None:
        # Our own writes are applied as they are made; every revision before one was
        # applied already (the write's compare on the counter proves it).
        if revision <= max(self.applied_revision, self.cluster_store.written_revision):
            self.applied_revision = max(self.applied_revision, revision)
        else:
            for event in events:
                if event.kv.key == self._config_key and event.type == "PUT":
                    self.scheduler_config = _config.decode(event.kv.value)
                    self._capacity.set()
                    self._delayed.set()
            self._apply(self.cluster_store.decode(revision, events))
            self.applied_revision = revision
            self._fresh()
        self._wake_applied()

    async def _persist(self, jobs: list[Job], allocs: list[Allocation],
                       evals: list[Evaluation], versions: list[Job],
                       forget: list[tuple[str, int]], deployments: list[Deployment],
                       nodes: list[Node], submissions: list[JobSubmission]) -> None:
        await self.cluster_store.save(self.index, jobs, allocs, evals, versions, forget,
                                      deployments, nodes=nodes, submissions=submissions)

    def _nodes_written(self, nodes: list[Node]) -> None:
        for node in nodes:
            self.cluster_nodes[node.id] = node

    def _fresh(self) -> None:
        """The view caught up: what a stale pass skipped is scheduled again."""
        if self._stale:
            self._stale = False
            self._capacity.set()

    def _wake_applied(self) -> None:
        self._applied.set()
        self._applied = trio.Event()

    def _apply(self, change: ClusterChange) -> None:
        """Another server's commit, as `_commit` would have made it here."""
        events: list[Event] = []
        freed = False
        for job_id in change.jobs.deleted:
            gone = self.jobs.pop(job_id, None)
            if gone is not None:
                events.append(job_event("JobDeregistered", gone))
        for job in change.jobs.put.values():
            self.jobs[job.id] = job
            events.append(job_event("JobRegistered", job))
        deleted = [self.allocs.pop(i) for i in change.allocs.deleted if i in self.allocs]
        if deleted:
            self._allocs_deleted(deleted, change.index or self.visible_index)
        for alloc in change.allocs.put.values():
            before = self.allocs.get(alloc.id)
            if before is not None and not before.is_terminal() and alloc.is_terminal():
                freed = True
            self.allocs[alloc.id] = alloc
            events.append(alloc_event(without_job(alloc)))
        for eval_id in change.evals.deleted:
            old = self.evals.pop(eval_id, None)
            if old is not None:
                self._open_evals.get(old.job_id, set()).discard(eval_id)
        for ev in change.evals.put.values():
            self.evals[ev.id] = ev
            open_evals = self._open_evals.setdefault(ev.job_id, set())
            if ev.is_terminal():
                open_evals.discard(ev.id)
            else:
                open_evals.add(ev.id)
                if ev.status == EVAL_STATUS_PENDING:
                    self._capacity.set()  # the leader processes it
                    if ev.wait_until > ZERO_TIME:
                        self._delayed.set()
            events.append(eval_event(ev))
        touched = {job_id for job_id, _ in [*change.versions.put, *change.versions.deleted]}
        for job_id in touched:
            kept = {v.version: v for v in self.versions.get(job_id, [])}
            for key in change.versions.deleted:
                if key[0] == job_id:
                    kept.pop(key[1], None)
            for key, job in change.versions.put.items():
                if key[0] == job_id:
                    kept[key[1]] = job
            if kept:
                self.versions[job_id] = sorted(kept.values(), key=lambda j: -j.version)
            else:
                self.versions.pop(job_id, None)
        for deployment_id in change.deployments.deleted:
            self.deployments.pop(deployment_id, None)
        for deployment in change.deployments.put.values():
            self.deployments[deployment.id] = deployment
            events.append(deployment_event("DeploymentStatusUpdate", deployment))
            self.deployments_changed.set()
        for node_id in change.nodes.deleted:
            self.cluster_nodes.pop(node_id, None)
        for node in change.nodes.put.values():
            self.cluster_nodes[node.id] = node
            events.append(Event(topic="Node", type="NodeRegistration", key=node.id,
                                payload={"Node": node}))
            self._capacity.set()  # a node that joined or came back may fit what waits
        if change.index is not None:
            self.observe_index(change.index)
        if freed and any(self.evals[i].status == EVAL_STATUS_BLOCKED
                         for ids in self._open_evals.values() for i in ids):
            self._capacity.set()
        self._publish(events)
        self._notify_changed()

    # ------------------------------------------------------------------ conflicts

    async def _retrying(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run `operation` (which takes the lock itself) until it commits without a
        conflict; after one, wait for the watch to bring the view up to date."""
        for _ in range(MAX_ATTEMPTS - 1):
            try:
                return await operation()
            except StoreConflict as conflict:
                self._undo_index()
                await self._catch_up(conflict.revision)
        return await operation()

    def _undo_index(self) -> None:
        # What the failed commit took is not taken: the next change gets the next index
        # after what is visible (its writer's, seen through the watch).
        self.index = self.visible_index

    async def _catch_up(self, revision: int) -> None:
        with trio.move_on_after(CATCH_UP_WAIT):
            while self.applied_revision < revision:
                await self._applied.wait()

    async def register_job(self, job: Job, submission: JobSubmission | None = None,
                           check: Callable[[Job | None], Job | None] | None = None
                           ) -> Registration:
        return await self._retrying(lambda: LocalServer.register_job(self, job, submission,
                                                                     check))

    async def register_as(self, job: Job, triggered_by: str,
                          check: Callable[[Job | None], Job | None] | None = None
                          ) -> Registration:
        return await self._retrying(lambda: LocalServer.register_as(self, job, triggered_by,
                                                                    check))

    async def deregister_job(self, job_id: str, *, purge: bool = False, eval_priority: int = 0,
                             no_shutdown_delay: bool = False) -> Registration:
        return await self._retrying(lambda: LocalServer.deregister_job(
            self, job_id, purge=purge, eval_priority=eval_priority,
            no_shutdown_delay=no_shutdown_delay))

    async def evaluate(self, job_id: str, triggered_by: str, *,
                       force_reschedule: bool = False) -> Registration:
        return await self._retrying(lambda: LocalServer.evaluate(
            self, job_id, triggered_by, force_reschedule=force_reschedule))

    async def set_stable(self, job_id: str, version: int, stable: bool) -> int:
        return await self._retrying(lambda: LocalServer.set_stable(self, job_id, version,
                                                                   stable))

    async def stop_alloc_eval(self, alloc_id: str, *, triggered_by: str = TRIGGER_ALLOC_STOP,
                              no_shutdown_delay: bool = False
                              ) -> tuple[Allocation, Evaluation]:
        return await self._retrying(lambda: LocalServer.stop_alloc_eval(
            self, alloc_id, triggered_by=triggered_by, no_shutdown_delay=no_shutdown_delay))

    # The user's deployment actions (deploymentwatcher.py). Unblock writes nothing, so it has
    # no conflict to retry. Setting health may commit twice (the health with its evaluation,
    # then an auto-promotion): a conflict on the second runs both again, on the view that
    # has the first, which writes the same health and one evaluation more.

    async def fail_deployment(self, deployment_id: str) -> Outcome:
        return await self._retrying(lambda: LocalServer.fail_deployment(self, deployment_id))

    async def pause_deployment(self, deployment_id: str, pause: bool) -> Outcome:
        return await self._retrying(lambda: LocalServer.pause_deployment(self, deployment_id,
                                                                         pause))

    async def promote_deployment(self, deployment_id: str, groups: list[str] | None
                                 ) -> Outcome:
        return await self._retrying(lambda: LocalServer.promote_deployment(
            self, deployment_id, groups))

    async def set_alloc_health(self, deployment_id: str, healthy_ids: list[str],
                               unhealthy_ids: list[str]) -> Outcome:
        return await self._retrying(lambda: LocalServer.set_alloc_health(
            self, deployment_id, healthy_ids, unhealthy_ids))

    async def update_allocs(self, batch: list[Allocation]) -> None:
        """A client's update, then the deployment watcher's decision on the health it
        carries, two commits. When the second conflicts, the retry finds the first done
        (nothing left to write) and would skip the decision: the retry decides for every
        active deployment instead, from the health no evaluation has seen (`catch_up`)."""
        from yurt.runtime.server import deploymentwatcher

        undecided = False

        async def attempt() -> None:
            nonlocal undecided
            try:
                async with self._lock:
                    if undecided:
                        await deploymentwatcher.catch_up(self)
                        undecided = False
                    await self._update_allocs(batch)
            except StoreConflict:
                undecided = True
                raise

        await self._retrying(attempt)

    @asynccontextmanager
    async def change(self, *, capacity: bool = False) -> AsyncIterator[int]:
        """`LocalServer.change`, whose index is taken again when another server wrote in
        between (the counter's write is the only one that can conflict: it comes first)."""
        while True:
            async with self._lock:
                index = self.take_index()
                try:
                    await self.cluster_store.save(index, [], [])
                except StoreConflict as e:
                    self._undo_index()
                    conflict = e
                else:
                    try:
                        yield index
                    finally:
                        if capacity:
                            self._capacity.set()
                        self._notify_changed()
                    return
            await self._catch_up(conflict.revision)

    async def gc_evals(self) -> list[str]:
        """As the embedded server's, skipped when another server wrote in between (the next
        collection, EVAL_GC_INTERVAL later, sees a fresher view)."""
        before = dict(self.allocs)
        try:
            collected = await LocalServer.gc_evals(self)
        except StoreConflict:
            self._undo_index()
            return []
        self._allocs_deleted([a for i, a in before.items() if i not in self.allocs],
                             self.visible_index)
        return collected

    async def _purge(self, job_id: str) -> None:
        gone = self.job_allocs(job_id)
        await LocalServer._purge(self, job_id)
        self._allocs_deleted(gone, self.visible_index)

    def _allocs_deleted(self, gone: list[Allocation], index: int) -> None:
        """Allocations deleted at `index` (a purge, a collection): their nodes' pull index
        moves to `index` now, on every server alike (each applies the deletion at the same
        index). Not left to `node_alloc_index`'s comparison with what a node held when it
        last looked: a server that computed nothing while the allocations lived (its nodes
        pulled from another server, then failed over to it) would never see them gone, and
        their node would run them for good."""
        moved = False
        for alloc in gone:
            if index > self._node_removed.get(alloc.node_id, 0):
                self._node_removed[alloc.node_id] = index
                moved = True
        if moved:
            # A pull during the deletion's own awaits may have cached the indexes at this
            # visible index with the allocations still held: compute them again, and wake
            # the pulls waiting on them.
            self._node_index_at = -1
            self._notify_changed()

    async def _process(self, ev: Evaluation, *, keep_if_unchanged: bool = False) -> Plan:
        """Only the leader schedules; elsewhere the evaluation stays pending for it. A
        conflict leaves it pending too: `run` tries again once the view caught up; until
        then the rest of the pass is skipped (each would be decided on the same stale view
        and refused the same way)."""
        if not self.leading or self._stale:
            # Stale: the watch's next apply clears it and asks for another pass.
            await trio.lowlevel.checkpoint()
            return Plan(eval=ev)
        try:
            return await LocalServer._process(self, ev, keep_if_unchanged=keep_if_unchanged)
        except StoreConflict:
            self._undo_index()
            self._stale = True
            return Plan(eval=ev)
        except StoreTooLarge as e:
            self._undo_index()
            return await self._fail_eval(ev, f"the plan does not fit in one etcd "
                                             f"transaction: {e}")

    async def _fail_eval(self, ev: Evaluation, reason: str) -> Plan:
        """A plan that cannot be written (larger than etcd takes at once) fails its
        evaluation with the reason, rather than ending the leader's work: written alone, the
        evaluation is small. Nomad has no such limit; the job's operator sees why in
        `yurt eval status` and can split the job."""
        log.error("evaluation %s of job %s failed: %s", ev.id, ev.job_id, reason)
        index = self.take_index()
        failed = msgspec.structs.replace(ev, status=EVAL_STATUS_FAILED,
                                         status_description=reason, modify_index=index,
                                         modify_time=self._clock())
        try:
            await self._commit([], [], evals=[failed])
        except StoreConflict:
            self._undo_index()
            self._stale = True
            return Plan(eval=ev)
        return Plan(eval=failed)

    # ------------------------------------------------------------------ leadership

    async def lead(self) -> None:
        """The leader's work, until cancelled (leadership lost): the scheduler's loops, node
        liveness and the periodic dispatcher."""
        self.leading = True
        try:
            self._capacity.set()  # what the previous leader left pending
            self._delayed.set()
            from yurt.runtime.server.periodic_dispatcher import PeriodicDispatcher

            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_liveness)
                await nursery.start(LocalServer.run, self)
                # Periodic jobs launch their children from the leader only: once per launch.
                await nursery.start(PeriodicDispatcher(self).run)
        finally:
            self.leading = False

    # ------------------------------------------------------------------ nodes

    def heartbeat_ttl(self) -> float:
        """Nomad's `RateScaledInterval` + `RandomStagger`: at least `min_ttl`, longer as
        the cluster grows so heartbeats stay under `max_per_second`."""
        return heartbeat_ttl(len(self.cluster_nodes), self._rng,
                             min_ttl=self.heartbeat.min_ttl,
                             max_per_second=self.heartbeat.max_per_second)

    def _lease_ttl(self) -> int:
        # A lease's TTL is fixed when granted, and the TTL a node is told varies by the
        # stagger: the lease covers the longest TTL one could be told, plus the grace.
        base = rate_scaled_interval_ns(self.heartbeat.max_per_second,
                                       round(self.heartbeat.min_ttl * SECOND_NS),
                                       len(self.cluster_nodes)) / SECOND_NS
        return math.ceil(2 * base + self.heartbeat.grace)

    async def check_secret(self, node_id: str, secret: str) -> None:
        # The store keeps the hashes it has seen (its own writes, the watch).
        expected = await self.cluster_store.node_secret(node_id)
        if expected is None:
            raise UnknownNode(node_id)
        if not hmac.compare_digest(expected, secret_hash(secret)):
            raise NodeAuthError("node secret does not match")

    async def register_node(self, node: Node, secret: str) -> tuple[float, int]:
        """Nomad's Node.Register: the node (ready) and its secret; its alive key under a
        fresh lease. Re-registering needs the same secret."""
        if not node.id or not secret:
            raise NodeAuthError("a node registers with an ID and a SecretID")
        try:
            await self.check_secret(node.id, secret)
        except UnknownNode:
            await self._retrying(lambda: self._save_secret(node.id, secret_hash(secret)))
        await self._keep_alive(node.id, force_new=True)
        index = await self._retrying(lambda: self._register_node(node))
        return self.heartbeat_ttl(), index

    async def _save_secret(self, node_id: str, hashed: str) -> None:
        async with self._lock:  # as every write: its compare is against this view
            await self.cluster_store.save_node_secret(node_id, hashed)

    async def node_heartbeat(self, node_id: str, secret: str) -> tuple[float, int]:
        """Nomad's Node.UpdateStatus: refresh the node's lease; a node marked down (or
        disconnected) that heartbeats again comes back (heartbeat.py `node_up_changes`)."""
        await self.check_secret(node_id, secret)
        node = self.cluster_nodes.get(node_id)
        if node is None:
            raise UnknownNode(node_id)
        told = self.heartbeat_ttl()
        await self._keep_alive(node_id, told=told)
        index = self.visible_index
        if node.status != NODE_STATUS_READY:
            index = await self._retrying(lambda: self._change_status(
                node_id, lambda known, allocs, jobs, index, now: node_up_changes(
                    known, allocs, jobs, index=index, wall_ns=now, new_id=new_id)))
        return told, index

    async def _change_status(self, node_id: str, decide: Callable[
            [Node, list[Allocation], dict[tuple[str, str], Job], int, int], NodeStatusChange]
                             ) -> int:
        """Write what `decide` (heartbeat.py) says of the node's status, and its evaluations,
        in one commit; nothing when it changes nothing."""
        async with self._lock:
            known = self.cluster_nodes.get(node_id)
            if known is None:
                raise UnknownNode(node_id)
            jobs = {(j.namespace, j.id): j for j in self.jobs.values()}
            change = decide(known, self.allocs_on(node_id), jobs, self.index + 1,
                            self._clock())
            if change.node is None and not change.evaluations:
                await trio.lowlevel.checkpoint()
                return self.visible_index
            index = self.take_index()
            nodes = [change.node] if change.node is not None else []
            await self._commit([], [], [Event(topic="Node", type="NodeRegistration",
                                              key=node_id, payload={"Node": n})
                                        for n in nodes],
                               evals=change.evaluations, nodes=nodes)
            self._capacity.set()
            return index

    async def _keep_alive(self, node_id: str, *, force_new: bool = False,
                          ttl: int | None = None, told: float | None = None) -> None:
        """Keep the node's alive key bound to a live lease covering its next heartbeat (the
        TTL `told` it, plus the grace). The key holds its lease's ID: a heartbeat renews
        the lease this server knows and binds the key to it unless it already is, so a
        lease another server granted meanwhile (a re-registration there) can lapse without
        taking the key along.

        Whether the key already is bound comes from `_bound` (the watch of the alive keys,
        and this server's own binding writes): the binding transaction is sent only when it
        shows another lease or none. A binding made elsewhere reaches `_bound` within the
        watch's delay; until then a heartbeat here may skip a binding it needed, which is
        safe because that lease was just granted for a whole TTL plus the grace: the node's
        next heartbeat, here, binds the key back before it lapses."""
        key = self.alive_prefix + node_id.encode()
        lease = None if force_new else self._leases.get(node_id)
        if lease is None and not force_new:
            kv, _ = await self.kv.get(key)
            lease = kv.lease if kv is not None and kv.lease else None
        longest = self._lease_ttl()
        needed = ttl or (math.ceil(told + self.heartbeat.grace) if told is not None
                         else longest)
        # Kept while it covers the next heartbeat; replaced when it does not (granted when
        # the cluster was much smaller) or is far longer (a failover lease). Granted with
        # headroom, so a growing cluster does not re-grant one at nearly every heartbeat.
        remaining = await self.kv.lease_keepalive(lease) if lease is not None else 0
        if lease is None or not 0 < needed <= remaining <= 2 * max(needed, longest):
            lease = await self.kv.lease_grant(ttl or math.ceil(longest * LEASE_HEADROOM))
        bound = self._bound.get(node_id)
        if bound is None or bound[0] != lease:
            value = str(lease).encode()
            result = await self.kv.txn([Compare.value(key, "=", value)], [],
                                       [Op.put(key, value, lease=lease)])
            self._see_binding(node_id, lease, result.revision)
        self._leases[node_id] = lease

    def _see_binding(self, node_id: str, lease: int, revision: int) -> None:
        """The alive key of `node_id` is bound to `lease` (0: deleted) as of `revision`;
        an older news than what is known changes nothing."""
        known = self._bound.get(node_id)
        if known is None or revision >= known[1]:
            self._bound[node_id] = (lease, revision)

    async def _follow_bindings(self) -> None:
        """Keep `_bound` current: the alive keys as read, then every change to them."""
        while True:
            try:
                kvs, revision = await self.kv.get_prefix(self.alive_prefix)
                listed = set()
                for kv in kvs:
                    node_id = kv.key[len(self.alive_prefix):].decode()
                    listed.add(node_id)
                    self._see_binding(node_id, kv.lease, kv.mod_revision)
                for node_id in [n for n in self._bound if n not in listed]:
                    self._see_binding(node_id, 0, revision)
                async with aclosing(self.kv.watch(self.alive_prefix, revision + 1)) as changes:
                    async for at, events in changes:
                        for event in events:
                            node_id = event.kv.key[len(self.alive_prefix):].decode()
                            self._see_binding(node_id, event.kv.lease
                                              if event.type != "DELETE" else 0, at)
            except EtcdCompacted:
                continue  # read them all again
            except EtcdError as e:
                # Until it is back, bindings seen stay; a heartbeat may skip a binding made
                # elsewhere meanwhile only as long as that lease lives (see `_keep_alive`).
                log.warning("cannot watch the nodes' alive keys: %s", e)
                await trio.sleep(CATCH_UP_WAIT)

    async def _register_node(self, node: Node) -> int:
        """Write a registering node and, in the same commit, the evaluations Nomad's
        Node.Register creates (heartbeat.py `node_register_changes`: a new node, one whose
        status changes, or one whose fields the feasibility checks read changed). A yurt
        agent registers when it is up, so the node is `ready` (Nomad's client sends
        `initializing` and then a heartbeat)."""
        async with self._lock:
            known = self.cluster_nodes.get(node.id)
            index = self.take_index()
            jobs = {(j.namespace, j.id): j for j in self.jobs.values()}
            allocs = self.allocs_on(node.id)
            now = self._clock()
            change = node_register_changes(
                known, msgspec.structs.replace(node, status=NODE_STATUS_READY), allocs, jobs,
                index=index, wall_ns=now, new_id=new_id)
            assert change.node is not None  # a registration always writes the node
            updated = msgspec.structs.replace(change.node, status=NODE_STATUS_READY)
            evals = change.evaluations
            if (not evals and known is not None and known.status != NODE_STATUS_READY
                    and (known.status == NODE_STATUS_DOWN
                         or status_change_requires_eval(NODE_STATUS_READY, known.status))):
                # `node_register_changes` keeps a known node's status (a heartbeat changes
                # it), and so asks for no evaluation; written `ready` here, the node makes
                # the transition a heartbeat would, with its evaluations: a node back from
                # `disconnected` has its reconnecting allocations sorted out now (one of
                # them and its replacement stopped), not when their window ends.
                evals = node_evaluations(updated, allocs, jobs, node_index=index, wall_ns=now,
                                         new_id=new_id)
            await self._commit([], [], [Event(topic="Node", type="NodeRegistration",
                                              key=node.id, payload={"Node": updated})],
                               evals=evals, nodes=[updated])
            self._capacity.set()
            return index

    async def set_eligibility(self, node_id: str, eligibility: str) -> int:
        """Nomad's Node.UpdateEligibility: take a node out of placement, or back in."""
        if eligibility not in (NODE_ELIGIBLE, NODE_INELIGIBLE):
            raise ValueError(f'eligibility must be "eligible" or "ineligible", not '
                             f"{eligibility!r}")

        async def update() -> int:
            async with self._lock:
                node = self.cluster_nodes.get(node_id)
                if node is None:
                    raise KeyError(node_id)
                index = self.take_index()
                updated = msgspec.structs.replace(node, scheduling_eligibility=eligibility,
                                                  modify_index=index)
                await self._commit([], [], [Event(topic="Node", type="NodeEligibility",
                                                  key=node_id, payload={"Node": updated})],
                                   nodes=[updated])
                self._capacity.set()  # an eligible node may fit what waits
                return index

        return await self._retrying(update)

    async def _watch_liveness(self) -> None:
        """The leader marks down every node whose alive key etcd deletes (its lease lapsed).
        When it takes over, and after a compaction cut the watch off, it first looks at
        every ready node: one without a key gets the failover TTL (`_scan_liveness`)."""
        while True:
            revision = await self._scan_liveness()
            try:
                async with aclosing(self.kv.watch(self.alive_prefix, revision + 1)) as changes:
                    async for _, events in changes:
                        for event in events:
                            node_id = event.kv.key[len(self.alive_prefix):].decode()
                            if event.type == "DELETE":
                                self._leases.pop(node_id, None)
                                await self._node_lapsed(node_id)
            except EtcdCompacted:
                continue  # look at every node again, then watch from now

    async def _scan_liveness(self) -> int:
        """Give every ready node without an alive key the failover TTL: it lost its key
        while no server led, or in the handover, maybe because nobody took its heartbeats
        (every server down). As Nomad's new leader gives every node, before calling it
        down; its next heartbeat binds the key to a lease of its own again. The revision
        the keys were read at: the watch goes on from there, so a key that lapses during
        the scan is seen."""
        # The ready nodes first, then the keys: a node registers its key before its record,
        # so one that registers in between is not taken for lapsed.
        ready = [n.id for n in self.cluster_nodes.values() if n.status == NODE_STATUS_READY]
        kvs, revision = await self.kv.get_prefix(self.alive_prefix)
        alive = {kv.key[len(self.alive_prefix):].decode() for kv in kvs}
        missing = [node_id for node_id in ready if node_id not in alive]
        for node_id in missing:
            await self._keep_alive(node_id, force_new=True,
                                   ttl=math.ceil(self.heartbeat.failover_ttl))
        if missing:
            log.info("%d node(s) without a heartbeat since the last leader: %.0f s to "
                     "come back", len(missing), self.heartbeat.failover_ttl)
        return int(revision)

    async def _node_lapsed(self, node_id: str) -> None:
        """The node's lease lapsed: it is down, or disconnected while one of its allocations
        may outlive a disconnect (heartbeat.py `node_down_changes`)."""
        node = self.cluster_nodes.get(node_id)
        if node is None or node.status in (NODE_STATUS_DOWN, NODE_STATUS_DISCONNECTED):
            return

        def down(known: Node, allocs: list[Allocation], jobs: dict[tuple[str, str], Job],
                 index: int, now: int) -> NodeStatusChange:
            unknown = {a.id: a.modify_time for a in allocs
                       if a.client_status == ALLOC_CLIENT_UNKNOWN}
            return node_down_changes(known, allocs, jobs, index=index, wall_ns=now,
                                     new_id=new_id, lost_after=lost_after,
                                     unknown_since=unknown)

        await self._retrying(lambda: self._change_status(node_id, down))
        status = self.cluster_nodes[node_id].status
        log.warning("node %s (%s) missed its heartbeat: marked %s", node.name, node_id, status)

    # ------------------------------------------------------------------ node RPC reads

    def node_alloc_index(self, node_id: str) -> int:
        """What a node's blocking pull waits on (Nomad's allocs-by-node index): the newest
        AllocModifyIndex of its allocations, or the index at which one of them was seen gone
        (a purged job's, still running there: the node must learn it, at once). Computed
        for every node at once, once per visible index: a commit wakes every waiting node,
        and each asks. Never goes back."""
        if self._node_index_at != self.visible_index:
            newest: dict[str, int] = {}
            held: dict[str, set[str]] = {}
            for alloc in self.allocs.values():
                held.setdefault(alloc.node_id, set()).add(alloc.id)
                if alloc.alloc_modify_index > newest.get(alloc.node_id, 0):
                    newest[alloc.node_id] = alloc.alloc_modify_index
            for node, before in self._node_held.items():
                if before - held.get(node, set()):
                    self._node_removed[node] = self.visible_index
            for node, removed in self._node_removed.items():
                newest[node] = max(newest.get(node, 0), removed)
            self._node_held = held
            self._node_index, self._node_index_at = newest, self.visible_index
        # Removals before this view was read are unknown: a node that last asked before
        # then is answered at once, and sees for itself what is gone.
        return max(self._node_index.get(node_id, 0), self._loaded_at)

    def client_allocs(self, node_id: str) -> dict[str, int]:
        """Nomad's Node.GetClientAllocs: the node's allocations and their AllocModifyIndex."""
        return {a.id: a.alloc_modify_index for a in self.allocs_on(node_id)}

    async def wait_client_allocs(self, node_id: str, index: int, wait: float
                                 ) -> tuple[dict[str, int], int]:
        """The blocking GetClientAllocs (no transport, no authentication: the caller's):
        (the node's allocations and their AllocModifyIndex, the node's index), once that
        index moved past `index` or `wait` seconds passed. Index 0 is a first pull,
        answered at once, also for a node with nothing yet.

        The index answered is at least 1 (as Nomad's blocking queries answer): a node
        that never held an allocation, on servers that started on an empty state, has
        index 0, and a node that asks again with the 0 it was told would be answered at
        once, again and again — a busy loop of pulls until something is placed there."""
        with trio.move_on_after(wait if index else 0):
            while self.node_alloc_index(node_id) <= index:
                await self.changed.wait()
        await trio.lowlevel.checkpoint()
        return self.client_allocs(node_id), max(self.node_alloc_index(node_id), 1)

    def get_allocs(self, node_id: str, alloc_ids: list[str]) -> list[Allocation]:
        found = [self.allocs[i] for i in alloc_ids if i in self.allocs]
        if any(a.node_id != node_id for a in found):
            raise NodeAuthError("allocation of another node")
        return found

    async def update_node_allocs(self, node_id: str, batch: list[Allocation]) -> int:
        """Nomad's Node.UpdateAlloc: the node's updates join the batch of the next 50 ms,
        committed at once (`_run_update_batches`); the index of that commit, or its error
        (every caller of a failed batch gets it, and its node sends again)."""
        for update in batch:
            alloc = self.allocs.get(update.id)
            if (alloc is not None and alloc.node_id != node_id) or update.node_id not in (
                    "", node_id):
                raise NodeAuthError("allocation of another node")
        pending = _PendingUpdate(batch)
        if not self._update_queue:
            self._batch_opened = trio.current_time()
        self._update_queue.append(pending)
        self._updates_waiting.set()
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.index

    async def _run_update_batches(self) -> None:
        """Nomad's `batchUpdate` timer: the first post of a batch starts the window; when it
        ends, every post queued meanwhile is committed together. Posts that queued while the
        previous batch was committed opened their window then: it may be over already."""
        while True:
            await self._updates_waiting.wait()
            await trio.sleep_until(self._batch_opened + BATCH_UPDATE_INTERVAL)
            self._updates_waiting = trio.Event()
            batch, self._update_queue = self._update_queue, []
            try:
                for chunk in self._update_chunks(batch):
                    await self._commit_updates(chunk)
            finally:
                for pending in batch:  # cancelled mid-batch: the server stops
                    if not pending.done.is_set():
                        pending.answer(0, UpdateNotCommitted("the server stopped"))

    def _update_chunks(self, batch: list[_PendingUpdate]) -> list[list[_PendingUpdate]]:
        """Posts, in arrival order, in chunks of at most `MAX_BATCH_UPDATES` updates and half
        the operations etcd takes in one transaction (the rest for the evaluations and job
        rows the commit may add); a post larger than that is a chunk of its own."""
        limit = max(1, min(MAX_BATCH_UPDATES, self.cluster_store.max_txn_ops // 2))
        chunks: list[list[_PendingUpdate]] = []
        size = limit
        for pending in batch:
            if size + len(pending.updates) > limit:
                chunks.append([])
                size = 0
            chunks[-1].append(pending)
            size += len(pending.updates)
        return chunks

    async def _commit_updates(self, chunk: list[_PendingUpdate]) -> None:
        """One commit for the chunk's posts (a later post of an allocation wins, as it
        would had they come one after the other); too large in bytes, it is halved."""
        merged = {u.id: u for pending in chunk for u in pending.updates}
        try:
            await self.update_allocs(list(merged.values()))
        except StoreTooLarge as e:
            if len(chunk) > 1:
                half = len(chunk) // 2
                await self._commit_updates(chunk[:half])
                await self._commit_updates(chunk[half:])
                return
            chunk[0].answer(0, e)
            return
        except Exception as e:  # every caller gets it; its node sends again
            log.warning("cannot commit %d allocation update(s) of %d node post(s): %s",
                        len(merged), len(chunk), e)
            for pending in chunk:
                pending.answer(0, e)
            return
        for pending in chunk:
            pending.answer(self.visible_index)

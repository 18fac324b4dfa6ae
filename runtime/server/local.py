"""`LocalServer`: the embedded single-node server: jobs, evaluations, allocations.

What a Nomad server does for one node, minus what a single node does not need. Every change
to a job (register, deregister, evaluate) creates an **evaluation**, stored (`pending`) in the
same commit as the job, then processed by the pure scheduler (scheduler/) over this server's
state; the resulting plan (allocations placed, stopped, updated; the evaluation complete, or a
blocked one left for what did not fit) is applied in one more commit. A pending evaluation
found at load (the agent died in between) is processed by `run`.

**Blocked evaluations** wait for capacity: when an allocation becomes terminal, or the node
changes (a device becomes healthy), `run` retries them, highest priority first, under the
lock; one that places what it could not is committed (complete once everything is placed),
one that still places nothing changes nothing (no new index).

- **Register**: a changed spec bumps the job's version; an unchanged one whose allocations
  all run changes nothing. **Stop** (deregister): the job is marked stopped and its
  evaluation stops every allocation. **Client updates** (`update_allocs`, what alloc sync
  sends): the server copies take the client's status, description and task states.

One index space, like Nomad's Raft index: every change (job, evaluation, allocation, node; and
whatever other parts keep elsewhere, through `change`) takes the next index of the one
counter; objects' Create/ModifyIndex, `X-Nomad-Index` and the event stream's `Index` are that
counter, and readers see only `visible_index`, up to which every change is in memory. A
change is persisted in `ServerStore` (when given, the counter with it) before it is visible,
then published as one event record numbered with its index (with
`owns_events`, every allocation it wrote as `AllocationUpdated`, so an event always carries the
allocation's current ModifyIndex), and sets `changed`, which the agent watches to hand
allocations to its client and blocking queries wait on. Every change is made under `_lock`:
read, decide and commit as one step, so nothing is over-committed.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import msgspec
import trio

from yurt.runtime.eventstream import (
    Event,
    EventBroker,
    alloc_event,
    deployment_event,
    job_event,
)
from yurt.runtime.server import deploymentwatcher
from yurt.runtime.server.deploymentbook import (
    collectable_deployments,
    latest_deployment,
    settle,
)
from yurt.runtime.server.dispatch import is_template
from yurt.runtime.server.records import (
    EVAL_GC_INTERVAL,
    Registration,
    ScalingEvents,
    collectable_allocs,
    collectable_evals,
    eval_event,
    history_after,
    job_spec,
    new_id,
    with_status,
    without_job,
)
from yurt.runtime.server.schedconfig import SchedulerConfiguration
from yurt.runtime.server.scheduler import schedule
from yurt.runtime.server.scheduler.plan import Plan, stopped
from yurt.runtime.server.scheduler.reschedule import (
    force_reschedulable,
    needs_reschedule,
    unix_ns,
)
from yurt.runtime.server.services import ServiceCatalogue
from yurt.runtime.server.state.sqlite import ServerStateStore
from yurt.runtime.structs import (
    ALLOC_CLIENT_UNKNOWN,
    EVAL_STATUS_BLOCKED,
    EVAL_STATUS_PENDING,
    TRIGGER_ALLOC_FAILURE,
    TRIGGER_ALLOC_STOP,
    TRIGGER_JOB_DEREGISTER,
    TRIGGER_JOB_REGISTER,
    ZERO_TIME,
    Allocation,
    DesiredTransition,
    Evaluation,
    Job,
    Node,
    is_client_terminal,
    merge_client_health,
)
from yurt.runtime.structs.hostvolume import HostVolume
from yurt.runtime.structs.submission import JobSubmission, oversize_warning
from yurt.runtime.structs.update import DEPLOYMENT_STATUS_SUCCESSFUL, Deployment

if TYPE_CHECKING:
    from yurt.runtime.server.hostvolumes import HostVolumeBook


class LocalServer:
    def __init__(self, node: Node, broker: EventBroker, store: ServerStateStore | None = None,
                 *, owns_events: bool = False, reschedule: bool = False,
                 unix_clock: Callable[[], int] = time.time_ns) -> None:
        self.node = node
        self._clock = unix_clock
        self.broker = broker
        self.store = store
        #: The agent's server numbers the broker's events with its index (every other event
        #: carries the current one) and publishes every allocation a commit writes. `yurt run`
        #: leaves both to the broker and the client, whose views it prints.
        self.owns_events = owns_events
        #: Replace failed allocations as their reschedule policy says (the agent; `yurt run`
        #: reports a failure and ends instead).
        self.reschedule = reschedule
        if owns_events:
            broker.index_source = self.current_index
        self.jobs: dict[str, Job] = {}
        self.allocs: dict[str, Allocation] = {}
        self.evals: dict[str, Evaluation] = {}
        #: Per job, its versions kept for the history, newest first (at most
        #: JOB_TRACKED_VERSIONS).
        self.versions: dict[str, list[Job]] = {}
        self.scaling = ScalingEvents()
        #: Per job, its evaluations not terminal yet (pending, blocked): the job's status.
        self._open_evals: dict[str, set[str]] = {}
        self.index = 0
        #: The index every change up to which is visible (in memory, published): what
        #: `X-Nomad-Index` and blocking queries go by. `index` runs ahead of it while a change
        #: is being persisted; answering with that would let a client resume past a change it
        #: has not seen.
        self.visible_index = 0
        self.changed = trio.Event()
        self._lock = trio.Lock()
        #: Set when capacity may have freed up: `run` retries the blocked evaluations.
        self._capacity = trio.Event()
        #: Set when a delayed (follow-up) evaluation is stored: `run` recomputes its wait.
        self._delayed = trio.Event()
        #: The node changed: `run` numbers the change (`node_updated`).
        self._node_dirty = trio.Event()
        #: Its preemption switches are honoured by every evaluation (server/schedconfig.py).
        self.scheduler_config = SchedulerConfiguration()
        #: Every job version's rollout (scheduler/deployments.py), by ID; written with the commit
        #: that
        #: changes them; the watcher (deploymentwatcher.py) reacts to their allocations.
        self.deployments: dict[str, Deployment] = {}
        #: Set when a deployment changed: the watcher recomputes its progress deadlines.
        self.deployments_changed = trio.Event()
        #: Nomad-provider service registrations (server/services.py).
        self.services = ServiceCatalogue(self)
        #: Dynamic host volumes (server/hostvolumes.py): the agent's embedded server sets
        #: it once its node's plugins are up; None elsewhere (the API answers 501).
        self.host_volumes: HostVolumeBook | None = None

    async def load(self) -> None:
        """Take back what an earlier agent's server had."""
        if self.store is None:
            return
        jobs, allocs, index = await self.store.load()
        evals = await self.store.load_evals()
        for version in sorted(await self.store.load_versions(), key=lambda j: -j.version):
            self.versions.setdefault(version.id, []).append(version)
        self.observe_index(index)
        self.jobs = {j.id: j for j in jobs}
        self.allocs = {a.id: a for a in allocs}
        self.evals = {e.id: e for e in evals}
        self.deployments = {d.id: d for d in await self.store.load_deployments()}
        await self.services.load(lambda: {a.id for a in self.live_allocs()})
        for ev in evals:
            if not ev.is_terminal():
                self._open_evals.setdefault(ev.job_id, set()).add(ev.id)
        if any(e.status == EVAL_STATUS_PENDING for e in evals):
            self._capacity.set()  # `run` processes them

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Process pending evaluations left by an earlier agent, then retry blocked ones
        whenever capacity may have freed up; and collect old terminal evaluations every
        EVAL_GC_INTERVAL. Until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._collect_evals)
            nursery.start_soon(self._evaluate_when_needed)
            nursery.start_soon(self._evaluate_when_due)
            nursery.start_soon(self._number_node_changes)
            await nursery.start(deploymentwatcher.run_deadlines, self)
            task_status.started()

    async def _collect_evals(self) -> None:
        while True:
            await trio.sleep(EVAL_GC_INTERVAL)
            async with self._lock:
                await self.gc_evals()

    async def gc_evals(self) -> list[str]:
        """Forget the evaluations Nomad's GC would (records.py `collectable_evals`)."""
        now = self._clock()
        ids = collectable_evals(self.evals, self.allocs, now, self.jobs)
        gone = collectable_deployments(self.deployments, self.allocs, now)
        if not ids and not gone:
            await trio.lowlevel.checkpoint()
            return ids
        # Their finished allocations go with them: a service that keeps failing adds one per
        # failure (each with its whole job), which nothing else would ever remove.
        alloc_ids = collectable_allocs(set(ids), self.allocs, self.jobs, now)
        index = self.take_index()
        if self.store is not None:
            await self.store.delete_evals(ids, index, alloc_ids, gone)
        for deployment_id in gone:
            del self.deployments[deployment_id]
        for eval_id in ids:
            ev = self.evals.pop(eval_id)
            self._open_evals.get(ev.job_id, set()).discard(eval_id)
        for alloc_id in alloc_ids:
            del self.allocs[alloc_id]
        self._notify_changed()
        return ids

    async def delete_evals(self, eval_ids: list[str]) -> int:
        """Forget these evaluations at an operator's request (nomad/eval_endpoint.go
        `Delete`, which reaps them as the GC does): their allocations stay. The caller
        checked each exists and is safe to delete (api/evaluations.py). Returns the index."""
        async with self._lock:
            index = self.take_index()
            if self.store is not None:
                await self.store.delete_evals(list(eval_ids), index)
            for eval_id in eval_ids:
                ev = self.evals.pop(eval_id, None)
                if ev is not None:
                    self._open_evals.get(ev.job_id, set()).discard(eval_id)
            self._notify_changed()
        return index

    async def _evaluate_when_needed(self) -> None:
        while True:
            await self._capacity.wait()
            self._capacity = trio.Event()
            async with self._lock:
                await self._process_due()
                await self._retry_blocked()

    async def _process_due(self) -> None:
        now = self._clock()
        for ev in sorted((e for e in self.evals.values() if e.status == EVAL_STATUS_PENDING
                          and unix_ns(e.wait_until) <= now), key=lambda e: e.create_index):
            await self._process(ev)

    async def _evaluate_when_due(self) -> None:
        """Follow-up evaluations (a failed allocation's replacement) when their time comes."""
        while True:
            self._delayed = trio.Event()
            # Paused (`PauseEvalBroker`): nothing is due until the unpause sets `_delayed`.
            waits = [] if self.scheduler_config.pause_eval_broker else [
                unix_ns(e.wait_until) for ids in self._open_evals.values() for i in ids
                if (e := self.evals[i]).status == EVAL_STATUS_PENDING
                and e.wait_until > ZERO_TIME]
            with trio.move_on_after(max(min(waits) - self._clock(), 0) / 1e9
                                    if waits else math.inf):
                await self._delayed.wait()
                continue
            async with self._lock:
                await self._process_due()

    # ------------------------------------------------------------------ index space

    def current_index(self) -> int:
        return self.visible_index

    def take_index(self) -> int:
        """The next index of the one counter, for a change kept here or elsewhere; it is
        persisted with the next commit."""
        self.index += 1
        return self.index

    def observe_index(self, n: int) -> None:
        """Raise the counter to at least `n` (an index of state kept elsewhere, loaded)."""
        self.index = max(self.index, n)
        self.visible_index = max(self.visible_index, n)
        self.broker.index = max(self.broker.index, self.index)

    def publish(self, events: list[Event]) -> None:
        """Publish `events` of the change being made (inside `change`): numbered with its
        index, not the last visible one."""
        self._publish(events)

    @asynccontextmanager
    async def change(self, *, capacity: bool = False) -> AsyncIterator[int]:
        """A change kept outside this server (a variable, a namespace, the node's state, the
        scheduler configuration), numbered by the one counter.

        Made under the server's lock, so indexes become visible in the order they were
        taken: a query answered at index N never misses a change numbered below N. The
        counter is persisted before the body writes anything under the index, so a restart
        never hands it out again (a crash in between leaves a gap, which is harmless). Blocking
        queries wake when the block ends, also when it failed: the index was taken. With
        `capacity`, the change may let a blocked evaluation place: they are retried."""
        async with self._lock:
            index = self.take_index()
            if self.store is not None:
                await self.store.save(index, [], [])
            try:
                yield index
            finally:
                if capacity:  # and the delayed ones' waits (the eval broker unpaused)
                    self._capacity.set()
                    self._delayed.set()
                self._notify_changed()

    async def _commit(self, jobs: list[Job], allocs: list[Allocation],
                      events: list[Event] | None = None,
                      evals: list[Evaluation] | None = None,
                      new_version: bool = False,
                      deployments: list[Deployment] | None = None,
                      deployment_type: str = "DeploymentStatusUpdate",
                      versions: list[Job] | None = None,
                      nodes: list[Node] | None = None,
                      submission: JobSubmission | None = None) -> None:
        """Persist, then make visible, then publish, one change numbered `self.index`.
        With `new_version`, `jobs` are new versions, kept for their history; `versions`:
        history entries changed (a version marked stable). `deployments`
        are written with the counts the written allocations change (deployments.settle).
        `nodes` (a cluster's: their status changed) and `submission` (the new version's
        source) are written in the same transaction."""
        evals = evals or []
        deployments = settle(self.deployments, deployments or [], self.allocs, allocs,
                             self.index, self._clock())
        jobs = self._with_status(jobs, allocs, evals, deployments)
        kept: dict[str, list[Job]] = {}
        forget: list[tuple[str, int]] = []
        if new_version:
            for job in jobs:
                kept[job.id], dropped = history_after(job, self.versions.get(job.id, []))
                forget += [(job.id, version) for version in dropped]
        marked = versions or []
        await self._persist(jobs, allocs, evals, [v[0] for v in kept.values()] + marked,
                            forget, deployments, nodes or [],
                            [submission] if submission is not None else [])
        self.versions.update(kept)
        self._nodes_written(nodes or [])
        for v in marked:
            self.versions[v.id] = [v if old.version == v.version else old
                                   for old in self.versions.get(v.id, [])]
        for d in deployments:
            self.deployments[d.id] = d
        if deployments:
            self.deployments_changed.set()
        for job in jobs:
            self.jobs[job.id] = job
        freed = False
        for alloc in allocs:
            before = self.allocs.get(alloc.id)
            if before is not None and not before.is_terminal() and alloc.is_terminal():
                freed = True
            self.allocs[alloc.id] = alloc
        for ev in evals:
            if ev.wait_until > ZERO_TIME and not ev.is_terminal():
                self._delayed.set()  # a follow-up to wait for
            self.evals[ev.id] = ev
            open_evals = self._open_evals.setdefault(ev.job_id, set())
            if ev.is_terminal():
                open_evals.discard(ev.id)
            else:
                open_evals.add(ev.id)
        events = [*(events or []), *(deployment_event(deployment_type, d) for d in deployments)]
        events += await self.services.drop_allocs(
            {a.id for a in allocs if is_client_terminal(a.client_status)})
        if self.owns_events:
            # A job written without an event of its own (its status changed): Nomad's
            # event for any job upsert.
            announced = {e.key for e in events if e.topic == "Job"}
            events.extend(job_event("JobRegistered", j) for j in jobs if j.id not in announced)
            events.extend(alloc_event(without_job(a)) for a in allocs)
            events.extend(eval_event(e) for e in evals)
        self._publish(events)
        if freed and any(self.evals[i].status == EVAL_STATUS_BLOCKED
                         for ids in self._open_evals.values() for i in ids):
            self._capacity.set()
        self._notify_changed()

    async def _persist(self, jobs: list[Job], allocs: list[Allocation],
                       evals: list[Evaluation], versions: list[Job],
                       forget: list[tuple[str, int]], deployments: list[Deployment],
                       nodes: list[Node], submissions: list[JobSubmission]) -> None:
        """Write one commit, numbered `self.index`, to the store (a cluster server writes
        the nodes too: runtime/server/cluster/server.py)."""
        if nodes:
            raise ValueError("the embedded server keeps its node outside server.db")
        if self.store is not None:
            await self.store.save(self.index, jobs, allocs, evals, versions, forget,
                                  deployments, submissions)
        else:
            await trio.lowlevel.checkpoint()

    def _nodes_written(self, nodes: list[Node]) -> None:
        """Nodes a commit wrote (a cluster server keeps them; one node has nothing to do)."""

    def _with_status(self, jobs: list[Job], allocs: list[Allocation],
                     evals: list[Evaluation], deployments: list[Deployment]) -> list[Job]:
        after = {**self.deployments, **{d.id: d for d in deployments}}
        rolling = {d.job_id for d in after.values() if d.active()}
        return with_status(self.jobs, self.allocs, self._open_evals, self.index, jobs, allocs,
                           evals, rolling, {d.job_id for d in deployments})

    def _publish(self, events: list[Event]) -> None:
        self.broker.publish_events(events, index=self.index if self.owns_events else None)

    def _notify_changed(self) -> None:
        """The change numbered `index` is visible: wake everyone waiting on `changed`, and arm
        a fresh event for the next change."""
        self.visible_index = self.index
        self.changed.set()
        self.changed = trio.Event()

    def node_updated(self) -> None:
        """The node changed (a driver, a device, its status): `run` numbers the change, with
        the index persisted and visible in order as any other change, and retries what is
        blocked (there may be room now)."""
        self._node_dirty.set()

    async def _number_node_changes(self) -> None:
        while True:
            await self._node_dirty.wait()
            self._node_dirty = trio.Event()
            await self.number_node()

    async def number_node(self) -> None:
        """Number a change of the node now (its registration at the agent's start, before
        the agent reports ready; later changes come through `node_updated`)."""
        async with self.change(capacity=True) as index:
            self.node.modify_index = index
            if not self.node.create_index:
                self.node.create_index = index
            self._publish([Event(topic="Node", type="NodeRegistration", key=self.node.id,
                                 payload={"Node": self.node})])

    # ------------------------------------------------------------------ SchedulerState

    def allocs_for_node(self) -> list[Allocation]:
        return [a for a in self.allocs.values() if a.node_id == self.node.id]

    def host_volume(self, vol_id: str) -> HostVolume | None:
        return self.host_volumes.volumes.get(vol_id) if self.host_volumes is not None else None

    def nodes(self) -> list[Node]:
        return [self.node]

    def job_allocs(self, job_id: str) -> list[Allocation]:
        return sorted((a for a in self.allocs.values() if a.job_id == job_id),
                      key=lambda a: (a.create_index, a.name))

    def live_allocs(self) -> Iterator[Allocation]:
        return (a for a in self.allocs.values() if not a.is_terminal())

    def blocked_evals(self, job_id: str) -> list[Evaluation]:
        return [self.evals[i] for i in sorted(self._open_evals.get(job_id, ()))
                if self.evals[i].status == EVAL_STATUS_BLOCKED]

    def job_evals(self, job_id: str) -> list[Evaluation]:
        return sorted((e for e in self.evals.values() if e.job_id == job_id),
                      key=lambda e: (e.create_index, e.id))

    # ------------------------------------------------------------------ evaluations

    def _new_eval(self, job: Job, triggered_by: str, index: int) -> Evaluation:
        now = self._clock()
        return Evaluation(id=new_id(), namespace=job.namespace, priority=job.priority,
                          type=job.type, triggered_by=triggered_by, job_id=job.id,
                          job_modify_index=job.job_modify_index,
                          status=EVAL_STATUS_PENDING, create_index=index, modify_index=index,
                          create_time=now, modify_time=now)

    async def _process(self, ev: Evaluation, *, keep_if_unchanged: bool = False) -> Plan:
        """Run the scheduler for `ev` and apply its plan in one commit. With
        `keep_if_unchanged` (a blocked retry), a plan that changes nothing is not applied.
        While the scheduler configuration's `PauseEvalBroker` is set, nothing is scheduled:
        the evaluation stays as it is (pending, or blocked) until the broker is unpaused,
        when `run` processes what is pending and retries what is blocked (nomad/leader.go
        `handleEvalBrokerStateChange` disables the eval broker and the blocked evals)."""
        if self.scheduler_config.pause_eval_broker:
            await trio.lowlevel.checkpoint()
            return Plan(eval=ev)
        job = self.jobs.get(ev.job_id)
        plan = schedule(self, ev, job, index=self.index + 1, now=self._clock(), new_id=new_id,
                        can_preempt=job is not None
                        and self.scheduler_config.preemption_enabled(job.type),
                        deployment=latest_deployment(self.deployments.values(), ev.job_id),
                        algorithm=self.scheduler_config.scheduler_algorithm)
        if (keep_if_unchanged and plan.changes_nothing and not plan.deployments
                and plan.eval.status == ev.status):
            await trio.lowlevel.checkpoint()
            return plan
        index = self.take_index()
        # A completed rollout makes its job version stable, in the same change.
        stable = [self._stable(d.job_id, d.job_version, True, index) for d in plan.deployments
                  if d.status == DEPLOYMENT_STATUS_SUCCESSFUL]
        await self._commit([j for j, _ in stable if j is not None],
                           plan.place + plan.stop + plan.update,
                           evals=[plan.eval, *plan.evals], deployments=plan.deployments,
                           versions=[v for _, v in stable if v is not None])
        return plan

    async def _retry_blocked(self) -> None:
        for ev in sorted((e for e in self.evals.values() if e.status == EVAL_STATUS_BLOCKED),
                         key=lambda e: (-e.priority, e.create_index)):
            if self.evals.get(ev.id) is ev:  # not canceled by an earlier one meanwhile
                await self._process(ev, keep_if_unchanged=True)

    async def evaluate(self, job_id: str, triggered_by: str, *,
                       force_reschedule: bool = False) -> Registration:
        """A new evaluation of the job as it is (Nomad's `/v1/job/:id/evaluate`). With
        `force_reschedule` (`EvalOptions.ForceReschedule`), every failed allocation not
        replaced yet, of a group whose reschedule policy is enabled, is marked
        `DesiredTransition.ForceReschedule` in the evaluation's commit: the scheduler
        replaces it now, whatever its policy's attempts and delay (nomad/job_endpoint.go
        `Evaluate`)."""
        async with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                raise KeyError(job_id)
            if is_template(job):  # Nomad's Job.Evaluate refuses these: children run instead
                kind = "periodic" if job.periodic is not None else "parameterized"
                raise ValueError(f"can't evaluate {kind} job")
            index = self.take_index()
            ev = self._new_eval(job, triggered_by, index)
            forced = [msgspec.structs.replace(
                a, desired_transition=msgspec.structs.replace(a.desired_transition,
                                                              force_reschedule=True),
                modify_index=index, modify_time=self._clock())
                for a in force_reschedulable(job, self.job_allocs(job_id))
            ] if force_reschedule else []
            await self._commit([], forced, evals=[ev])
            return self._registration(await self._process(ev), index, job)

    def _registration(self, plan: Plan, index: int, job: Job) -> Registration:
        return Registration(eval_id=plan.eval.id, index=index, placed=plan.place,
                            stopped=plan.stop, failed=plan.failed,
                            job_modify_index=job.job_modify_index, plan=plan)

    # ------------------------------------------------------------------ jobs

    async def register_job(self, job: Job, submission: JobSubmission | None = None,
                           check: Callable[[Job | None], Job | None] | None = None
                           ) -> Registration:
        """Register (or update) `job` and place its allocations on this node. `submission`
        (its source) is kept with the version the register stores; a register that changes
        nothing stores no version, and no submission (nomad/state/state_store.go
        `updateJobSubmission` keeps the first one of a version). `check`, as `register_as`'s:
        sees the current job under the lock, may refuse or give the job to register."""
        async with self._lock:
            if check is not None:
                job = check(self.jobs.get(job.id)) or job
            return await self._register(job, submission=submission)

    async def _register(self, job: Job, triggered_by: str = TRIGGER_JOB_REGISTER,
                        submission: JobSubmission | None = None) -> Registration:
        if is_template(job):  # periodic/parameterized parent: stored, never placed (Nomad)
            return await self._register_template(job, submission)
        existing = self.jobs.get(job.id)
        live = [a for a in self.job_allocs(job.id) if not a.is_terminal()]
        wanted = {f"{job.id}.{g.name}[{i}]" for g in job.task_groups for i in range(g.count)}
        same_spec = (existing is not None and not existing.stop
                     and job_spec(existing) == job_spec(job))
        if same_spec and existing is not None and wanted <= {a.name for a in live}:
            # The job stays as it is (no new version), but, as with Nomad, the register is
            # still an evaluation, which finds nothing to do.
            index = self.take_index()
            ev = self._new_eval(existing, triggered_by, index)
            await self._commit([], [], evals=[ev])
            result = self._registration(await self._process(ev), index, existing)
            result.unchanged = True
            return result
        index = self.take_index()
        job = self.candidate(job, index)
        ev = self._new_eval(job, triggered_by, index)
        # The job and its evaluation in one commit (one index), as Nomad's Raft apply.
        await self._commit([job], [], [job_event("JobRegistered", job)], [ev],
                           new_version=job is not existing,
                           submission=_submitted(job, submission, index)
                           if job is not existing else None)
        return self._registration(await self._process(ev), index, job)

    async def _register_template(self, job: Job, submission: JobSubmission | None = None
                                 ) -> Registration:
        """A periodic or parameterized parent is stored with no evaluation and no allocation
        of its own, as Nomad's register does (its children are the jobs that run);
        allocations it had as an ordinary job are stopped."""
        existing = self.jobs.get(job.id)
        if (existing is not None and not existing.stop
                and job_spec(existing) == job_spec(job)):
            await trio.lowlevel.checkpoint()
            return Registration(eval_id="", index=self.index, unchanged=True,
                                job_modify_index=existing.job_modify_index)
        index = self.take_index()
        job = self.candidate(job, index)
        now = self._clock()
        gone = [stopped(a, index, now, "alloc not needed due to job update")
                for a in self.job_allocs(job.id) if not a.is_terminal()]
        await self._commit([job], gone, [job_event("JobRegistered", job)], new_version=True,
                           submission=_submitted(job, submission, index))
        return Registration(eval_id="", index=index, stopped=gone,
                            job_modify_index=job.job_modify_index)

    def candidate(self, job: Job, index: int) -> Job:
        """`job` as registering it at `index` would store it: the current job when the spec
        is unchanged (only retrying what was not placed), else its next version."""
        existing = self.jobs.get(job.id)
        if existing is not None and not existing.stop and job_spec(existing) == job_spec(job):
            return existing
        return msgspec.structs.replace(
            job, create_index=existing.create_index if existing else index,
            modify_index=index, job_modify_index=index,
            version=existing.version + 1 if existing else 0,
            status="pending", stop=False, stable=False, submit_time=self._clock())

    async def register_as(self, job: Job, triggered_by: str,
                          check: Callable[[Job | None], Job | None] | None = None
                          ) -> Registration:
        """Register `job` for another reason than a register (a scale, a revert): `check`
        sees the current job under the lock first, and may refuse by raising or give the job
        to register instead (a change made to the current job, not to an earlier read)."""
        async with self._lock:
            if check is not None:
                job = check(self.jobs.get(job.id)) or job
            return await self._register(job, triggered_by)

    async def job_submission(self, job_id: str, version: int) -> JobSubmission | None:
        """The submission kept with `version` of the job; None when the version is not in
        the history or was registered without one (nomad/job_endpoint.go
        `GetJobSubmission`)."""
        if self.store is None or not any(v.version == version
                                         for v in self.versions.get(job_id, [])):
            await trio.lowlevel.checkpoint()
            return None
        return await self.store.load_submission(job_id, version)

    async def set_stable(self, job_id: str, version: int, stable: bool) -> int:
        """Mark one version of the job (un)stable; the index of the change."""
        async with self._lock:
            return await self._set_stable(job_id, version, stable)

    async def _set_stable(self, job_id: str, version: int, stable: bool) -> int:
        if not any(v.version == version for v in self.versions.get(job_id, [])):
            raise LookupError(f"job {job_id!r} has no version {version}")
        index = self.take_index()
        job, marked = self._stable(job_id, version, stable, index)
        await self._commit([job] if job else [], [],
                           [job_event("JobRegistered", job)] if job else [],
                           versions=[marked] if marked else [])
        return index

    def _stable(self, job_id: str, version: int, stable: bool, index: int
                ) -> tuple[Job | None, Job | None]:
        """The job (if `version` is current) and its history entry marked (un)stable."""
        found = next((v for v in self.versions.get(job_id, []) if v.version == version), None)
        job = self.jobs.get(job_id)
        if job is not None and job.version == version:
            job = msgspec.structs.replace(job, stable=stable, modify_index=index)
        return job, msgspec.structs.replace(found, stable=stable) if found else None

    async def stop_job(self, job_id: str, *, purge: bool = False) -> list[Allocation]:
        """Stop `job_id`: every allocation is told to stop; the job is kept, marked stopped
        (with `purge`, the job and its allocations are forgotten once stopped)."""
        return (await self.deregister_job(job_id, purge=purge)).stopped

    async def deregister_job(self, job_id: str, *, purge: bool = False, eval_priority: int = 0,
                             no_shutdown_delay: bool = False) -> Registration:
        """Stop `job_id` through an evaluation (its ID is what Nomad's deregister answers).
        `eval_priority` (1-100, 0: the job's) is the evaluation's priority; with
        `no_shutdown_delay` every allocation of the job is marked
        `DesiredTransition.NoShutdownDelay` in the same commit, so its client kills it without
        the group's and tasks' `shutdown_delay` (nomad/fsm.go `handleJobDeregister`)."""
        async with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                raise KeyError(job_id)
            index = self.take_index()
            # Stopping is a new version of the job, as Nomad's history shows it.
            job = msgspec.structs.replace(job, stop=True, modify_index=index,
                                          job_modify_index=index, version=job.version + 1,
                                          stable=False, submit_time=self._clock())
            ev = self._new_eval(job, TRIGGER_JOB_DEREGISTER, index)
            if eval_priority > 0:
                ev = msgspec.structs.replace(ev, priority=eval_priority)
            marked = [msgspec.structs.replace(
                a, desired_transition=msgspec.structs.replace(a.desired_transition,
                                                              no_shutdown_delay=True),
                modify_index=index, alloc_modify_index=index, modify_time=self._clock())
                for a in self.job_allocs(job_id)] if no_shutdown_delay else []
            await self._commit([job], marked, [job_event("JobDeregistered", job)], [ev],
                               new_version=True)
            result = self._registration(await self._process(ev), index, job)
            if purge:
                await self._purge(job_id)
            return result

    async def _purge(self, job_id: str) -> None:
        ids = [a.id for a in self.job_allocs(job_id)]
        index = self.take_index()
        gone = [d.id for d in self.deployments.values() if d.job_id == job_id]
        if self.store is not None:
            await self.store.save(index, [], [], forget_versions=[
                (job_id, v.version) for v in self.versions.get(job_id, [])])
            await self.store.delete(job_id, ids, index, gone)
        for deployment_id in gone:
            del self.deployments[deployment_id]
        self.versions.pop(job_id, None)
        self.scaling.forget(job_id)
        job = self.jobs.pop(job_id, None)
        for alloc_id in ids:
            self.allocs.pop(alloc_id, None)
        if job is not None:
            self._publish([job_event("JobDeregistered", job)])
        self._notify_changed()

    async def stop_alloc(self, alloc_id: str, *, triggered_by: str = TRIGGER_ALLOC_STOP
                         ) -> Allocation:
        return (await self.stop_alloc_eval(alloc_id, triggered_by=triggered_by))[0]

    async def stop_alloc_eval(self, alloc_id: str, *, triggered_by: str = TRIGGER_ALLOC_STOP,
                              no_shutdown_delay: bool = False
                              ) -> tuple[Allocation, Evaluation]:
        """Nomad's `alloc stop` (and a drain's): the allocation is marked to migrate
        (`DesiredTransition.Migrate`) and evaluated, which stops it and places a replacement
        (blocked if it does not fit, on an ineligible node say). `no_shutdown_delay` marks it
        `DesiredTransition.NoShutdownDelay` too (nomad/alloc_endpoint.go `Stop`): its client
        kills it without the group's and tasks' `shutdown_delay`. The allocation as stopped
        and the evaluation are returned."""
        async with self._lock:
            alloc = self.allocs.get(alloc_id)
            if alloc is None:
                raise KeyError(alloc_id)
            index = self.take_index()
            job = self.jobs.get(alloc.job_id) or alloc.job or Job(id=alloc.job_id)
            marked = alloc
            if not alloc.is_terminal():
                marked = msgspec.structs.replace(
                    alloc, desired_transition=DesiredTransition(
                        migrate=True, no_shutdown_delay=True if no_shutdown_delay else None),
                    modify_index=index, modify_time=self._clock())
            ev = msgspec.structs.replace(self._new_eval(job, triggered_by, index),
                                         job_id=alloc.job_id)
            await self._commit([], [marked], evals=[ev])
            plan = await self._process(ev)
            return self.allocs[alloc_id], plan.eval

    # ------------------------------------------------------------------ deployments
    # The user's actions on a deployment (deploymentwatcher.py runs them), each one change
    # under the lock; DeploymentRefused (DeploymentNotFound, PromotionError) with Nomad's text.

    async def fail_deployment(self, deployment_id: str) -> deploymentwatcher.Outcome:
        """Nomad's Deployment.Fail."""
        async with self._lock:
            return await deploymentwatcher.fail_by_user(self, deployment_id)

    async def pause_deployment(self, deployment_id: str, pause: bool
                               ) -> deploymentwatcher.Outcome:
        """Nomad's Deployment.Pause (`pause` False: resume)."""
        async with self._lock:
            return await deploymentwatcher.set_paused(self, deployment_id, pause)

    async def promote_deployment(self, deployment_id: str, groups: list[str] | None
                                 ) -> deploymentwatcher.Outcome:
        """Nomad's Deployment.Promote (`groups` None: every group)."""
        async with self._lock:
            return await deploymentwatcher.promote_by_user(self, deployment_id, groups)

    async def unblock_deployment(self, deployment_id: str) -> deploymentwatcher.Outcome:
        """Nomad's Deployment.Unblock, which refuses every deployment here (one region):
        it never returns."""
        async with self._lock:
            deploymentwatcher.unblock(self, deployment_id)

    async def set_alloc_health(self, deployment_id: str, healthy_ids: list[str],
                               unhealthy_ids: list[str]) -> deploymentwatcher.Outcome:
        """Nomad's Deployment.SetAllocHealth."""
        async with self._lock:
            return await deploymentwatcher.set_health(self, deployment_id, healthy_ids,
                                                      unhealthy_ids)

    def adopt(self, job: Job, allocs: list[Allocation]) -> None:
        """Take back a job and allocations an earlier `yurt run` placed (no store there)."""
        self.jobs[job.id] = job
        for alloc in allocs:
            self.allocs[alloc.id] = alloc
            self.index = max(self.index, alloc.alloc_modify_index)

    # ------------------------------------------------------------------ client updates

    async def update_allocs(self, batch: list[Allocation]) -> None:
        """What the client reports (alloc sync): status, description and task states."""
        async with self._lock:
            await self._update_allocs(batch)

    async def _update_allocs(self, batch: list[Allocation]) -> None:
        # An update that changes nothing (a client resending what it sent just before it was
        # stopped, its acknowledgement not yet saved) is not written: no new index, so blocking
        # queries and event watchers do not wake for nothing.
        batch = [u for u in batch if (a := self.allocs.get(u.id)) is not None
                 and _changes(a, u)]
        if not batch:
            return
        index = self.take_index()
        updated = []
        failed: dict[str, Job] = {}  # jobs with an allocation that just failed
        prior: dict[str, Allocation] = {}
        for update in batch:
            alloc = self.allocs[update.id]
            prior[alloc.id] = alloc
            new = msgspec.structs.replace(
                alloc, client_status=update.client_status,
                client_description=update.client_description, task_states=update.task_states,
                # The client sets only Healthy and Timestamp; the server's canary mark stays.
                # Health judged for another deployment (an update queued before an in-place
                # update moved the allocation on) must not count in this one.
                deployment_status=merge_client_health(
                    alloc.deployment_status, update.deployment_status
                    if update.deployment_id == alloc.deployment_id else None, index),
                network_status=update.network_status, modify_index=index,
                modify_time=self._clock(),
                # Reported again after it went unknown (its node is back): the disconnect
                # timeout's follow-up no longer concerns it. Left named, a later failure
                # of it would get no follow-up of its own (the scheduler's `_follow_up`
                # skips an allocation already waiting on one): never replaced.
                followup_eval_id="" if _reconnected(alloc, update) else alloc.followup_eval_id)
            updated.append(new)
            job = self.jobs.get(new.job_id)
            if (needs_reschedule(new) and not needs_reschedule(alloc) and job is not None
                    and not job.stop and self.reschedule):
                failed[job.id] = job
        # Nomad's alloc-failure evaluation, in the same commit as the failure (a crash between
        # the two would lose the replacement): the reschedule policy decides it.
        evals = [self._new_eval(job, TRIGGER_ALLOC_FAILURE, index) for job in failed.values()]
        await self._commit([], updated, evals=evals)
        for ev in evals:
            await self._process(ev)
        await deploymentwatcher.after_alloc_updates(self, updated, prior)


def _reconnected(alloc: Allocation, update: Allocation) -> bool:
    """The client reports an allocation the servers held `unknown` (its node was away)."""
    return (alloc.client_status == ALLOC_CLIENT_UNKNOWN
            and update.client_status != ALLOC_CLIENT_UNKNOWN)


def _changes(alloc: Allocation, update: Allocation) -> bool:
    """Whether a client's update changes what the server holds of `alloc`."""
    health = update.deployment_status if update.deployment_id == alloc.deployment_id else None
    return (update.client_status != alloc.client_status
            or update.client_description != alloc.client_description
            or update.task_states != alloc.task_states
            or update.network_status != alloc.network_status
            or merge_client_health(alloc.deployment_status, health, alloc.modify_index)
            is not alloc.deployment_status)


def _submitted(job: Job, submission: JobSubmission | None, index: int
               ) -> JobSubmission | None:
    """`submission` as the version `job` stores it: the server's fields set, and nothing when
    it is over the size Nomad keeps (nomad/job_endpoint_hooks.go `submissionController`)."""
    if submission is None or oversize_warning(submission) is not None:
        return None
    return msgspec.structs.replace(submission, namespace=job.namespace, job_id=job.id,
                                   version=job.version, job_modify_index=index)

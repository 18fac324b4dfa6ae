"""`LocalServer`: the embedded single-node server, turning registered jobs into allocations.

What a Nomad server does for one node, minus what a single node does not need:

- **Register**: a job gets `count` allocations per group, named `<job>.<group>[<i>]`, placed on
  this node if the node's CPU and memory, less what running allocations use, fit the group,
  and if enough healthy device instances that no live allocation holds match each requested
  `device` (their IDs are assigned to the allocation); what does not fit is reported per group
  (`Resources exhausted: …`) and not placed.
- **Update**: registering a changed job bumps its version and replaces each allocation: the new
  one names the old one in `PreviousAllocation`, the old one is stopped. Registering an
  unchanged job changes nothing.
- **Preempt**: an allocation that does not fit may evict allocations of jobs at least 10
  priority lower (lowest priority first, as few as possible): they get `desired_status =
  evict` and `PreemptedByAllocation`, the new one lists them in `PreemptedAllocations`, and
  its prerun waits until they are dead.
- **Stop**: a job's (or one allocation's) allocations get `desired_status = stop`.
- **Client updates** (`update_allocs`, what alloc sync sends): the server copies take the
  client's status, description and task states.

One index space, like Nomad's Raft index: every change (job, allocation, node; and whatever
other parts keep elsewhere, through `take_index`/`observe_index`) takes the next index of the
one counter; objects' Create/ModifyIndex, `X-Nomad-Index` and the event stream's `Index` are that
counter. A change is persisted in `ServerStore` (when given, the counter with it) before it is
visible, then published as one event record numbered with its index (with `owns_events`,
every allocation it wrote as `AllocationUpdated`, so an event always carries the allocation's
current ModifyIndex), and sets `changed`, which the agent watches to hand allocations to its
client and blocking queries wait on.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import final

import msgspec
import trio

from yurt.runtime.eventstream import Event, EventBroker, alloc_event, job_event
from yurt.runtime.server.store import ServerStore
from yurt.runtime.structs import (
    ALLOC_DESIRED_STOP,
    AllocatedDevice,
    AllocatedTaskResources,
    Allocation,
    Job,
    Node,
    TaskGroup,
)

_SERVER_FIELDS = ("stop", "status", "status_description", "version", "submit_time",
                  "create_index", "modify_index", "job_modify_index")


def _spec(job: Job) -> bytes:
    """The job as the user wrote it: server bookkeeping left out."""
    blank = Job()
    return msgspec.json.encode(msgspec.structs.replace(
        job, **{f: getattr(blank, f) for f in _SERVER_FIELDS}))


def _group_spec(group: TaskGroup) -> bytes:
    """What makes a group's allocations replaceable: everything but the count (a count
    change adds or stops allocations, it does not restart the others)."""
    return msgspec.json.encode(msgspec.structs.replace(group, count=0))


def _device_ids(alloc: Allocation) -> set[str]:
    return {i for res in alloc.task_resources.values() for d in res.devices
            for i in d.device_ids}


@dataclass(frozen=True)
class _Usage:
    """What live allocations hold: CPU MHz, memory MB, device instance IDs."""

    cpu: int
    mem: int
    devices: frozenset[str] | set[str]

    def plus(self, alloc: Allocation) -> _Usage:
        c, m = alloc_needs(alloc)
        return _Usage(self.cpu + c, self.mem + m, set(self.devices) | _device_ids(alloc))

    def without(self, *allocs: Allocation) -> _Usage:
        cpu, mem, devices = self.cpu, self.mem, set(self.devices)
        for alloc in allocs:
            c, m = alloc_needs(alloc)
            cpu, mem = cpu - c, mem - m
            devices -= _device_ids(alloc)
        return _Usage(cpu, mem, devices)


def group_needs(group: TaskGroup) -> tuple[int, int]:
    """(CPU MHz, memory MB) one allocation of `group` asks for."""
    return (sum(t.resources.cpu for t in group.tasks),
            sum(t.resources.memory for t in group.tasks))


def assign_devices(group: TaskGroup, node: Node, used: set[str]
                   ) -> tuple[dict[str, AllocatedTaskResources], str]:
    """Healthy, unused device instances for every task of one allocation of `group`.

    Returns the per-task allocated resources, or an empty dict and the reason it cannot be
    placed. `used` (instance IDs taken) is extended with what was assigned.
    """
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
    used.update(taken)
    return resources, ""


def _without_job(alloc: Allocation) -> Allocation:
    """An allocation as Nomad's events carry it: without its job (kept small)."""
    return msgspec.structs.replace(alloc, job=None)


def alloc_needs(alloc: Allocation) -> tuple[int, int]:
    group = alloc.job.lookup_group(alloc.task_group) if alloc.job is not None else None
    return group_needs(group) if group is not None else (0, 0)


@dataclass
class Registration:
    """What registering a job did: Nomad's evaluation result, flattened."""

    eval_id: str
    index: int
    placed: list[Allocation] = field(default_factory=list)
    stopped: list[Allocation] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # group → why it was not placed
    unchanged: bool = False


@final
class LocalServer:
    def __init__(self, node: Node, broker: EventBroker, store: ServerStore | None = None,
                 *, owns_events: bool = False) -> None:
        self.node = node
        self.broker = broker
        self.store = store
        #: The agent's server numbers the broker's events with its index (every other event
        #: carries the current one) and publishes every allocation a commit writes. `yurt run`
        #: leaves both to the broker and the client, whose views it prints.
        self.owns_events = owns_events
        if owns_events:
            broker.index_source = self.current_index
        self.jobs: dict[str, Job] = {}
        self.allocs: dict[str, Allocation] = {}
        self.index = 0
        self.changed = trio.Event()
        self._lock = trio.Lock()

    async def load(self) -> None:
        """Take back what an earlier agent's server had."""
        if self.store is None:
            return
        jobs, allocs, index = await self.store.load()
        self.observe_index(index)
        self.jobs = {j.id: j for j in jobs}
        self.allocs = {a.id: a for a in allocs}

    def current_index(self) -> int:
        return self.index

    def take_index(self) -> int:
        """The next index of the one counter, for a change kept here or elsewhere; it is
        persisted with the next commit."""
        self.index += 1
        return self.index

    def observe_index(self, n: int) -> None:
        """Raise the counter to at least `n` (an index of state kept elsewhere, loaded)."""
        self.index = max(self.index, n)
        self.broker.index = max(self.broker.index, self.index)

    _next_index = take_index

    async def _commit(self, jobs: list[Job], allocs: list[Allocation],
                      events: list[Event] | None = None) -> None:
        """Persist, then make visible, then publish, one change numbered `self.index`."""
        if self.store is not None:
            await self.store.save(self.index, jobs, allocs)
        else:
            await trio.lowlevel.checkpoint()
        for job in jobs:
            self.jobs[job.id] = job
        for alloc in allocs:
            self.allocs[alloc.id] = alloc
        events = list(events or [])
        if self.owns_events:
            events.extend(alloc_event(_without_job(a)) for a in allocs)
        self._publish(events)
        self._notify_changed()

    def announce(self, events: list[Event] | None = None) -> None:
        """A change kept elsewhere (numbered by `take_index`) is visible: publish its events
        at the current index and wake blocking queries."""
        self._publish(list(events or []))
        self._notify_changed()

    def _publish(self, events: list[Event]) -> None:
        self.broker.publish_events(events, index=self.index if self.owns_events else None)

    def node_updated(self) -> None:
        """The node changed (a driver, a device, its status): a change of its own index."""
        index = self.take_index()
        self.node.modify_index = index
        if not self.node.create_index:
            self.node.create_index = index
        self._publish([Event(topic="Node", type="NodeRegistration", key=self.node.id,
                             payload={"Node": self.node})])
        self._notify_changed()

    def _notify_changed(self) -> None:
        """Wake everyone waiting on `changed`, and arm a fresh event for the next change."""
        self.changed.set()
        self.changed = trio.Event()

    def allocs_for_node(self) -> list[Allocation]:
        return [a for a in self.allocs.values() if a.node_id == self.node.id]

    def job_allocs(self, job_id: str) -> list[Allocation]:
        return sorted((a for a in self.allocs.values() if a.job_id == job_id),
                      key=lambda a: (a.create_index, a.name))

    def _usage(self, excluding: set[str]) -> _Usage:
        """CPU, memory and device instances held by live allocations."""
        usage = _Usage(0, 0, set())
        for alloc in self.allocs.values():
            if alloc.id not in excluding and not alloc.is_terminal():
                usage = usage.plus(alloc)
        return usage

    # ------------------------------------------------------------------ jobs

    async def register_job(self, job: Job) -> Registration:
        """Register (or update) `job` and place its allocations on this node."""
        async with self._lock:  # read, decide and commit as one step: no over-commit
            return await self._register(job)

    async def _register(self, job: Job) -> Registration:
        existing = self.jobs.get(job.id)
        live = [a for a in self.job_allocs(job.id) if not a.is_terminal()]
        wanted = {f"{job.id}.{g.name}[{i}]": g for g in job.task_groups for i in range(g.count)}
        same_spec = existing is not None and not existing.stop and _spec(existing) == _spec(job)
        if same_spec and set(wanted) <= {a.name for a in live}:
            await trio.lowlevel.checkpoint()
            return Registration(eval_id=str(uuid.uuid4()), index=self.index, unchanged=True)
        index = self._next_index()
        if same_spec and existing is not None:
            job = existing  # only retrying what could not be placed before
        else:
            job = msgspec.structs.replace(
                job, create_index=existing.create_index if existing else index,
                modify_index=index, job_modify_index=index,
                version=existing.version + 1 if existing else 0,
                status="running", stop=False, submit_time=time.time_ns())
        old_groups = {g.name: _group_spec(g) for g in existing.task_groups} if existing else {}
        kept: list[Allocation] = []  # unchanged groups: kept running, updated in place
        previous: dict[str, Allocation] = {}  # changed groups: replaced by a new allocation
        unneeded: list[Allocation] = []
        for alloc in live:
            group = wanted.get(alloc.name)
            if group is None:
                unneeded.append(alloc)
            elif old_groups.get(group.name) == _group_spec(group):
                kept.append(alloc)
            else:
                previous[alloc.name] = alloc
        result = Registration(eval_id=str(uuid.uuid4()), index=index)
        # Allocations being replaced keep their resources until their replacement is
        # placed: if it does not fit, they keep running, and nothing placed meanwhile may
        # have taken what they hold.
        usage = self._usage(excluding={a.id for a in unneeded})
        evicted: dict[str, Allocation] = {}
        kept_names = {a.name for a in kept}
        hopeless: set[str] = set()  # groups for which no eviction helps: don't search again
        protected = {a.id for a in live}  # this job's own allocations are never evicted
        for n, (name, group) in enumerate(wanted.items()):
            if n % 100 == 99:
                await trio.lowlevel.checkpoint()  # a big job must not freeze the agent
            if name in kept_names:
                continue
            prev = previous.get(name)
            trial = usage.without(prev) if prev is not None else usage
            task_resources, why = self._try_place(group, trial)
            victims: list[Allocation] = []
            if why and group.name not in hopeless:
                victims = self._preemption(job, group, trial, protected | set(evicted))
                if victims:
                    trial = trial.without(*victims)
                    task_resources, why = self._try_place(group, trial)
                else:
                    hopeless.add(group.name)
            if why:
                result.failed[group.name] = why
                continue  # the previous allocation, if any, keeps running as it is
            for victim in victims:
                evicted[victim.id] = victim
            placed = Allocation(
                id=str(uuid.uuid4()), preempted_allocations=[v.id for v in victims],
                namespace=job.namespace, eval_id=result.eval_id,
                name=name, node_id=self.node.id, node_name=self.node.name, job_id=job.id,
                job=job, task_group=group.name, task_resources=task_resources,
                create_index=index, modify_index=index,
                alloc_modify_index=index, create_time=time.time_ns(),
                previous_allocation=prev.id if prev is not None else "")
            usage = trial.plus(placed)
            result.placed.append(placed)
        for new in result.placed:
            for victim_id in new.preempted_allocations:
                victim = evicted[victim_id]
                result.stopped.append(msgspec.structs.replace(
                    victim, desired_status="evict",
                    desired_description=f"Preempted by allocation {new.id} of job "
                                        f"{job.id!r} (priority {job.priority})",
                    preempted_by_allocation=new.id, modify_index=index,
                    alloc_modify_index=index, modify_time=time.time_ns()))
            if new.previous_allocation:
                old = self._stopped(previous[new.name], index, "alloc is being updated")
                old.next_allocation = new.id
                result.stopped.append(old)
        for alloc in unneeded:
            result.stopped.append(self._stopped(alloc, index,
                                                "alloc not needed due to job update"))
        in_place = [] if job is existing else [
            msgspec.structs.replace(a, job=job, modify_index=index, alloc_modify_index=index)
            for a in kept]
        await self._commit([job], result.placed + result.stopped + in_place,
                           [job_event("JobRegistered", job)])
        return result

    def _try_place(self, group: TaskGroup, usage: _Usage
                   ) -> tuple[dict[str, AllocatedTaskResources], str]:
        """Resources for one allocation of `group` on top of `usage`, or why it does not fit."""
        cpu, mem = group_needs(group)
        total_cpu = self.node.node_resources.cpu.cpu_shares
        total_mem = self.node.node_resources.memory.memory_mb
        if total_cpu and usage.cpu + cpu > total_cpu:
            return {}, (f"Resources exhausted: cpu (needs {cpu} MHz, "
                        f"{max(total_cpu - usage.cpu, 0)} of {total_cpu} MHz free)")
        if total_mem and usage.mem + mem > total_mem:
            return {}, (f"Resources exhausted: memory (needs {mem} MB, "
                        f"{max(total_mem - usage.mem, 0)} of {total_mem} MB free)")
        return assign_devices(group, self.node, set(usage.devices))

    def _preemption(self, job: Job, group: TaskGroup, usage: _Usage, protected: set[str]
                    ) -> list[Allocation]:
        """Allocations to evict so one allocation of `group` fits on top of `usage`: only of
        jobs at least 10 priority lower, lowest priority first, and none that does not help
        (each chosen one is dropped again if the rest suffice). Empty if nothing would do."""
        candidates = sorted(
            (a for a in self.allocs.values()
             if not a.is_terminal() and a.id not in protected and a.job is not None
             and a.job_id != job.id and a.job.priority + 10 <= job.priority),
            key=lambda a: (a.job.priority if a.job else 0, -a.create_index))
        chosen: list[Allocation] = []
        trial = usage
        for candidate in candidates:
            chosen.append(candidate)
            trial = trial.without(candidate)
            if not self._try_place(group, trial)[1]:
                break
        else:
            return []
        for candidate in list(reversed(chosen[:-1])):  # as few as possible
            rest = [c for c in chosen if c is not candidate]
            if not self._try_place(group, usage.without(*rest))[1]:
                chosen = rest
        return chosen

    def _stopped(self, alloc: Allocation, index: int, why: str) -> Allocation:
        return msgspec.structs.replace(alloc, desired_status=ALLOC_DESIRED_STOP,
                                       desired_description=why, modify_index=index,
                                       alloc_modify_index=index, modify_time=time.time_ns())

    async def stop_job(self, job_id: str, *, purge: bool = False) -> list[Allocation]:
        """Stop `job_id`: every allocation is told to stop; the job is kept, marked stopped
        (with `purge`, the job and its allocations are forgotten once stopped)."""
        async with self._lock:
            stopped = await self._stop_job(job_id)
            if purge:
                await self._purge(job_id)
            return stopped

    async def _purge(self, job_id: str) -> None:
        ids = [a.id for a in self.job_allocs(job_id)]
        index = self.take_index()
        if self.store is not None:
            await self.store.delete(job_id, ids, index)
        job = self.jobs.pop(job_id, None)
        for alloc_id in ids:
            self.allocs.pop(alloc_id, None)
        if job is not None:
            self._publish([job_event("JobDeregistered", job)])
        self._notify_changed()

    async def _stop_job(self, job_id: str) -> list[Allocation]:
        job = self.jobs.get(job_id)
        if job is None:
            raise KeyError(job_id)
        index = self._next_index()
        stopped = [self._stopped(a, index, "alloc is being stopped")
                   for a in self.job_allocs(job_id) if a.desired_status != ALLOC_DESIRED_STOP]
        job = msgspec.structs.replace(job, stop=True, status="dead", modify_index=index,
                                      job_modify_index=index)
        await self._commit([job], stopped, [job_event("JobDeregistered", job)])
        return stopped

    async def stop_alloc(self, alloc_id: str) -> Allocation:
        async with self._lock:
            alloc = self.allocs.get(alloc_id)
            if alloc is None:
                raise KeyError(alloc_id)
            stopped = self._stopped(alloc, self._next_index(), "alloc is being stopped by user")
            await self._commit([], [stopped])
            return stopped

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
        index = self._next_index()
        updated = []
        for update in batch:
            alloc = self.allocs.get(update.id)
            if alloc is None:
                continue
            updated.append(msgspec.structs.replace(
                alloc, client_status=update.client_status,
                client_description=update.client_description, task_states=update.task_states,
                deployment_status=update.deployment_status,
                network_status=update.network_status, modify_index=index,
                modify_time=time.time_ns()))
        await self._commit([], updated)

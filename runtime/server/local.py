"""`LocalServer`: the embedded single-node server, turning registered jobs into allocations.

What a Nomad server does for one node, minus what a single node does not need: a registered
job gets `count` allocations per group, named `<job>.<group>[<i>]` with fresh UUIDs, all placed
on the local node; stopping a job marks its allocations `desired_status = stop`. Capacity
checks, device assignment, job updates and preemption belong here too and arrive with the
agent (DESIGN §6); until then placement admits everything.
"""

from __future__ import annotations

import uuid
from typing import final

import msgspec

from runtime.eventstream import EventBroker
from runtime.structs import ALLOC_DESIRED_STOP, Allocation, Job, Node


@final
class LocalServer:
    def __init__(self, node: Node, broker: EventBroker) -> None:
        self.node = node
        self.broker = broker
        self.jobs: dict[str, Job] = {}
        self.allocs: dict[str, Allocation] = {}
        self._index = 0

    def _next_index(self) -> int:
        self._index += 1
        return self._index

    def register_job(self, job: Job) -> list[Allocation]:
        """Register `job` and place its allocations on this node."""
        index = self._next_index()
        job = msgspec.structs.replace(job, create_index=index, modify_index=index,
                                      job_modify_index=index, status="running")
        self.jobs[job.id] = job
        self.broker.job_registered(job)
        placed = []
        for group in job.task_groups:
            for i in range(group.count):
                alloc = Allocation(
                    id=str(uuid.uuid4()), namespace=job.namespace, eval_id=str(uuid.uuid4()),
                    name=f"{job.id}.{group.name}[{i}]", node_id=self.node.id,
                    node_name=self.node.name, job_id=job.id, job=job, task_group=group.name,
                    create_index=index, modify_index=index, alloc_modify_index=index)
                self.allocs[alloc.id] = alloc
                placed.append(alloc)
        return placed

    def adopt(self, job: Job, allocs: list[Allocation]) -> None:
        """Take back a job and allocations an earlier agent placed (resuming after a restart)."""
        self.jobs[job.id] = job
        for alloc in allocs:
            self.allocs[alloc.id] = alloc
            self._index = max(self._index, alloc.alloc_modify_index)

    def stop_job(self, job_id: str) -> list[Allocation]:
        """Mark every allocation of `job_id` to stop; returns the updated server copies."""
        index = self._next_index()
        stopped = []
        for alloc in list(self.allocs.values()):
            if alloc.job_id != job_id or alloc.desired_status == ALLOC_DESIRED_STOP:
                continue
            new = msgspec.structs.replace(alloc, desired_status=ALLOC_DESIRED_STOP,
                                          desired_description="alloc is being stopped",
                                          modify_index=index, alloc_modify_index=index)
            self.allocs[new.id] = new
            stopped.append(new)
        job = self.jobs.get(job_id)
        if job is not None:
            self.broker.job_deregistered(job)
        return stopped

"""The pure scheduler's tests: the state it reads, kept in plain memory."""

from __future__ import annotations

from yurt.runtime.server.scheduler.plan import Plan
from yurt.runtime.structs import Allocation, Evaluation, Node
from yurt.runtime.structs.hostvolume import HostVolume


class SchedulerState:
    """The scheduler's view over a dict of allocations: what LocalServer answers from its
    store, with a plan applied as the server commits it (every allocation it names stored
    under its ID). `node` is the first node; `more` are the others of a cluster."""

    def __init__(self, node: Node, *more: Node) -> None:
        self.node = node
        self.more: list[Node] = list(more)
        self.allocs: dict[str, Allocation] = {}
        #: Dynamic host volumes by ID (the server's `HostVolumeBook`).
        self.volumes: dict[str, HostVolume] = {}

    def nodes(self) -> list[Node]:
        return [self.node, *self.more]

    def job_allocs(self, job_id: str) -> list[Allocation]:
        return [a for a in self.allocs.values() if a.job_id == job_id]

    def live_allocs(self) -> list[Allocation]:
        return [a for a in self.allocs.values() if not a.is_terminal()]

    def blocked_evals(self, job_id: str) -> list[Evaluation]:
        return []

    def host_volume(self, vol_id: str) -> HostVolume | None:
        return self.volumes.get(vol_id)

    def apply(self, plan: Plan) -> None:
        for alloc in plan.place + plan.stop + plan.update:
            self.allocs[alloc.id] = alloc

"""`resources { cores }` at placement (pure, layer 0): a task asking for cores holds that
many of the node's `TotalCpuCores` alone, the lowest free IDs; when too few are free the
group is not placed there, with Nomad's "cores" dimension exhausted; a stopped allocation
frees its cores."""

from __future__ import annotations

import msgspec

from tests.scheduler_support import SchedulerState
from tests.test_scheduler_multinode import job, node, run, running
from yurt.runtime.structs import (
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
)
from yurt.runtime.structs.allocresources import allocated_resources


def _node(cores: int) -> object:
    return node("a", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=8000, total_cpu_cores=cores),
        memory=NodeMemoryResources(memory_mb=8192)))


def test_cores_are_reserved_alone_and_exhausted_with_nomads_dimension() -> None:
    state = SchedulerState(_node(3))  # type: ignore[arg-type]
    j = job(count=2, cpu=0, resources_block="cores = 1")
    first = running(state, run(state, j))
    assert sorted(a.task_resources["t"].reserved_cores[0] for a in first) == [0, 1]
    assert allocated_resources(first[0])["Tasks"]["t"]["Cpu"]["ReservedCores"] in ([0], [1])
    more = job(count=4, cpu=0, resources_block="cores = 1")
    more.version, more.job_modify_index = 1, 50
    plan = run(state, more)
    assert [a.task_resources["t"].reserved_cores for a in plan.place] == [[2]]
    assert plan.eval.failed_tg_allocs is not None
    metric = plan.eval.failed_tg_allocs["g"]
    assert metric.dimension_exhausted == {"cores": 1}
    assert plan.failed["g"].startswith("Resources exhausted: cores")


def test_a_stopped_allocation_frees_its_cores() -> None:
    state = SchedulerState(_node(1))  # type: ignore[arg-type]
    (first,) = running(state, run(state, job(cpu=0, resources_block="cores = 1")))
    other = job("other", cpu=0, resources_block="cores = 1")
    assert run(state, other).place == []
    state.allocs[first.id] = msgspec.structs.replace(first, desired_status="stop",
                                                     client_status="complete")
    (placed,) = run(state, other).place
    assert placed.task_resources["t"].reserved_cores == [0]

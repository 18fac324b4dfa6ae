"""A drain's waves follow `migrate { max_parallel }` and go on once the previous wave's
replacements are healthy, as Nomad's drainer does (layer 0, time as a number)."""

from __future__ import annotations

import msgspec

from yurt.runtime.server.scheduler.drain import plan_drain, start_strategy
from yurt.runtime.structs import (
    Allocation,
    AllocDeploymentStatus,
    Job,
    MigrateStrategy,
    TaskGroup,
)

NOW = 1_700_000_000 * 10**9


def test_the_next_wave_goes_once_the_replacements_are_healthy() -> None:
    group = TaskGroup(name="g", count=4, migrate=MigrateStrategy(max_parallel=2))
    job = Job(id="j", task_groups=[group])
    allocs = [Allocation(id=f"a{i}", name=f"j.g[{i}]", job_id="j", job=job, task_group="g",
                         client_status="running", create_index=i) for i in range(4)]
    strategy = start_strategy(0, False, NOW, None)
    assert [a.id for a in plan_drain(strategy, allocs, NOW).stop] == ["a0", "a1"]
    moving = [msgspec.structs.replace(a, desired_status="stop", next_allocation=f"n{i}")
              for i, a in enumerate(allocs[:2])]
    new = [Allocation(id=f"n{i}", job_id="j", job=job, task_group="g",
                      client_status="running") for i in range(2)]
    known = {a.id: a for a in [*moving, *allocs[2:], *new]}
    # Replacements placed (elsewhere) but not healthy yet: nothing more goes.
    assert plan_drain(strategy, [*moving, *allocs[2:]], NOW, known).stop == []
    known["n0"] = msgspec.structs.replace(new[0], deployment_status=AllocDeploymentStatus(
        healthy=True))
    assert [a.id for a in plan_drain(strategy, [*moving, *allocs[2:]], NOW, known).stop] \
        == ["a2"]
    # An unhealthy replacement holds the wave as a running one does.
    known["n0"] = msgspec.structs.replace(new[0], deployment_status=AllocDeploymentStatus(
        healthy=False))
    assert plan_drain(strategy, [*moving, *allocs[2:]], NOW, known).stop == []

"""Constraints in placement (layer 0, the pure scheduler): a node that fails a constraint is
filtered with Nomad's AllocMetric (`ConstraintFiltered`, `NodesFiltered`, `NodesEvaluated`)
and the group blocks; `distinct_hosts` places one allocation per node; a change to
constraints, affinities or spreads alone updates allocations in place where the node still
fits, and replaces them (keeping the old one running if nothing fits) where it does not."""

from __future__ import annotations

import itertools

import msgspec

from tests.scheduler_support import SchedulerState
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.scheduler import schedule
from yurt.runtime.server.scheduler.plan import Plan
from yurt.runtime.structs import (
    Evaluation,
    Job,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
)

NODE = Node(id="n1", name="box", datacenter="dc1", attributes={"kernel.name": "linux",
                                                                "nomad.version": "1.7.2"},
            meta={"rack": "r1"},
            node_resources=NodeResources(cpu=NodeCpuResources(cpu_shares=4000),
                                         memory=NodeMemoryResources(memory_mb=4096)))


_ids = (f"id-{i}" for i in itertools.count())


def run(state: SchedulerState, job: Job, index: int) -> Plan:
    job.job_modify_index = index
    ev = Evaluation(id=next(_ids), job_id=job.id, triggered_by="job-register")
    plan = schedule(state, ev, job, index=index, now=index, new_id=lambda: next(_ids))
    state.apply(plan)
    return plan


def job(group_block: str = "", count: int = 1, job_block: str = "", env: str = "a") -> Job:
    return parse_job(f'''job "web" {{
  {job_block}
  group "g" {{
    count = {count}
    {group_block}
    task "t" {{
      driver = "mock_driver"
      env {{ X = "{env}" }}
    }}
  }}
}}''')


def test_a_node_that_fails_a_constraint_is_filtered_with_nomads_metric() -> None:
    state = SchedulerState(NODE)
    plan = run(state, job('constraint {\n attribute = "${attr.kernel.name}"\n'
                          ' value = "windows"\n }', count=2), 1)
    assert plan.place == []
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.constraint_filtered == {"${attr.kernel.name} = windows": 1}
    assert (metric.nodes_evaluated, metric.nodes_filtered, metric.nodes_in_pool) == (1, 1, 1)
    assert metric.nodes_available == {"dc1": 1}
    assert metric.nodes_exhausted == 0
    assert metric.dimension_exhausted is None
    assert metric.coalesced_failures == 1  # the second allocation failed the same way
    assert plan.failed == {"g": 'Constraint "${attr.kernel.name} = windows" filtered 1 nodes'}
    (blocked,) = plan.evals
    assert blocked.status == "blocked"
    assert plan.eval.blocked_eval == blocked.id
    encoded = msgspec.json.decode(msgspec.json.encode(metric))
    assert encoded["ConstraintFiltered"] == {"${attr.kernel.name} = windows": 1}
    assert (encoded["NodesFiltered"], encoded["NodesEvaluated"]) == (1, 1)


def test_constraints_that_hold_place_as_before() -> None:
    state = SchedulerState(NODE)
    plan = run(state, job('constraint {\n attribute = "${attr.nomad.version}"\n'
                          ' version = ">= 1.6, < 2"\n }\n'
                          'constraint {\n attribute = "${meta.rack}"\n regexp = "^r[0-9]$"\n }',
                          count=2, job_block='constraint {\n attribute = "${node.datacenter}"\n'
                                             ' value = "dc1"\n }'), 1)
    assert len(plan.place) == 2
    assert plan.eval.failed_tg_allocs is None


def test_distinct_hosts_places_one_allocation_per_node() -> None:
    state = SchedulerState(NODE)
    plan = run(state, job("constraint { distinct_hosts = true }", count=3), 1)
    assert len(plan.place) == 1
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.constraint_filtered == {"distinct_hosts": 1}
    assert metric.coalesced_failures == 1
    # A destructive update of the one allocation replaces it on the same node.
    first = plan.place[0]
    update = run(state, job("constraint { distinct_hosts = true }", count=1, env="b"), 2)
    assert [a.previous_allocation for a in update.place] == [first.id]
    assert update.eval.failed_tg_allocs is None


def test_distinct_property_allows_its_count() -> None:
    state = SchedulerState(NODE)
    plan = run(state, job('constraint {\n distinct_property = "${meta.rack}"\n value = "2"\n }',
                          count=3), 1)
    assert len(plan.place) == 2
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.constraint_filtered == {"distinct_property: ${meta.rack}=r1 used by 2 allocs": 1}


def test_changing_only_placement_blocks_updates_in_place_where_the_node_fits() -> None:
    state = SchedulerState(NODE)
    (first,) = run(state, job(), 1).place
    changed = job('constraint {\n attribute = "${meta.rack}"\n value = "r1"\n }\n'
                  'affinity {\n attribute = "${node.datacenter}"\n value = "dc2"\n }\n'
                  'spread { attribute = "${meta.rack}" }')
    plan = run(state, changed, 2)
    assert plan.place == []
    assert plan.stop == []
    assert [a.id for a in plan.update] == [first.id]
    assert plan.desired["g"].in_place_update == 1
    # The node no longer fits: the allocation is to be replaced, nothing can take its place,
    # so it keeps running as it was, and the group blocks with the filter reason.
    plan = run(state, job('constraint {\n attribute = "${meta.rack}"\n value = "r2"\n }'), 3)
    assert plan.place == []
    assert plan.stop == []
    assert plan.update == []
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.constraint_filtered == {"${meta.rack} = r2": 1}
    assert [a.id for a in state.live_allocs()] == [first.id]


def test_a_job_stored_before_default_identities_is_updated_in_place() -> None:
    # A job placed by a build that gave tasks no default identity, run again unchanged.
    state = SchedulerState(NODE)
    old = job()
    old.task_groups[0].tasks[0].default_identity = None
    (first,) = run(state, old, 1).place
    plan = run(state, job(), 2)
    assert (plan.place, plan.stop) == ([], [])
    assert [a.id for a in plan.update] == [first.id]
    # A real identity change still replaces the allocation.
    named = job()
    named.task_groups[0].tasks[0].default_identity.env = True  # type: ignore[union-attr]
    plan = run(state, named, 3)
    assert [a.previous_allocation for a in plan.place] == [first.id]

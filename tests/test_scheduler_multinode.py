"""Placement across several nodes (layer 0, the pure scheduler over an in-memory state): the
candidates (ready, eligible, not draining, in the job's datacenters), Nomad's binpack and
spread ranking, the job anti-affinity, per-node resources (CPU, memory, ports, devices),
preemption on the node where it helps, AllocMetric across nodes, and allocations lost with
their node replaced elsewhere with Nomad's words."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from tests.scheduler_support import SchedulerState
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.scheduler import binpack, placement, schedule
from yurt.runtime.server.scheduler.plan import Plan
from yurt.runtime.structs import (
    Allocation,
    DrainStrategy,
    Evaluation,
    Job,
    Node,
    NodeCpuResources,
    NodeDeviceInstance,
    NodeDeviceResource,
    NodeMemoryResources,
    NodeResources,
)

_ids = (f"id-{i}" for i in itertools.count())


def node(node_id: str, *, cpu: int = 4000, mem: int = 4096, dc: str = "dc1",
         status: str = "ready", **fields: object) -> Node:
    return msgspec.structs.replace(
        Node(id=node_id, name=f"name-{node_id}", datacenter=dc, status=status,
             attributes={"unique.network.ip-address": "127.0.0.1"},
             node_resources=NodeResources(cpu=NodeCpuResources(cpu_shares=cpu),
                                          memory=NodeMemoryResources(memory_mb=mem))),
        **fields)


def job(job_id: str = "web", *, count: int = 1, cpu: int = 500, mem: int = 256,
        priority: int = 50, group_block: str = "", job_block: str = "",
        job_type: str = "service", resources_block: str = "") -> Job:
    parsed = parse_job(f'''job "{job_id}" {{
  type = "{job_type}"
  priority = {priority}
  {job_block}
  group "g" {{
    count = {count}
    {group_block}
    task "t" {{
      driver = "mock_driver"
      resources {{
        cpu = {cpu}
        memory = {mem}
        {resources_block}
      }}
    }}
  }}
}}''')
    return parsed


def run(state: SchedulerState, j: Job, *, trigger: str = "job-register",
        algorithm: str = "binpack") -> Plan:
    index = max((a.modify_index for a in state.allocs.values()), default=0) + 1
    j.job_modify_index = j.job_modify_index or index
    ev = Evaluation(id=next(_ids), job_id=j.id, triggered_by=trigger, type=j.type)
    plan = schedule(state, ev, j, index=index, now=index, new_id=lambda: next(_ids),
                    algorithm=algorithm)
    state.apply(plan)
    return plan


def running(state: SchedulerState, plan: Plan) -> list[Allocation]:
    """The plan's placements, reported running by their clients."""
    out = []
    for alloc in plan.place:
        alloc = msgspec.structs.replace(alloc, client_status="running")
        state.allocs[alloc.id] = alloc
        out.append(alloc)
    return out


def on(plan: Plan) -> list[str]:
    return sorted(a.node_id for a in plan.place)


# ------------------------------------------------------------------ ranking


def test_binpack_picks_the_fuller_node() -> None:
    state = SchedulerState(node("a"), node("b"))
    running(state, run(state, job("filler", cpu=2000, mem=2048)))
    (filler,) = state.live_allocs()
    plan = run(state, job("web"))
    (placed,) = plan.place
    assert placed.node_id == filler.node_id
    assert placed.node_name == f"name-{filler.node_id}"


def test_spread_picks_the_emptier_node() -> None:
    state = SchedulerState(node("a"), node("b"))
    running(state, run(state, job("filler", cpu=2000, mem=2048), algorithm="spread"))
    (filler,) = state.live_allocs()
    (placed,) = run(state, job("web"), algorithm="spread").place
    assert placed.node_id != filler.node_id


def test_binpack_scores_as_nomads_score_fit() -> None:
    # Nomad's ScoreFitBinPack on a node 50 % used: 20 - 2 * 10^0.5, over 18.
    n = node("a", cpu=1000, mem=1000)
    assert binpack.fitness(n, 500, 500) == pytest.approx((20 - 2 * 10 ** 0.5) / 18)
    assert binpack.fitness(n, 500, 500, "spread") == pytest.approx((2 * 10 ** 0.5 - 2) / 18)
    assert binpack.fitness(n, 1000, 1000) == pytest.approx(1.0)
    assert binpack.anti_affinity(0, 3) is None
    assert binpack.anti_affinity(1, 3) == pytest.approx(-2 / 3)


def test_anti_affinity_spreads_a_groups_allocations_over_equal_nodes() -> None:
    state = SchedulerState(node("a"), node("b"), node("c"))
    plan = run(state, job(count=3))
    assert on(plan) == ["a", "b", "c"]


def test_binpack_fills_the_fuller_node_until_anti_affinity_outweighs_it() -> None:
    # The first allocation goes to the node at 75 % (fitness 0.92 against 0.06); on the
    # second, one collision costs -(1 + 1) / count = -1, averaged in: -0.04 < 0.06.
    state = SchedulerState(node("a"), node("b"))
    running(state, run(state, job("filler", cpu=3000, mem=3000)))
    (filler,) = state.live_allocs()
    first, second = run(state, job("web", count=2, cpu=100, mem=100)).place
    assert first.node_id == filler.node_id
    assert second.node_id != filler.node_id


def test_affinity_prefers_the_matching_node() -> None:
    state = SchedulerState(node("a"), node("b", meta={"rack": "r2"}))
    (placed,) = run(state, job(group_block='affinity {\n attribute = "${meta.rack}"\n'
                                          ' value = "r2"\n weight = 100\n }')).place
    assert placed.node_id == "b"


def test_an_even_spread_prefers_the_value_with_fewest_allocations() -> None:
    # Without the spread the second allocation would go to a2, first of the equal nodes.
    state = SchedulerState(node("a1"), node("a2"), node("b1", dc="dc2"))
    plan = run(state, job(count=2, group_block='spread {\n attribute = "${node.datacenter}"\n }'))
    assert [a.node_id for a in plan.place] == ["a1", "b1"]


def test_a_spread_with_targets_places_by_their_percentages() -> None:
    # 75 % of 4 in dc1, 25 % in dc2; the anti-affinity alone would alternate, 2 and 2.
    state = SchedulerState(node("a"), node("b", dc="dc2"))
    spread = ('spread {\n attribute = "${node.datacenter}"\n'
              ' target "dc1" {\n percent = 75\n }\n target "dc2" {\n percent = 25\n }\n }')
    plan = run(state, job(count=4, group_block=spread))
    assert [a.node_id for a in plan.place] == ["a", "b", "a", "a"]
    plain = run(SchedulerState(node("a"), node("b", dc="dc2")), job(count=4))
    assert [a.node_id for a in plain.place] == ["a", "b", "a", "b"]


def test_spread_scores_as_nomads_spread_iterator() -> None:
    spread = parse_job('job "j" {\n group "g" {\n spread {\n attribute = "${node.datacenter}"'
                       '\n target "dc1" {\n percent = 50\n }\n }\n task "t" {\n'
                       ' driver = "mock_driver"\n }\n }\n}').task_groups[0].spreads
    # count 4: dc1 wants 2 (one used: (2 - 2) / 2 = 0, not averaged in), the implicit
    # target the other 2 ((2 - 1) / 2 for a value with none yet).
    assert binpack.spread_score(spread, 4, node("a"), [{"dc1": 1}]) is None
    assert binpack.spread_score(spread, 4, node("b", dc="dc7"), [{"dc1": 1}]) == 0.5
    assert binpack.spread_score(spread, 4, node("c", dc=""), [{}]) == 0.5
    unset = msgspec.structs.replace(spread[0], attribute="${meta.nope}")
    assert binpack.spread_score([unset], 4, node("a"), [{}]) == -1.0


def test_a_failed_allocation_is_replaced_away_from_its_node() -> None:
    # Nomad's rescheduling penalty: -1 on the node the failed allocation ran on.
    state = SchedulerState(node("a"), node("b"))
    (first,) = run(state, job()).place
    assert first.node_id == "a"
    state.allocs[first.id] = msgspec.structs.replace(first, client_status="failed")
    (replacement,) = run(state, job()).place
    assert replacement.previous_allocation == first.id
    assert replacement.node_id == "b"


# ------------------------------------------------------------------ candidates


def test_the_jobs_datacenters_filter_nodes_with_globs() -> None:
    state = SchedulerState(node("a", dc="east-1"), node("b", dc="west-1"))
    (placed,) = run(state, job(job_block='datacenters = ["west-*"]')).place
    assert placed.node_id == "b"
    plan = run(state, job("other", job_block='datacenters = ["north"]'))
    assert plan.place == []
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert (metric.nodes_evaluated, metric.nodes_in_pool, metric.nodes_available) == (0, 0, {})


@pytest.mark.parametrize(("pattern", "value", "matches"), [
    ("*", "anything", True), ("dc1", "dc1", True), ("dc1", "dc10", False),
    ("dc*", "dc10", True), ("*-1", "us-east-1", True), ("*-1", "us-east-2", False),
    ("us-*-1", "us-east-1", True), ("a*b*c", "abc", True), ("a*b*c", "acb", False),
    ("ab*ba", "aba", False),
])
def test_datacenters_match_as_go_glob(pattern: str, value: str, matches: bool) -> None:
    assert binpack.glob_match(pattern, value) is matches


def test_a_node_of_another_pool_is_not_a_candidate() -> None:
    state = SchedulerState(node("a", node_pool="gpu"), node("b"))
    plan = run(state, job(count=2))
    assert on(plan) == ["b", "b"]
    assert binpack.candidates(state.nodes(), job()).in_pool == 1


@pytest.mark.parametrize("bad", [
    {"status": "down"}, {"status": "disconnected"},
    {"scheduling_eligibility": "ineligible"},
    {"drain_strategy": DrainStrategy(deadline=-1)},
])
def test_ineligible_draining_and_down_nodes_are_not_candidates(bad: dict[str, object]) -> None:
    state = SchedulerState(node("a", **bad), node("b"))
    plan = run(state, job(count=2))
    assert on(plan) == ["b", "b"]
    # Alone, it takes nothing: nothing evaluated, none available in its datacenter.
    state = SchedulerState(node("a", **bad))
    plan = run(state, job(count=2))
    assert plan.place == []
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert (metric.nodes_evaluated, metric.nodes_in_pool, metric.nodes_available) == (
        0, 1, {"dc1": 0})


def test_a_group_that_fits_no_node_blocks_with_metrics_across_nodes() -> None:
    state = SchedulerState(node("a", cpu=1000), node("b", mem=512, dc="dc2"),
                           node("c", meta={"rack": "r9"}), node("d", status="down"))
    plan = run(state, job(cpu=2000, mem=1024, group_block='constraint {\n'
                          ' attribute = "${meta.rack}"\n operator = "!="\n value = "r9"\n }'))
    assert plan.place == []
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.nodes_evaluated == 3
    assert metric.nodes_filtered == 1
    assert metric.constraint_filtered == {"${meta.rack} != r9": 1}
    assert metric.nodes_exhausted == 2
    assert metric.dimension_exhausted == {"cpu": 1, "memory": 1}
    assert metric.nodes_in_pool == 4
    assert metric.nodes_available == {"dc1": 2, "dc2": 1}
    assert plan.failed == {"g": "Resources exhausted: cpu (needs 2000 MHz, 1000 of 1000 MHz free)"}
    (blocked,) = plan.evals
    assert blocked.status == "blocked"


def test_the_one_node_messages_are_kept() -> None:
    state = SchedulerState(node("a", cpu=1000))
    plan = run(state, job(cpu=2000))
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert (metric.nodes_evaluated, metric.nodes_exhausted, metric.nodes_in_pool,
            metric.nodes_available, metric.dimension_exhausted) == (1, 1, 1, {"dc1": 1},
                                                                    {"cpu": 1})
    assert plan.failed == {"g": "Resources exhausted: cpu (needs 2000 MHz, 1000 of 1000 MHz free)"}


def test_distinct_hosts_places_one_allocation_per_node() -> None:
    state = SchedulerState(node("a"), node("b"))
    plan = run(state, job(count=3, group_block='constraint {\n operator = "distinct_hosts"\n'
                                               ' value = "true"\n }'))
    assert on(plan) == ["a", "b"]
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.constraint_filtered == {"distinct_hosts": 2}
    assert plan.failed == {"g": 'Constraint "distinct_hosts" filtered 2 nodes'}


def test_distinct_property_counts_allocations_on_every_node_with_the_value() -> None:
    state = SchedulerState(node("a", meta={"rack": "r1"}), node("b", meta={"rack": "r1"}),
                           node("c", meta={"rack": "r2"}))
    plan = run(state, job(count=3, group_block='constraint {\n operator = "distinct_property"'
                                               '\n attribute = "${meta.rack}"\n }'))
    placed = on(plan)
    assert len(placed) == 2
    assert "c" in placed
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.constraint_filtered == {
        "distinct_property: ${meta.rack}=r1 used by 1 allocs": 2,
        "distinct_property: ${meta.rack}=r2 used by 1 allocs": 1}


# ------------------------------------------------------------------ per-node resources


def test_cpu_and_memory_are_counted_per_node() -> None:
    state = SchedulerState(node("a", cpu=1000), node("b", cpu=1000))
    plan = run(state, job(count=4, cpu=500))
    assert on(plan) == ["a", "a", "b", "b"]
    plan = run(state, job("more", cpu=500))
    assert plan.place == []
    assert plan.eval.failed_tg_allocs["g"].nodes_exhausted == 2  # type: ignore[index]


def test_a_static_port_is_taken_per_node() -> None:
    state = SchedulerState(node("a"), node("b"))
    ports = 'network {\n port "db" { static = 6379 }\n }'
    plan = run(state, job(count=2, group_block=ports))
    assert on(plan) == ["a", "b"]
    plan = run(state, job("other", group_block=ports))
    assert plan.place == []
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.dimension_exhausted == {"network: reserved port collision db=6379": 2}


def test_devices_are_taken_per_node() -> None:
    gpu = [NodeDeviceResource(vendor="nvidia", type="gpu", name="t4",
                              instances=[NodeDeviceInstance(id="g0")])]
    state = SchedulerState(node("a", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=4096),
        devices=gpu)), node("b"))
    state.more.append(node("c", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=4096),
        devices=[msgspec.structs.replace(gpu[0], instances=[NodeDeviceInstance(id="g1")])])))
    plan = run(state, job(count=2, resources_block='device "nvidia/gpu" { count = 1 }'))
    assert on(plan) == ["a", "c"]
    ids = sorted(d for a in plan.place for d in a.task_resources["t"].devices[0].device_ids)
    assert ids == ["g0", "g1"]
    plan = run(state, job("more", resources_block='device "nvidia/gpu" { count = 1 }'))
    assert plan.place == []
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert metric.dimension_exhausted == {"devices": 3}


def test_preemption_evicts_on_the_node_where_it_helps() -> None:
    state = SchedulerState(node("a", cpu=1000), node("b", cpu=1000))
    important = job("important", cpu=1000, priority=80, job_block='datacenters = ["dc1"]')
    state.more[0] = msgspec.structs.replace(state.more[0], meta={"tier": "low"})
    running(state, run(state, important))
    low = job("low", cpu=1000, priority=20, group_block='constraint {\n'
              ' attribute = "${meta.tier}"\n value = "low"\n }')
    (victim,) = running(state, run(state, low))
    assert victim.node_id == "b"
    plan = run(state, job("mid", cpu=1000, priority=60))
    (placed,) = plan.place
    assert placed.node_id == "b"
    assert placed.preempted_allocations == [victim.id]
    (evicted,) = plan.stop
    assert (evicted.id, evicted.desired_status) == (victim.id, "evict")


# ------------------------------------------------------------------ lost allocations


def test_an_allocation_on_a_down_node_is_lost_and_replaced_on_another() -> None:
    state = SchedulerState(node("a"), node("b"))
    (first,) = running(state, run(state, job()))
    other = "b" if first.node_id == "a" else "a"
    down = next(n for n in state.nodes() if n.id == first.node_id)
    down.status = "down"
    plan = run(state, job(), trigger="node-update")
    (lost,) = plan.stop
    assert (lost.id, lost.client_status, lost.desired_status, lost.desired_description) == (
        first.id, "lost", "stop", "alloc is lost since its node is down")
    (replacement,) = plan.place
    assert (replacement.node_id, replacement.name) == (other, first.name)
    assert replacement.previous_allocation == first.id
    assert lost.next_allocation == replacement.id
    assert plan.desired["g"].place == 1


def test_an_allocation_on_a_node_that_left_is_lost_too() -> None:
    state = SchedulerState(node("a"), node("b"))
    allocs = running(state, run(state, job(count=2)))
    state.more.clear()  # "b" left
    gone = [a for a in allocs if a.node_id == "b"]
    plan = run(state, job(count=2), trigger="node-update")
    assert [(a.id, a.client_status) for a in plan.stop] == [(gone[0].id, "lost")]
    assert on(plan) == ["a"]


def test_a_lost_allocation_is_replaced_even_with_no_reschedule_attempts_left() -> None:
    state = SchedulerState(node("a"), node("b"))
    no_retry = 'reschedule {\n attempts = 0\n unlimited = false\n }'
    (first,) = running(state, run(state, job(group_block=no_retry)))
    state.node.status = state.more[0].status = "down"
    next(n for n in state.nodes() if n.id != first.node_id).status = "ready"
    plan = run(state, job(group_block=no_retry), trigger="node-update")
    assert len(plan.place) == 1
    assert plan.evals == []


def test_a_completed_batch_allocation_on_a_down_node_is_not_replaced() -> None:
    state = SchedulerState(node("a"), node("b"))
    (first,) = run(state, job(job_type="batch")).place
    state.allocs[first.id] = msgspec.structs.replace(first, client_status="complete")
    next(n for n in state.nodes() if n.id == first.node_id).status = "down"
    plan = run(state, job(job_type="batch"), trigger="node-update")
    assert (plan.place, plan.stop) == ([], [])


def test_a_lost_allocation_with_nowhere_to_go_is_stopped_and_blocks() -> None:
    state = SchedulerState(node("a"), node("b", cpu=100))
    (first,) = running(state, run(state, job()))
    assert first.node_id == "a"
    state.node.status = "down"
    plan = run(state, job(), trigger="node-update")
    assert [(a.id, a.client_status) for a in plan.stop] == [(first.id, "lost")]
    assert plan.place == []
    assert [e.status for e in plan.evals] == ["blocked"]


def test_a_stopped_jobs_allocation_on_a_down_node_is_lost() -> None:
    state = SchedulerState(node("a"))
    j = job()
    (first,) = running(state, run(state, j))
    state.node.status = "down"
    j.stop = True
    (stop,) = run(state, j).stop
    assert (stop.id, stop.client_status, stop.desired_description) == (
        first.id, "lost", "alloc is lost since its node is down")


# ------------------------------------------------------------------ system and sysbatch


def system(job_id: str = "agent", *, job_type: str = "system", **kw: object) -> Job:
    """A system job (the jobspec does not take the type yet: built from a service one)."""
    return msgspec.structs.replace(job(job_id, **kw), type=job_type)  # type: ignore[arg-type]


def test_a_system_job_runs_one_allocation_per_eligible_node() -> None:
    state = SchedulerState(node("a"), node("b"), node("c", scheduling_eligibility="ineligible"),
                           node("d", status="down"), node("e", dc="dc2"))
    plan = run(state, system(job_block='datacenters = ["dc1"]'))
    assert on(plan) == ["a", "b"]
    assert {a.name for a in plan.place} == {"agent.g[0]"}
    assert plan.desired["g"].place == 2
    assert plan.eval.status == "complete"
    assert plan.evals == []


def test_a_system_job_is_placed_on_a_node_that_joins_later() -> None:
    state = SchedulerState(node("a"))
    j = system()
    first = running(state, run(state, j))
    state.more.append(node("b"))
    plan = run(state, j, trigger="node-update")
    assert on(plan) == ["b"]
    assert plan.stop == []
    assert plan.desired["g"].ignore == 1
    again = run(state, j, trigger="node-update")
    assert (again.place, again.stop) == ([], [])
    assert [a.node_id for a in first] == ["a"]


def test_a_system_allocation_on_a_down_node_is_lost_and_not_replaced() -> None:
    state = SchedulerState(node("a"), node("b"))
    j = system()
    allocs = running(state, run(state, j))
    state.more[0].status = "down"
    plan = run(state, j, trigger="node-update")
    (lost,) = plan.stop
    assert lost.id == next(a.id for a in allocs if a.node_id == "b")
    assert (lost.client_status, lost.desired_status, lost.desired_description) == (
        "lost", "stop", "alloc is lost since its node is down")
    assert plan.place == []


def test_a_changed_system_group_is_replaced_on_each_node() -> None:
    state = SchedulerState(node("a"), node("b"))
    allocs = running(state, run(state, system()))
    plan = run(state, system(mem=300))
    assert on(plan) == ["a", "b"]
    by_node = {a.node_id: a for a in allocs}
    assert {(a.node_id, a.previous_allocation) for a in plan.place} == {
        (n, a.id) for n, a in by_node.items()}
    assert sorted(a.desired_description for a in plan.stop) == ["alloc is being updated"] * 2


def test_a_system_job_skips_filtered_nodes_silently_and_reports_full_ones() -> None:
    rack = 'constraint {\n attribute = "${meta.rack}"\n value = "r1"\n }'
    state = SchedulerState(node("a", meta={"rack": "r1"}), node("b"))
    plan = run(state, system(group_block=rack))
    assert on(plan) == ["a"]
    assert plan.eval.failed_tg_allocs is None
    state = SchedulerState(node("a"), node("b"))
    plan = run(state, system(group_block=rack))
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert (metric.nodes_evaluated, metric.nodes_filtered) == (2, 2)
    state = SchedulerState(node("a"), node("b", cpu=100))
    plan = run(state, system())
    assert on(plan) == ["a"]
    metric = plan.eval.failed_tg_allocs["g"]  # type: ignore[index]
    assert (metric.nodes_evaluated, metric.nodes_exhausted) == (1, 1)
    assert metric.dimension_exhausted == {"cpu": 1}
    assert plan.failed == {"g": "Resources exhausted: cpu (needs 500 MHz, 100 of 100 MHz free)"}
    assert [e.status for e in plan.evals] == ["blocked"]


def test_a_sysbatch_job_runs_once_per_node_and_again_only_on_a_new_node() -> None:
    state = SchedulerState(node("a"))
    j = system("sweep", job_type="sysbatch")
    (done,) = run(state, j).place
    state.allocs[done.id] = msgspec.structs.replace(done, client_status="complete")
    state.more.append(node("b"))
    plan = run(state, j)  # registered again, unchanged: "a" is done
    assert on(plan) == ["b"]
    assert plan.place[0].name == "sweep.g[0]"


# ------------------------------------------------------------------ disconnected nodes

SECOND = 1_000_000_000


def test_a_disconnected_node_without_a_window_loses_its_allocations() -> None:
    state = SchedulerState(node("a"), node("b"))
    (first,) = running(state, run(state, job()))
    next(n for n in state.nodes() if n.id == first.node_id).status = "disconnected"
    plan = run(state, job(), trigger="node-update")
    assert [(a.id, a.client_status) for a in plan.stop] == [(first.id, "lost")]
    assert len(plan.place) == 1


@pytest.mark.parametrize("window", ['max_client_disconnect = "1m"',
                                    'disconnect {\n lost_after = "1m"\n }'])
def test_a_disconnected_allocation_is_unknown_and_replaced_then_lost_after_the_window(
        window: str) -> None:
    state = SchedulerState(node("a"), node("b"))
    j = job(group_block=window)
    (first,) = running(state, run(state, j))
    away = next(n for n in state.nodes() if n.id == first.node_id)
    away.status = "disconnected"
    plan = run(state, j, trigger="node-update")
    assert plan.stop == []
    (unknown,) = plan.update
    assert (unknown.id, unknown.client_status, unknown.desired_status) == (
        first.id, "unknown", "run")
    assert unknown.client_description == "alloc is unknown since its node is disconnected"
    (replacement,) = plan.place
    assert replacement.node_id != first.node_id
    assert replacement.previous_allocation == first.id
    (follow,) = plan.evals
    assert (follow.triggered_by, follow.status, follow.wait) == (
        "max-disconnect-timeout", "pending", 60 * SECOND)
    assert follow.status_description == "created for delayed disconnect timeout"
    assert unknown.followup_eval_id == follow.id
    running(state, plan)
    # Within the window nothing changes; past it, the unknown one is lost, not replaced
    # again (its replacement holds the name).
    ev = Evaluation(id=next(_ids), job_id=j.id, triggered_by="max-disconnect-timeout")
    within = schedule(state, ev, j, index=50, now=unknown.modify_time + 59 * SECOND,
                      new_id=lambda: next(_ids))
    assert (within.place, within.stop, within.update) == ([], [], [])
    past = schedule(state, ev, j, index=51, now=unknown.modify_time + 60 * SECOND,
                    new_id=lambda: next(_ids))
    assert past.place == []
    assert [(a.id, a.client_status, a.desired_description) for a in past.stop] == [
        (first.id, "lost", "alloc is lost since its node is down")]


def test_a_reconnected_original_is_kept_and_its_replacement_stopped() -> None:
    state = SchedulerState(node("a"), node("b"))
    j = job(group_block='max_client_disconnect = "1h"')
    (first,) = running(state, run(state, j))
    away = next(n for n in state.nodes() if n.id == first.node_id)
    away.status = "disconnected"
    (replacement,) = running(state, run(state, j, trigger="node-update"))
    away.status = "ready"
    state.allocs[first.id] = msgspec.structs.replace(state.allocs[first.id],
                                                     client_status="running")
    plan = run(state, j, trigger="node-update")
    assert plan.place == []
    (stop,) = plan.stop
    assert (stop.id, stop.desired_status, stop.desired_description) == (
        replacement.id, "stop", "alloc not needed due to disconnected client reconnect")
    assert [a.id for a in state.live_allocs()] == [first.id]


def test_a_reconnected_original_of_an_older_version_gives_way_to_its_replacement() -> None:
    state = SchedulerState(node("a"), node("b"))
    j = job(group_block='max_client_disconnect = "1h"')
    (first,) = running(state, run(state, j))
    away = next(n for n in state.nodes() if n.id == first.node_id)
    away.status = "disconnected"
    run(state, j, trigger="node-update")
    newer = job(group_block='max_client_disconnect = "1h"')
    newer.version = 1
    newer.job_modify_index = 100
    # The replacement is updated in place; the unknown original, away, is left as it is.
    assert run(state, newer).place == []
    replacement = next(a for a in state.live_allocs() if a.id != first.id)
    assert replacement.job is not None
    assert replacement.job.version == 1
    assert state.allocs[first.id].job.version == 0  # type: ignore[union-attr]
    away.status = "ready"
    state.allocs[first.id] = msgspec.structs.replace(state.allocs[first.id],
                                                     client_status="running")
    plan = run(state, newer, trigger="node-update")
    assert [(a.id, a.desired_description) for a in plan.stop] == [
        (first.id, "alloc not needed due to job update")]
    assert [a.id for a in state.live_allocs()] == [replacement.id]


def test_placing_many_allocations_over_many_nodes_evaluates_each_node_about_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A placement changes only its own node: the others' verdicts are kept, so N
    # placements over M nodes fit about N + M times, not N × M (10,000 here).
    calls = 0
    real = placement.fit

    def counted(*args: object) -> object:
        nonlocal calls
        calls += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(placement, "fit", counted)
    state = SchedulerState(node("n0", cpu=100_000, mem=100_000),
                           *(node(f"n{i}", cpu=100_000, mem=100_000) for i in range(1, 50)))
    plan = run(state, job(count=200, cpu=10, mem=10))
    assert len(plan.place) == 200
    assert len(set(on(plan))) == 50
    assert calls <= 200 + 50


def test_a_system_allocation_on_a_disconnected_node_is_unknown_and_not_replaced() -> None:
    state = SchedulerState(node("a"), node("b"))
    j = system(group_block='max_client_disconnect = "1h"')
    allocs = running(state, run(state, j))
    away = state.more[0]
    away.status = "disconnected"
    plan = run(state, j, trigger="node-update")
    assert (plan.place, plan.stop) == ([], [])
    (unknown,) = plan.update
    assert (unknown.node_id, unknown.client_status, unknown.desired_status) == (
        "b", "unknown", "run")
    assert [e.triggered_by for e in plan.evals] == ["max-disconnect-timeout"]
    away.status = "ready"
    state.allocs[unknown.id] = msgspec.structs.replace(state.allocs[unknown.id],
                                                       client_status="running")
    back = run(state, j, trigger="node-update")
    assert (back.place, back.stop) == ([], [])
    assert sorted(a.id for a in state.live_allocs()) == sorted(a.id for a in allocs)

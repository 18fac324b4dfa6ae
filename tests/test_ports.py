"""Host port assignment (layer 0): server/scheduler/ports.py on its own, and the scheduler placing
groups with networks over a plain in-memory state. Nomad's NetworkIndex semantics: statics
checked against what is held, dynamic ports drawn from the node's range, collisions and
exhaustion refused in Nomad's words, ports freed when an allocation is terminal."""

from __future__ import annotations

import random
from itertools import count

import msgspec
import pytest

from tests.scheduler_support import SchedulerState
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.scheduler import ports, schedule
from yurt.runtime.server.scheduler.plan import Plan
from yurt.runtime.structs import (
    Evaluation,
    Job,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
    TaskGroup,
)
from yurt.runtime.structs.network import NetworkResource, Port

IP = "10.1.2.3"


def node(low: int = 0, high: int = 0, reserved: str = "") -> Node:
    n = Node(id="n1", name="n1", attributes={"unique.network.ip-address": IP},
             node_resources=NodeResources(cpu=NodeCpuResources(cpu_shares=100_000),
                                          memory=NodeMemoryResources(memory_mb=100_000),
                                          min_dynamic_port=low, max_dynamic_port=high))
    n.reserved_resources.networks.reserved_host_ports = reserved
    return n


def group(*dynamic: str, static: dict[str, int] | None = None, to: int = 0,
          ignore: bool = False, host_network: str = "default") -> TaskGroup:
    return TaskGroup(name="g", networks=[NetworkResource(
        reserved_ports=[Port(label=k, value=v, to=to, ignore_collision=ignore,
                             host_network=host_network) for k, v in (static or {}).items()],
        dynamic_ports=[Port(label=k, to=to, host_network=host_network) for k in dynamic])])


# --------------------------------------------------------------------------- parsing


def test_port_ranges_parse_as_nomads() -> None:
    assert ports.parse_port_ranges("") == []
    assert ports.parse_port_ranges("22, 80,8000-8002,80") == [22, 80, 8000, 8001, 8002]


@pytest.mark.parametrize(("spec", "message"), [
    ("0", "port must be > 0"),
    ("70000", "port must be < 65536 but found 70000"),
    ("5-3", "invalid range: starting value (3) less than ending (5) value"),
    ("1-2-3", "can only parse single port numbers or port ranges"),
    ("22,", "can't specify empty port"),
    ("http", 'parsing "http": invalid syntax'),
])
def test_bad_port_ranges_are_refused_with_nomads_message(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ports.parse_port_ranges(spec)


# --------------------------------------------------------------------------- assign


def test_a_group_without_network_gets_nothing() -> None:
    assert ports.assign(TaskGroup(name="g"), node(), frozenset()) == (None, "")


def test_a_static_port_is_given_as_asked_on_the_nodes_address() -> None:
    shared, why = ports.assign(group(static={"db": 6379}, to=6380), node(), frozenset())
    assert why == ""
    assert shared is not None
    (mapping,) = shared.ports
    assert (mapping.label, mapping.value, mapping.to, mapping.host_ip) == ("db", 6379, 6380, IP)
    (network,) = shared.networks
    assert network.ip == IP
    assert network.reserved_ports[0].value == 6379


def test_a_static_port_held_elsewhere_is_a_collision() -> None:
    assert ports.assign(group(static={"db": 6379}), node(), frozenset({6379})) == (
        None, "reserved port collision db=6379")


def test_the_nodes_reserved_ports_are_held() -> None:
    n = node(reserved="22,6000-6400")
    used = ports.node_reserved_ports(n)
    assert {22, 6000, 6379, 6400} <= used
    assert 6401 not in used
    assert ports.assign(group(static={"db": 6379}), n, used)[1] == (
        "reserved port collision db=6379")


def test_ignore_collision_takes_a_held_static_port() -> None:
    shared, why = ports.assign(group(static={"db": 6379}, ignore=True), node(),
                               frozenset({6379}))
    assert why == ""
    assert shared is not None
    assert shared.ports[0].ignore_collision


def test_an_out_of_range_static_port_is_refused() -> None:
    assert ports.assign(group(static={"x": 70000}), node(), frozenset())[1] == (
        "invalid port 70000 (out of range)")


def test_a_host_network_yurt_does_not_have_has_no_address() -> None:
    assert ports.assign(group("http", host_network="public"), node(), frozenset())[1] == (
        "no addresses available for public network")


def test_dynamic_ports_are_distinct_free_and_in_range() -> None:
    rng = random.Random(1)
    used = frozenset(range(20000, 20090))
    for _ in range(200):
        shared, why = ports.assign(group("a", "b", "c", static={"s": 20095}),
                                   node(20000, 20100), used, rng=rng)
        assert why == ""
        assert shared is not None
        values = [p.value for p in shared.ports]
        assert len(set(values)) == 4
        assert values[0] == 20095
        assert all(20090 <= v <= 20100 and v not in used for v in values[1:])
        assert shared.networks[0].dynamic_ports[0].value == values[1]


def test_the_scan_finds_the_last_free_port_where_random_draws_miss() -> None:
    used = frozenset(range(20000, 32001)) - {31999}
    for seed in range(20):
        shared, why = ports.assign(group("http"), node(), used, rng=random.Random(seed))
        assert why == ""
        assert shared is not None
        assert shared.ports[0].value == 31999


def test_no_free_dynamic_port_fails_the_selection() -> None:
    assert ports.assign(group("a", "b"), node(20000, 20001), frozenset({20000})) == (
        None, "dynamic port selection failed")


def test_to_minus_one_maps_to_the_host_port() -> None:
    shared, _ = ports.assign(group("http", to=-1), node(), frozenset())
    assert shared is not None
    assert shared.ports[0].to == shared.ports[0].value


# --------------------------------------------------------------------------- the scheduler

JOB = '''job "%s" {
  priority = %d
  group "g" {
    count = %d
    network {
      port "http" {}
      %s
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''


def web(job_id: str, *, static: int | None = None, count_: int = 1, priority: int = 50
        ) -> Job:
    db = f'port "db" {{ static = {static} }}' if static is not None else ""
    return parse_job(JOB % (job_id, priority, count_, db))


class State(SchedulerState):
    """The scheduler's state with evaluation and allocation IDs of its own."""

    def __init__(self, n: Node) -> None:
        super().__init__(n)
        self.ids = count(1)  # per state: Hypothesis replays a machine with the same IDs

    def run(self, job: Job) -> Plan:
        ev = Evaluation(id=f"ev-{next(self.ids)}", job_id=job.id,
                        triggered_by="job-register", status="pending")
        plan = schedule(self, ev, job, index=next(self.ids), now=0,
                        new_id=lambda: f"a-{next(self.ids):06d}")
        self.apply(plan)
        return plan

    def finish(self, alloc_id: str) -> None:
        self.allocs[alloc_id] = msgspec.structs.replace(self.allocs[alloc_id],
                                                        client_status="complete")


def held(state: State) -> list[int]:
    return [v for a in state.live_allocs() for v in ports.alloc_ports(a)]


def test_placement_stores_the_ports_and_two_allocations_never_share_one() -> None:
    state = State(node())
    plan = state.run(web("a", static=6379, count_=1))
    (alloc,) = plan.place
    assert alloc.allocated_shared is not None
    labels = {p.label: p.value for p in alloc.allocated_shared.ports}
    assert labels["db"] == 6379
    assert 20000 <= labels["http"] <= 32000
    state.run(web("b", count_=30))
    assert len(held(state)) == len(set(held(state))) == 2 + 30


def test_a_static_conflict_fails_placement_with_nomads_reason() -> None:
    state = State(node())
    state.run(web("a", static=6379))
    plan = state.run(web("b", static=6379))
    assert plan.place == []
    assert plan.failed == {"g": "network: reserved port collision db=6379"}
    assert plan.eval.failed_tg_allocs is not None
    metric = plan.eval.failed_tg_allocs["g"]
    assert metric.dimension_exhausted == {"network: reserved port collision db=6379": 1}
    assert metric.nodes_exhausted == 1


def test_a_terminal_allocation_frees_its_ports() -> None:
    state = State(node())
    (first,) = state.run(web("a", static=6379)).place
    state.finish(first.id)
    (second,) = state.run(web("b", static=6379)).place
    assert second.allocated_shared is not None
    assert {p.value for p in second.allocated_shared.ports} >= {6379}


def test_a_count_beyond_the_dynamic_range_places_what_fits() -> None:
    state = State(node(20000, 20002))
    plan = state.run(web("a", count_=4))
    assert len(plan.place) == 3
    assert plan.failed == {"g": "network: dynamic port selection failed"}
    assert sorted(held(state)) == [20000, 20001, 20002]


def test_a_destructive_update_may_reuse_the_replaced_allocations_static_port() -> None:
    state = State(node())
    (old,) = state.run(web("a", static=6379)).place
    changed = web("a", static=6379)
    changed.task_groups[0].tasks[0].config["run_for"] = "2h"
    plan = state.run(changed)
    (new,) = plan.place
    assert [s.id for s in plan.stop] == [old.id]
    assert new.allocated_shared is not None
    assert 6379 in ports.alloc_ports(new)


def test_a_higher_priority_job_preempts_for_a_static_port() -> None:
    state = State(node())
    (low,) = state.run(web("low", static=6379, priority=20)).place
    plan = state.run(web("high", static=6379, priority=70))
    (placed,) = plan.place
    assert placed.preempted_allocations == [low.id]
    assert held(state).count(6379) == 1

"""Node liveness (runtime/server/cluster/heartbeat.py): Nomad's heartbeat TTL formula to the
nanosecond, and the node status writes with their evaluations. Plain synchronous tests: time
is a parameter. (The deadline itself is an etcd lease: tests/test_cluster_server_core.py.)"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

import pytest

from yurt.runtime.server.cluster.heartbeat import (
    NODE_HEARTBEAT_MISSED,
    NODE_REGISTERED,
    NODE_REREGISTERED,
    SECOND_NS,
    heartbeat_ttl,
    node_down_changes,
    node_register_changes,
    node_up_changes,
    random_stagger_ns,
    rate_scaled_interval_ns,
)
from yurt.runtime.server.scheduler.drain import from_unix_ns
from yurt.runtime.structs import (
    TRIGGER_NODE_UPDATE,
    Allocation,
    ClientHostVolumeConfig,
    Evaluation,
    Job,
    Node,
    NodeEvent,
)


class FixedRandom(random.Random):
    """`getrandbits` answers a fixed value: Nomad's `rand.Int63()` pinned."""

    def __init__(self, bits: int) -> None:
        super().__init__(0)
        self.bits = bits

    def getrandbits(self, k: int, /) -> int:
        assert k == 63
        return self.bits


NO_JITTER = FixedRandom(0)
MAX_INT63 = 2**63 - 1


# --------------------------------------------------------------------------- the TTL


def test_rate_scaled_interval_is_nomads_formula() -> None:
    ten = 10 * SECOND_NS
    assert rate_scaled_interval_ns(50.0, ten, 0) == ten
    assert rate_scaled_interval_ns(50.0, ten, 500) == ten  # 500 / 50 = 10 s: the floor still
    assert rate_scaled_interval_ns(50.0, ten, 1000) == 20 * SECOND_NS
    assert rate_scaled_interval_ns(50.0, ten, 1001) == 20_020_000_000
    # Go truncates the float conversion: 1 s × 1 / 3 = 333333333.33 ns.
    assert rate_scaled_interval_ns(3.0, 0, 1) == 333_333_333
    # At or below one action a day the rate is not scaled at all.
    assert rate_scaled_interval_ns(1.0 / 86400, ten, 10**9) == ten
    assert rate_scaled_interval_ns(0.0, ten, 10**9) == ten


def test_random_stagger_is_int63_modulo_the_interval() -> None:
    assert random_stagger_ns(0, FixedRandom(MAX_INT63)) == 0
    assert random_stagger_ns(-5, FixedRandom(MAX_INT63)) == 0
    assert random_stagger_ns(10, FixedRandom(0)) == 0
    assert random_stagger_ns(10, FixedRandom(17)) == 7
    assert random_stagger_ns(10 * SECOND_NS, FixedRandom(MAX_INT63)) == MAX_INT63 % (10 * SECOND_NS)


def test_heartbeat_ttl_is_base_plus_stagger() -> None:
    assert heartbeat_ttl(3, NO_JITTER) == 10.0
    assert heartbeat_ttl(3, FixedRandom(7)) == (10 * SECOND_NS + 7) / SECOND_NS
    # The largest stagger stays strictly below twice the base.
    top = heartbeat_ttl(3, FixedRandom(10 * SECOND_NS - 1))
    assert top == (20 * SECOND_NS - 1) / SECOND_NS
    assert top < 20.0
    assert heartbeat_ttl(3, NO_JITTER, min_ttl=0.5) == 0.5
    assert heartbeat_ttl(100, NO_JITTER, min_ttl=0.5, max_per_second=10.0) == 10.0


@pytest.mark.parametrize(("nodes", "base"), [(0, 10.0), (1, 10.0), (500, 10.0), (1000, 20.0),
                                             (5000, 100.0)])
def test_heartbeat_ttl_jitter_bounds(nodes: int, base: float) -> None:
    rng = random.Random(1234)
    ttls = [heartbeat_ttl(nodes, rng) for _ in range(2000)]
    assert all(base <= t < 2 * base for t in ttls)
    # The jitter really spreads: both halves of the range are used.
    assert min(ttls) < base * 1.1
    assert max(ttls) > base * 1.9


def test_heartbeat_ttl_grows_with_the_node_count() -> None:
    bases = [heartbeat_ttl(n, NO_JITTER) for n in range(0, 20_000, 250)]
    assert bases == sorted(bases)
    assert bases[0] == 10.0
    assert bases[-1] == pytest.approx(19_750 / 50)


# --------------------------------------------------------------------------- the writes

WALL = 1_700_000_000 * SECOND_NS + 123_456_789


def ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"eval-{next(counter)}"


def job(job_id: str, type_: str = "service", *, priority: int = 50,
        datacenters: list[str] | None = None, stop: bool = False,
        namespace: str = "default") -> Job:
    return Job(id=job_id, name=job_id, type=type_, priority=priority, namespace=namespace,
               datacenters=datacenters or ["*"], stop=stop)


def alloc(alloc_id: str, j: Job, *, client: str = "running", desired: str = "run",
          with_job: bool = True) -> Allocation:
    return Allocation(id=alloc_id, namespace=j.namespace, node_id="n1", job_id=j.id,
                      job=j if with_job else None, task_group="g", client_status=client,
                      desired_status=desired)


def node(status: str = "ready", **kw: object) -> Node:
    return Node(id="n1", name="n1", datacenter="dc1", status=status, modify_index=3,
                **kw)  # type: ignore[arg-type]


def scene() -> tuple[list[Allocation], dict[tuple[str, str], Job]]:
    web = job("web", priority=70)
    done = job("done")
    batch_done = job("batch-done", "batch")
    batch = job("batch", "batch", priority=20)
    sysb = job("sysb", "sysbatch")
    system = job("sys", "system", priority=90, datacenters=["dc*"])
    other_dc = job("sys-eu", "system", datacenters=["eu-*"])
    stopped = job("sys-stopped", "system", stop=True)
    other_ns = job("web", namespace="ops")
    allocs = [
        alloc("a1", web), alloc("a2", web),  # one evaluation per job
        alloc("a3", done, client="complete", desired="stop"),  # fully terminal: none
        alloc("a4", batch_done, client="complete"),  # terminal batch: none
        alloc("a5", batch, with_job=False),  # job from the map
        alloc("a6", sysb),  # sysbatch: never node-update
        alloc("a7", other_ns),  # same ID, other namespace: its own evaluation
    ]
    jobs = {(j.namespace, j.id): j for j in
            [web, done, batch_done, batch, sysb, system, other_dc, stopped, other_ns]}
    return allocs, jobs


def eval_for(ns: str, job_id: str, job_type: str, priority: int, eval_id: str,
             node_index: int) -> Evaluation:
    return Evaluation(id=eval_id, namespace=ns, priority=priority, type=job_type,
                      triggered_by=TRIGGER_NODE_UPDATE, job_id=job_id, node_id="n1",
                      node_modify_index=node_index, status="pending", create_time=WALL,
                      modify_time=WALL)


def expected_evals(node_index: int) -> list[Evaluation]:
    return [
        eval_for("default", "web", "service", 70, "eval-1", node_index),
        eval_for("default", "batch", "batch", 20, "eval-2", node_index),
        eval_for("ops", "web", "service", 50, "eval-3", node_index),
        eval_for("default", "sys", "system", 90, "eval-4", node_index),
    ]


def test_a_missed_heartbeat_marks_the_node_down_with_nomads_event_and_evaluations() -> None:
    allocs, jobs = scene()
    before = node()
    change = node_down_changes(before, allocs, jobs, index=42, wall_ns=WALL, new_id=ids())
    assert change.node is not None
    assert change.status == "down"
    assert change.node.modify_index == 42
    assert change.node.status_updated_at == WALL // SECOND_NS
    assert change.node.status_description == before.status_description
    assert change.node.events == [NodeEvent(message=NODE_HEARTBEAT_MISSED, subsystem="Cluster",
                                            timestamp=from_unix_ns(WALL), create_index=42)]
    assert NODE_HEARTBEAT_MISSED == "Node heartbeat missed"
    assert change.evaluations == expected_evals(42)
    # The caller's node is not touched.
    assert before.status == "ready"
    assert before.events == []
    assert before.modify_index == 3


def test_node_events_keep_the_last_ten() -> None:
    old = [NodeEvent(message=f"e{i}", create_index=i) for i in range(10)]
    change = node_down_changes(node(events=old), [], {}, index=42, wall_ns=WALL, new_id=ids())
    assert change.node is not None
    assert [e.message for e in change.node.events] == [f"e{i}" for i in range(1, 10)] + [
        NODE_HEARTBEAT_MISSED]


def test_a_node_without_work_goes_down_without_evaluations() -> None:
    change = node_down_changes(node(), [], {}, index=5, wall_ns=WALL, new_id=ids())
    assert change.status == "down"
    assert change.evaluations == []


def lost_after_web(a: Allocation) -> int:
    return 60 * SECOND_NS if a.job_id == "web" else 0


def test_a_group_with_a_disconnect_window_makes_the_node_disconnected() -> None:
    allocs, jobs = scene()
    change = node_down_changes(node(), allocs, jobs, index=42, wall_ns=WALL, new_id=ids(),
                               lost_after=lost_after_web)
    assert change.status == "disconnected"
    assert change.node is not None
    assert [e.message for e in change.node.events] == [NODE_HEARTBEAT_MISSED]
    assert change.evaluations == expected_evals(42)


def test_an_expired_or_stopped_disconnect_window_means_down() -> None:
    web = job("web")
    jobs = {("default", "web"): web}
    unknown = alloc("a1", web, client="unknown")
    # Unknown for longer than its window: expired, so nothing is left to wait for.
    since = {"a1": WALL - 61 * SECOND_NS}
    change = node_down_changes(node(), [unknown], jobs, index=9, wall_ns=WALL, new_id=ids(),
                               lost_after=lost_after_web, unknown_since=since)
    assert change.status == "down"
    # Inside its window it still counts.
    since = {"a1": WALL - 59 * SECOND_NS}
    change = node_down_changes(node(), [unknown], jobs, index=9, wall_ns=WALL, new_id=ids(),
                               lost_after=lost_after_web, unknown_since=since)
    assert change.status == "disconnected"
    # An allocation the server stopped does not hold the node.
    stopping = alloc("a2", web, desired="stop")
    change = node_down_changes(node(), [stopping], jobs, index=9, wall_ns=WALL, new_id=ids(),
                               lost_after=lost_after_web)
    assert change.status == "down"
    # An initializing node has nothing to reconnect.
    change = node_down_changes(node("initializing"), [alloc("a3", web)], jobs, index=9,
                               wall_ns=WALL, new_id=ids(), lost_after=lost_after_web)
    assert change.status == "down"


def test_a_down_node_heartbeating_again_is_ready_with_evaluations() -> None:
    allocs, jobs = scene()
    change = node_up_changes(node("down"), allocs, jobs, index=50, wall_ns=WALL,
                             new_id=ids())
    assert change.status == "ready"
    assert change.node is not None
    assert change.node.modify_index == 50
    assert change.node.events == [NodeEvent(message=NODE_REREGISTERED, subsystem="Cluster",
                                            timestamp=from_unix_ns(WALL), create_index=50)]
    assert NODE_REREGISTERED == "Node reregistered by heartbeat"
    assert change.evaluations == expected_evals(50)


def test_a_ready_node_heartbeating_writes_nothing() -> None:
    allocs, jobs = scene()
    change = node_up_changes(node("ready"), allocs, jobs, index=50, wall_ns=WALL,
                             new_id=ids())
    assert change.node is None
    assert change.evaluations == []


def test_a_disconnected_node_comes_back_initializing() -> None:
    allocs, jobs = scene()
    change = node_up_changes(node("disconnected"), allocs, jobs, index=50, wall_ns=WALL,
                             new_id=ids())
    assert change.status == "initializing"
    assert change.node is not None
    assert change.node.events == []
    assert change.evaluations == expected_evals(50)


def test_an_initializing_node_waits_for_its_alloc_update() -> None:
    allocs, jobs = scene()
    held = node_up_changes(node("initializing"), allocs, jobs, index=50, wall_ns=WALL,
                           new_id=ids(), allocs_updated=False)
    assert held.node is None
    assert held.evaluations == []
    ready = node_up_changes(node("initializing"), allocs, jobs, index=50, wall_ns=WALL,
                            new_id=ids(), allocs_updated=True)
    assert ready.status == "ready"
    assert ready.evaluations == expected_evals(50)
    # Nothing live on it: nothing to wait for.
    empty = node_up_changes(node("initializing"), [], jobs, index=50, wall_ns=WALL,
                            new_id=ids(), allocs_updated=False)
    assert empty.status == "ready"


def test_registering_a_new_node() -> None:
    change = node_register_changes(None, Node(id="n1", datacenter="dc1", status=""), [],
                                   scene()[1], index=7, wall_ns=WALL, new_id=ids())
    assert change.status == "initializing"
    assert change.node is not None
    assert change.node.create_index == change.node.modify_index == 7
    assert change.node.events == [NodeEvent(
        message=NODE_REGISTERED, subsystem="Cluster",
        timestamp=from_unix_ns(WALL // SECOND_NS * SECOND_NS), create_index=7)]
    assert change.evaluations == []


def test_registering_keeps_a_known_nodes_status_and_operator_state() -> None:
    allocs, jobs = scene()
    known = node("down", scheduling_eligibility="ineligible",
                 events=[NodeEvent(message="Node registered")], create_index=2)
    change = node_register_changes(known, node("ready"), allocs, jobs, index=60,
                                   wall_ns=WALL, new_id=ids())
    # Only a heartbeat brings it back; a down node's jobs are evaluated again.
    assert change.status == "down"
    assert change.node is not None
    assert change.node.scheduling_eligibility == "ineligible"
    assert change.node.create_index == 2
    assert [e.message for e in change.node.events] == ["Node registered"]
    assert change.evaluations == expected_evals(60)

    ready = node("ready")
    same = node_register_changes(ready, node("ready"), allocs, jobs, index=61, wall_ns=WALL,
                                 new_id=ids())
    assert same.evaluations == []
    moved = node_register_changes(ready, node("ready", attributes={"kernel.name": "linux"}),
                                  allocs, jobs, index=62, wall_ns=WALL, new_id=ids())
    assert moved.evaluations == expected_evals(62)


def test_a_registration_that_changes_host_volumes_is_evaluated_again() -> None:
    # Nomad's nomad/node_endpoint.go `shouldCreateNodeEval` compares HostVolumes.
    allocs, jobs = scene()
    ready = node("ready")
    offered = node("ready", host_volumes={
        "data": ClientHostVolumeConfig(name="data", path="/srv/data")})
    moved = node_register_changes(ready, offered, allocs, jobs, index=63, wall_ns=WALL,
                                  new_id=ids())
    assert moved.evaluations == expected_evals(63)
    assert moved.node is not None
    assert "data" in moved.node.host_volumes

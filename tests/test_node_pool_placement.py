"""Node pools in placement (layer 0, the pure scheduler over an in-memory state): a job's
`node_pool` (unset: the register fills in the namespace's default pool; a job that skipped it
is in `default`) confines its placements to that pool's nodes, `all` places
anywhere, and nodes outside the pool are not evaluated at all (Nomad's
readyNodesInDCsAndPool), so a pool without nodes says "No nodes were eligible"; a job moved
to another pool is replaced there, never updated in place on a node outside it (Nomad's
inplaceUpdate `IsInPool`), and a system job leaves the nodes of its old pool."""

from __future__ import annotations

from tests.scheduler_support import SchedulerState
from tests.test_scheduler_multinode import job, node, run
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.scheduler import binpack


def test_the_jobspec_reads_node_pool_and_leaves_it_unset_for_the_register() -> None:
    assert job().node_pool == ""  # as Nomad's api Job.Canonicalize: the server decides
    assert job(job_block='node_pool = "gpu"').node_pool == "gpu"
    as_json = parse_job('{"Job": {"ID": "j", "NodePool": "gpu", "TaskGroups": [{"Name": "g", '
                        '"Tasks": [{"Name": "t", "Driver": "mock_driver"}]}]}}')
    assert as_json.node_pool == "gpu"


def test_a_job_is_placed_only_on_nodes_of_its_pool() -> None:
    state = SchedulerState(node("a"), node("b", node_pool="gpu"), node("c", node_pool="gpu"))
    plan = run(state, job("web", count=2, job_block='node_pool = "gpu"'))
    assert sorted(a.node_id for a in plan.place) == ["b", "c"]
    plan = run(state, job("api", count=1))  # no pool: `default`, never `gpu`
    assert [a.node_id for a in plan.place] == ["a"]
    assert not binpack.is_in_pool(node("b", node_pool="gpu"), "")


def test_the_all_pool_places_anywhere() -> None:
    state = SchedulerState(node("a"), node("b", node_pool="gpu"))
    plan = run(state, job("web", count=2, job_block='node_pool = "all"'))
    assert sorted(a.node_id for a in plan.place) == ["a", "b"]
    assert binpack.candidates(state.nodes(), job(job_block='node_pool = "all"')).in_pool == 2


def test_a_pool_without_nodes_evaluates_none_and_names_the_pool() -> None:
    state = SchedulerState(node("a"))
    plan = run(state, job("web", job_block='node_pool = "empty"'))
    assert not plan.place
    assert "g" in plan.failed
    assert plan.eval.failed_tg_allocs is not None
    metric = plan.eval.failed_tg_allocs["g"]
    assert metric.nodes_evaluated == 0
    assert metric.nodes_in_pool == 0
    assert metric.node_pool == "empty"


def test_moving_a_job_to_another_pool_replaces_its_allocations_there() -> None:
    state = SchedulerState(node("a"), node("b", node_pool="gpu"))
    first = run(state, job("web"))
    assert [a.node_id for a in first.place] == ["a"]
    moved = job("web", job_block='node_pool = "gpu"')
    moved.job_modify_index = 100
    plan = run(state, moved)
    assert [a.node_id for a in plan.place] == ["b"]
    assert [a.node_id for a in plan.stop] == ["a"]


def test_a_system_job_runs_on_its_pools_nodes_and_leaves_a_pool_it_moves_out_of() -> None:
    state = SchedulerState(node("a"), node("b", node_pool="gpu"), node("c", node_pool="gpu"))
    plan = run(state, job("agent", job_type="system", job_block='node_pool = "gpu"'))
    assert sorted(a.node_id for a in plan.place) == ["b", "c"]
    moved = job("agent", job_type="system")
    moved.job_modify_index = 100
    plan = run(state, moved)
    assert [a.node_id for a in plan.place] == ["a"]
    assert sorted(a.node_id for a in plan.stop) == ["b", "c"]

"""The whole-cluster simulation's checks can fail: bugs injected into the servers or the
client must be caught by the invariants (runtime/sim/check.py), and the seeds that once
found product bugs stay as regression tests. Scenarios run in process here (a sync test:
each is its own `trio.run` under a mock clock)."""

from __future__ import annotations

import msgspec
import pytest
import trio
import trio.testing

from yurt.runtime.client.allocrunner.simulated import SimulatedAllocRunner
from yurt.runtime.client.remote import RemoteServer
from yurt.runtime.server.cluster.server import ClusterServer
from yurt.runtime.sim.cluster import SimCluster, SimConfig
from yurt.runtime.sim.scenario import run_scenario
from yurt.runtime.structs import NODE_ELIGIBLE, NODE_STATUS_READY, Allocation, Node

#: Seeds that found a bug once (the fix named beside each). A seed names a scenario only as
#: long as the scenario generator (runtime/sim/scenario.py) draws as it does now; the
#: bugs themselves are pinned down without it in tests/test_sim_regressions.py.
REGRESSION_SEEDS = [
    # A node with no allocation, on servers that started on an empty state, was told index
    # 0 by every blocking pull and asked again at once: a busy loop of pulls (fixed:
    # ClusterServer.wait_client_allocs answers at least 1, as Nomad's blocking queries).
    3,
    6,
    # A node came back (registered again) from `disconnected` after the follow-up that
    # should have found its allocation lost ran a few hundred ns early (its µs
    # `wait_until` rounded down), and the registration made no evaluation: the original
    # and its replacement both ran for good (fixed: server/scheduler/plan.py _ceil_us, and
    # ClusterServer._register_node evaluates the node's jobs on leaving
    # down/disconnected; tests/test_sim_regressions.py pins both down).
    20106,
    # A failed allocation's replacement was lost while no node was eligible; unblocked,
    # the evaluation took the name for done and never placed it (fixed: an allocation
    # already replaced no longer marks its name done).
    20115,
    # A reconnecting original whose replacement had failed and been replaced again was
    # kept beside that second replacement (fixed: disconnect.classify follows the chain of
    # replacements).
    20154,
    # A disconnected node's allocation went unknown while no other node was free; placed
    # later, its replacement did not name it, and both ran once the node was back (fixed:
    # the scheduler names the waiting allocation as the one replaced).
    300341,
    301920,
    # The original won its reconnect, then failed: the reschedule looked at the name's
    # newest allocation, the stopped replacement, and never replaced it (fixed:
    # reschedule.decide looks among the allocations the server still wants).
    300354,
    300201,
    # The same, when the original won against the replacement of a replacement that had
    # failed: the reschedule took the failed one (already replaced) for the newest (fixed:
    # decide skips allocations already replaced).
    401829,
    402049,
    # The original that won its reconnect kept the disconnect follow-up's ID; when it
    # failed, no follow-up of its own was made and it was never replaced (fixed: the
    # client's report after the disconnect clears it).
    401839,
    # A first fix of that one cleared the ID in the scheduler's reconnect, also for an
    # original still unknown, and restarted its unknown timer: one whose client never
    # reported it then stayed unknown for good (kept so no such fix comes back).
    403874,
    403800,
    # A purged job's allocations ran on for good on a node that failed over to a server
    # that never saw them gone (fixed: ClusterServer records a deletion's index for the
    # node's pull when it applies it).
    301372,
]


@pytest.mark.parametrize("seed", REGRESSION_SEEDS)
def test_a_seed_that_found_a_bug_holds_every_invariant(seed: int) -> None:
    run_scenario(seed).raise_if_failed()


def _first_failure(seeds: range) -> list[str]:
    for seed in seeds:
        result = run_scenario(seed)
        if not result.ok:
            return result.violations
    return []


def test_a_scheduler_that_places_on_down_and_ineligible_nodes_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def every_node_fit(self: ClusterServer) -> list[Node]:
        return [msgspec.structs.replace(n, status=NODE_STATUS_READY,
                                        scheduling_eligibility=NODE_ELIGIBLE)
                for n in self.cluster_nodes.values()]

    monkeypatch.setattr(ClusterServer, "nodes", every_node_fit)
    violations = _first_failure(range(40))
    assert any("placed on node" in v for v in violations), violations


def test_a_client_that_never_stops_an_allocation_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def keep_running(self: SimulatedAllocRunner, alloc: Allocation) -> None:
        self._alloc = alloc

    monkeypatch.setattr(SimulatedAllocRunner, "update", keep_running)
    violations = _first_failure(range(40))
    assert any("runners running" in v or "stopped, yet" in v for v in violations), violations


def test_an_allocation_running_on_two_nodes_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that hands a node every node's allocations, and a client that runs what it
    is given without looking whose it is: the ground truth sees one allocation ID running
    on two nodes."""
    def everything(self: ClusterServer, node_id: str) -> list[Allocation]:
        return list(self.allocs.values())

    monkeypatch.setattr(ClusterServer, "allocs_on", everything)
    monkeypatch.setattr(ClusterServer, "get_allocs",
                        lambda self, node_id, ids: [self.allocs[i] for i in ids
                                                    if i in self.allocs])
    monkeypatch.setattr(RemoteServer, "allocs_for_node",
                        lambda self: list(self.allocs.values()))
    violations = _first_failure(range(40))
    assert any("runs on" in v for v in violations), violations


async def test_an_idle_node_on_a_fresh_cluster_does_not_pull_in_a_loop(
        autojump_clock: trio.testing.MockClock) -> None:
    """The busy loop of seeds 3 and 6, directly: nothing placed anywhere, a minute
    passes; the node's blocking pulls each wait their `wait` (5 s)."""
    lines: list[str] = []
    cluster = SimCluster(SimConfig(servers=1, nodes=1), 1, lines.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(cluster.run)
        await trio.sleep(60)
        nursery.cancel_scope.cancel()
    pulls = [line for line in lines if " GET " in line and line.endswith("/allocs 200")]
    assert 5 <= len(pulls) <= 60 / 5 + 3, len(pulls)

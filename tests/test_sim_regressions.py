"""Product bugs the whole-cluster simulation found, each pinned down without the simulation:
the seed that found it (replayed in tests/test_sim_checks.py) and the smallest state that
shows it, against the pure scheduler or one `ClusterServer` over the in-memory etcd."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import trio

from tests.scheduler_support import SchedulerState
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.cluster.etcd.memkv import MemoryKV
from yurt.runtime.server.cluster.server import ClusterServer, HeartbeatConfig
from yurt.runtime.server.scheduler import schedule
from yurt.runtime.server.scheduler.plan import Plan
from yurt.runtime.server.scheduler.reschedule import unix_ns
from yurt.runtime.server.state.etcd import ClusterStore
from yurt.runtime.structs import (
    Allocation,
    Evaluation,
    Job,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
)

SECOND = 1_000_000_000
_ids = (f"id-{i}" for i in itertools.count())


def node(node_id: str, status: str = "ready", eligibility: str = "eligible") -> Node:
    return Node(id=node_id, name=f"name-{node_id}", datacenter="dc1", status=status,
                scheduling_eligibility=eligibility,
                attributes={"unique.network.ip-address": "127.0.0.1"},
                node_resources=NodeResources(cpu=NodeCpuResources(cpu_shares=4000),
                                             memory=NodeMemoryResources(memory_mb=4096)))


def job(group_block: str = "") -> Job:
    return parse_job(f'''job "web" {{
  group "g" {{
    {group_block}
    task "t" {{
      driver = "mock_driver"
      resources {{
        cpu = 100
        memory = 64
      }}
    }}
  }}
}}''')


def run(state: SchedulerState, j: Job, trigger: str, now: int | None = None) -> Plan:
    index = max((a.modify_index for a in state.allocs.values()), default=0) + 1
    j.job_modify_index = j.job_modify_index or 1
    ev = Evaluation(id=next(_ids), job_id=j.id, triggered_by=trigger, type=j.type)
    plan = schedule(state, ev, j, index=index, now=index if now is None else now,
                    new_id=lambda: next(_ids))
    state.apply(plan)
    return plan


def started(state: SchedulerState, plan: Plan) -> Allocation:
    (alloc,) = plan.place
    alloc = msgspec.structs.replace(alloc, client_status="running")
    state.allocs[alloc.id] = alloc
    return alloc


def status(state: SchedulerState, node_id: str, value: str) -> None:
    found = next(n for n in state.nodes() if n.id == node_id)
    found.status = value


def test_a_reconnecting_original_whose_replacement_failed_and_was_replaced_keeps_one() -> None:
    """Seed 20154: the original came back while its replacement's replacement ran; the
    reconnect looked only for a direct replacement, found the failed one, and kept both."""
    state = SchedulerState(node("a"), node("b"), node("c"))
    j = job('max_client_disconnect = "1h"')
    first = started(state, run(state, j, "job-register"))
    status(state, first.node_id, "disconnected")
    replacement = started(state, run(state, j, "node-update"))
    # The replacement failed and was replaced in turn (its reschedule).
    again = msgspec.structs.replace(replacement, id="again", previous_allocation=replacement.id,
                                    node_id=next(n.id for n in state.nodes() if n.id not in (
                                        first.node_id, replacement.node_id)))
    state.allocs[replacement.id] = msgspec.structs.replace(
        replacement, client_status="failed", next_allocation=again.id)
    state.allocs[again.id] = again
    status(state, first.node_id, "ready")
    state.allocs[first.id] = msgspec.structs.replace(state.allocs[first.id],
                                                     client_status="running")
    plan = run(state, j, "node-update")
    assert [(a.id, a.desired_description) for a in plan.stop] == [
        (again.id, "alloc not needed due to disconnected client reconnect")]
    assert [a.id for a in state.live_allocs()] == [first.id]


def test_a_disconnect_follow_up_never_runs_before_the_window_ends() -> None:
    """Seed 20106: the follow-up's `wait_until` (µs) was truncated from the window's end
    (ns), so it ran up to 999 ns early, found the allocation not yet expired, and nothing
    looked at it again while its node stayed away."""
    state = SchedulerState(node("a"), node("b"))
    j = job('max_client_disconnect = "5s"')
    epoch = 1_767_225_600 * SECOND  # today's Unix time: float seconds lose the last ns
    first = started(state, run(state, j, "job-register", now=epoch + SECOND))
    status(state, first.node_id, "disconnected")
    # A window's end whose µs rounds down.
    plan = run(state, j, "node-update", now=epoch + 7 * SECOND + 123_456_123)
    (unknown,) = plan.update
    (follow,) = plan.evals
    due = unix_ns(follow.wait_until)
    assert due >= unknown.modify_time + 5 * SECOND
    # Run when due (not a nanosecond later): the allocation is lost.
    ev = msgspec.structs.replace(follow, status="pending")
    past = schedule(state, ev, j, index=50, now=due, new_id=lambda: next(_ids))
    assert [(a.id, a.client_status) for a in past.stop] == [(first.id, "lost")]


def test_a_lost_replacement_blocked_for_want_of_a_node_is_placed_once_one_is_free() -> None:
    """Seed 20115: a failed allocation's replacement was lost while no node was eligible;
    the blocked evaluation, once unblocked, took the name for done (the failed original
    "ended on its own") and placed nothing, for good."""
    state = SchedulerState(node("a"), node("b"))
    j = job()
    first = started(state, run(state, j, "job-register"))
    replacement = msgspec.structs.replace(first, id="replacement",
                                          previous_allocation=first.id)
    state.allocs[first.id] = msgspec.structs.replace(first, client_status="failed",
                                                     next_allocation=replacement.id)
    state.allocs[replacement.id] = replacement
    status(state, first.node_id, "down")
    other = next(n for n in state.nodes() if n.id != first.node_id)
    other.scheduling_eligibility = "ineligible"
    blocked = run(state, j, "node-update")
    assert [(a.id, a.client_status) for a in blocked.stop] == [(replacement.id, "lost")]
    assert blocked.failed
    other.scheduling_eligibility = "eligible"
    unblocked = run(state, j, "queued-allocs")
    assert [(a.name, a.node_id) for a in unblocked.place] == [("web.g[0]", other.id)]


@asynccontextmanager
async def disconnect_job_placed() -> AsyncIterator[tuple[ClusterServer, Allocation]]:
    """One leading server over an in-memory etcd, two ready nodes, and a job that rides out
    a disconnect (`max_client_disconnect`), its one allocation placed: what the node-level
    regressions below start from."""
    space = MemoryKV()
    kv = space.client()
    prefix = b"/yurt/"
    server = ClusterServer(EventBroker(), ClusterStore(kv, prefix), kv, prefix,
                           heartbeat=HeartbeatConfig(min_ttl=2.0, grace=2.0))
    await server.load()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.follow)
        nursery.start_soon(server.lead)
        for node_id in ("n1", "n2"):
            await server.register_node(node(node_id), f"secret-{node_id}")
        await server.register_job(job('max_client_disconnect = "1h"'))
        await trio.testing.wait_all_tasks_blocked()
        (first,) = server.job_allocs("web")
        yield server, first
        nursery.cancel_scope.cancel()


async def test_a_disconnected_node_that_registers_again_gets_its_evaluations(
        autojump_clock: trio.testing.MockClock) -> None:
    """A node back from `disconnected` through a registration (its agent restarted) was
    written `ready` with no evaluation: its original and the replacement both ran until
    the disconnect window ended, instead of one being stopped at once."""
    async with disconnect_job_placed() as (server, first):
        await server.update_node_allocs(first.node_id, [msgspec.structs.replace(
            first, client_status="running", job=None)])
        await server._node_lapsed(first.node_id)  # its lease lapsed: disconnected
        await trio.testing.wait_all_tasks_blocked()
        assert server.cluster_nodes[first.node_id].status == "disconnected"
        assert [a.client_status for a in server.job_allocs("web")
                if not a.is_terminal()] == ["unknown", "pending"]  # and its replacement
        before = set(server.evals)
        await server.register_node(node(first.node_id), f"secret-{first.node_id}")
        created = [server.evals[i] for i in set(server.evals) - before]
        assert [(e.triggered_by, e.node_id) for e in created] == [
            ("node-update", first.node_id)]
        await trio.testing.wait_all_tasks_blocked()
        assert len([a for a in server.job_allocs("web") if not a.is_terminal()]) == 1


async def test_a_purge_reaches_a_node_that_fails_over_to_a_server_it_never_asked(
        autojump_clock: trio.testing.MockClock) -> None:
    """Seed 301372: a node pulled from one server, the job was purged, the node failed
    over (lost messages) to a server that had never computed its index while the
    allocations lived: that server never saw them gone, its blocking pull never answered
    past the node's index, and the node ran the purged allocations for good."""
    space = MemoryKV()
    prefix = b"/yurt/"
    servers = []
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            kv = space.client()
            server = ClusterServer(EventBroker(), ClusterStore(kv, prefix), kv, prefix)
            await server.load()
            await nursery.start(server.follow)
            servers.append(server)
        asked, other = servers
        nursery.start_soon(asked.lead)
        await asked.register_node(node("n1"), "secret-n1")
        await asked.register_job(job())
        await trio.testing.wait_all_tasks_blocked()
        held, index = await asked.wait_client_allocs("n1", 0, 0)
        assert len(held) == 1
        await asked.deregister_job("web", purge=True)
        await trio.testing.wait_all_tasks_blocked()
        assert not other.allocs
        started = trio.current_time()
        listed, answer = await other.wait_client_allocs("n1", index, 60)
        assert (listed, trio.current_time() - started) == ({}, 0)
        assert answer > index
        nursery.cancel_scope.cancel()


def test_a_waiting_allocation_replaced_once_a_node_is_free_is_named_by_its_replacement(
        ) -> None:
    """Seed 300341: a disconnected node's allocation went unknown while no other node was
    eligible; the blocked evaluation placed its name later as a fresh allocation, which
    the reconnect did not take for its replacement: both ran once the node came back."""
    state = SchedulerState(node("a"), node("b"))
    j = job('max_client_disconnect = "1h"')
    first = started(state, run(state, j, "job-register"))
    other = next(n for n in state.nodes() if n.id != first.node_id)
    status(state, first.node_id, "disconnected")
    other.scheduling_eligibility = "ineligible"
    blocked = run(state, j, "node-update")
    assert [a.client_status for a in blocked.update] == ["unknown"]
    assert blocked.place == []
    other.scheduling_eligibility = "eligible"
    (replacement,) = run(state, j, "queued-allocs").place
    assert replacement.previous_allocation == first.id
    state.allocs[replacement.id] = msgspec.structs.replace(replacement,
                                                           client_status="running")
    status(state, first.node_id, "ready")
    state.allocs[first.id] = msgspec.structs.replace(state.allocs[first.id],
                                                     client_status="running")
    run(state, j, "node-update")
    assert [a.id for a in state.live_allocs()] == [first.id]


def test_the_failure_of_an_original_that_won_its_reconnect_is_rescheduled() -> None:
    """Seeds 300354 and 300201: the original came back and won, its replacement was
    stopped; when the original failed later, the reschedule looked only at the name's
    newest allocation (the stopped replacement) and never replaced it."""
    from yurt.runtime.server.scheduler.reschedule import decide

    j = job()
    original = Allocation(id="original", name="web.g[0]", job_id="web", job=j,
                          task_group="g", desired_status="run", client_status="failed",
                          create_index=4, modify_index=28)
    loser = Allocation(id="loser", name="web.g[0]", job_id="web", job=j, task_group="g",
                       desired_status="stop", client_status="complete",
                       previous_allocation="original", create_index=15, modify_index=22)
    decision = decide(j, [original, loser], 30 * SECOND, user_asked=False)
    assert "web.g[0]" in {*decision.now, *decision.later}


def test_the_failure_of_an_original_whose_replacements_chain_was_replaced_is_rescheduled(
        ) -> None:
    """Seed 401829: the original came back and won against the replacement of its failed
    replacement; when it failed, the reschedule took the name's newest allocation the
    server wanted, the failed replacement already replaced, and did nothing."""
    from yurt.runtime.server.scheduler.reschedule import decide

    j = job()
    original = Allocation(id="original", name="web.g[0]", job_id="web", job=j,
                          task_group="g", desired_status="run", client_status="failed",
                          create_index=11, modify_index=40)
    failed = Allocation(id="failed", name="web.g[0]", job_id="web", job=j, task_group="g",
                        desired_status="run", client_status="failed",
                        previous_allocation="original", next_allocation="loser",
                        create_index=20, modify_index=28)
    loser = Allocation(id="loser", name="web.g[0]", job_id="web", job=j, task_group="g",
                       desired_status="stop", client_status="complete",
                       previous_allocation="failed", create_index=28, modify_index=38)
    decision = decide(j, [original, failed, loser], 50 * SECOND, user_asked=False)
    assert {name: a.id for name, (a, _) in [*decision.now.items(), *decision.later.items()]
            } == {"web.g[0]": "original"}


async def test_an_allocation_reported_again_after_a_disconnect_gets_a_follow_up_when_it_fails(
        autojump_clock: trio.testing.MockClock) -> None:
    """Seed 401839: the original kept the FollowupEvalID of the disconnect timeout once its
    node was back and reported it; when it failed, the scheduler's `_follow_up` took it
    for one already waiting on a follow-up and made none: it was never replaced."""
    async with disconnect_job_placed() as (server, first):

        async def report(status: str) -> None:
            await server.update_node_allocs(first.node_id, [msgspec.structs.replace(
                server.allocs[first.id], client_status=status, job=None)])
            await trio.testing.wait_all_tasks_blocked()

        await report("running")
        await server._node_lapsed(first.node_id)  # disconnected: unknown, replaced
        await trio.testing.wait_all_tasks_blocked()
        assert server.allocs[first.id].followup_eval_id
        # Its node is back, reports it, and the reconnect keeps it (stops the replacement).
        await server.register_node(node(first.node_id), f"secret-{first.node_id}")
        await report("running")
        await trio.testing.wait_all_tasks_blocked()
        assert server.allocs[first.id].followup_eval_id == ""
        assert [a.id for a in server.job_allocs("web") if not a.is_terminal()] == [first.id]
        await report("failed")
        follow_ups = [e for e in server.evals.values() if e.triggered_by == "failed-follow-up"]
        assert [server.allocs[first.id].followup_eval_id] == [e.id for e in follow_ups]

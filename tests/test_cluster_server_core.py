"""`ClusterServer` over an in-memory etcd, under the mock clock: two servers share one state,
each sees the other's writes through the watch, racing writers lose nothing, and only the
leader schedules (an evaluation written elsewhere waits, pending, for it)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.cluster.etcd.client import EtcdCompacted
from yurt.runtime.server.cluster.etcd.memkv import MemoryKV
from yurt.runtime.server.cluster.server import (
    LEASE_HEADROOM,
    ClusterServer,
    HeartbeatConfig,
    NodeAuthError,
    UnknownNode,
)
from yurt.runtime.server.records import EVAL_GC_INTERVAL
from yurt.runtime.server.state.etcd import ClusterStore
from yurt.runtime.structs import (
    EVAL_STATUS_PENDING,
    Job,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
    Resources,
    Task,
    TaskGroup,
)
from yurt.runtime.structs.update import UpdateStrategy

PREFIX = b"/yurt/"


def job(job_id: str, n: int = 0) -> Job:
    return Job(id=job_id, name=job_id, datacenters=["dc1"], meta={"n": str(n)},
               task_groups=[TaskGroup(name="g", count=1, tasks=[
                   Task(name="t", driver="mock_driver", config={"run_for": "1h"})])])


@asynccontextmanager
async def servers(count: int, heartbeat: HeartbeatConfig | None = None
                  ) -> AsyncIterator[list[ClusterServer]]:
    space = MemoryKV()
    started = []
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            kv = space.client()
            server = ClusterServer(EventBroker(), ClusterStore(kv, PREFIX), kv, PREFIX,
                                   heartbeat=heartbeat)
            await server.load()
            await nursery.start(server.follow)
            started.append(server)
        yield started
        nursery.cancel_scope.cancel()


async def settle(*group: ClusterServer) -> None:
    """Until every server has applied everything written (the mock clock makes it exact)."""
    await trio.testing.wait_all_tasks_blocked()


async def test_a_write_on_one_server_is_seen_by_the_other(autojump_clock: object) -> None:
    async with servers(2) as (s1, s2):
        registered = await s1.register_job(job("web"))
        await settle(s1, s2)
        assert s2.jobs["web"].job_modify_index == registered.index
        assert s2.visible_index == s1.visible_index == registered.index
        assert [e.id for e in s2.job_evals("web")] == [registered.eval_id]
        # Nobody leads: the evaluation waits for a leader.
        assert s2.evals[registered.eval_id].status == EVAL_STATUS_PENDING


async def test_racing_registers_through_two_servers_lose_nothing(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    conflicts = 0
    undo = ClusterServer._undo_index

    def counting_undo(self: ClusterServer) -> None:
        nonlocal conflicts
        conflicts += 1
        undo(self)

    monkeypatch.setattr(ClusterServer, "_undo_index", counting_undo)
    async with servers(2) as (s1, s2):
        results = []

        async def update(server: ClusterServer, n: int) -> None:
            results.append(await server.register_job(job("race", n)))

        async with trio.open_nursery() as nursery:
            for n in range(100):
                nursery.start_soon(update, (s1, s2)[n % 2], n)
        await settle(s1, s2)
        indexes = [r.index for r in results]
        assert len(set(indexes)) == 100
        assert conflicts > 0  # the two really raced
        for server in (s1, s2):
            assert server.jobs["race"].version == 99
            assert [v.version for v in server.versions["race"]] == sorted(
                {v.version for v in server.versions["race"]}, reverse=True)
        assert s1.jobs["race"] == s2.jobs["race"]
        assert s1.jobs["race"].job_modify_index == max(indexes)
        assert s1.visible_index == s2.visible_index


def node(node_id: str, cpu: int = 1000) -> Node:
    return Node(id=node_id, name=f"name-{node_id}", datacenter="dc1",
                attributes={"unique.network.ip-address": "127.0.0.1"},
                node_resources=NodeResources(cpu=NodeCpuResources(cpu_shares=cpu),
                                             memory=NodeMemoryResources(memory_mb=4096)))


def sized(job_id: str, count: int) -> Job:
    return Job(id=job_id, name=job_id, datacenters=["dc1"], task_groups=[TaskGroup(
        name="g", count=count, tasks=[Task(name="t", driver="mock_driver",
                                           resources=Resources(cpu=400, memory=64))])])


async def test_only_the_leader_places_and_a_lapsed_node_loses_its_allocations(
        autojump_clock: object) -> None:
    heartbeat = HeartbeatConfig(min_ttl=2.0, grace=2.0)
    async with servers(2, heartbeat=heartbeat) as (s1, s2), trio.open_nursery() as nursery:
        for node_id in ("n1", "n2", "n3"):
            await s1.register_node(node(node_id), f"secret-{node_id}")
        registered = await s1.register_job(sized("web", 4))  # s1 does not lead
        await settle(s1, s2)
        assert s1.evals[registered.eval_id].status == EVAL_STATUS_PENDING
        assert not s1.job_allocs("web")
        nursery.start_soon(s2.lead)  # s2 takes over and finds the evaluation pending
        await settle(s1, s2)
        placed = [a for a in s1.job_allocs("web") if not a.is_terminal()]
        assert len(placed) == 4
        per_node = {n: sum(a.node_id == n for a in placed) for n in ("n1", "n2", "n3")}
        assert sorted(per_node.values()) == [1, 1, 2]  # 2 × 400 MHz fit on a 1000 MHz node
        # The fuller node stops heartbeating: its lease lapses and etcd drops its key.
        victim = max(per_node, key=lambda n: (per_node[n], n))
        lapsed = {a.id for a in placed if a.node_id == victim}
        for _ in range(20):
            for node_id in ("n1", "n2", "n3"):
                if node_id != victim:
                    await s1.node_heartbeat(node_id, f"secret-{node_id}")
            await trio.sleep(1)
        await settle(s1, s2)
        assert s1.cluster_nodes[victim].status == "down"
        for alloc_id in lapsed:
            assert s1.allocs[alloc_id].client_status == "lost"
            assert s1.allocs[alloc_id].desired_status == "stop"
        running = [a for a in s1.job_allocs("web") if not a.is_terminal()]
        # Both replacements fit on the two nodes left (2 × 400 MHz each).
        assert {a.node_id for a in running} == {"n1", "n2", "n3"} - {victim}
        assert len(running) == 4
        assert {a.previous_allocation for a in running} >= lapsed
        # The node comes back: it is ready again, and what was lost stays stopped.
        await s2.node_heartbeat(victim, f"secret-{victim}")
        await settle(s1, s2)
        assert s1.cluster_nodes[victim].status == "ready"
        assert all(s1.allocs[i].desired_status == "stop" for i in lapsed)
        assert len([a for a in s1.job_allocs("web") if not a.is_terminal()]) == 4
        nursery.cancel_scope.cancel()


async def test_a_node_secret_is_required_and_checked(autojump_clock: object) -> None:
    async with servers(1) as (s1,):
        await s1.register_node(node("n1"), "right")
        with pytest.raises(NodeAuthError):
            await s1.register_node(node("n1"), "wrong")
        with pytest.raises(NodeAuthError):
            await s1.node_heartbeat("n1", "wrong")
        with pytest.raises(UnknownNode):
            await s1.node_heartbeat("nobody", "x")
        await s1.node_heartbeat("n1", "right")


async def test_an_ineligible_node_takes_no_placement_until_eligible_again(
        autojump_clock: object) -> None:
    async with servers(2) as (s1, s2), trio.open_nursery() as nursery:
        nursery.start_soon(s2.lead)
        await s1.register_node(node("n1"), "s")
        await s1.set_eligibility("n1", "ineligible")
        await settle(s1, s2)
        assert s2.cluster_nodes["n1"].scheduling_eligibility == "ineligible"
        await s1.register_job(sized("web", 1))
        await settle(s1, s2)
        assert not s1.job_allocs("web")
        assert s1.blocked_evals("web")  # waits for room
        await s1.set_eligibility("n1", "eligible")
        await settle(s1, s2)
        assert [a.node_id for a in s1.job_allocs("web")] == ["n1"]
        with pytest.raises(ValueError, match="eligibility must be"):
            await s1.set_eligibility("n1", "maybe")
        with pytest.raises(KeyError):
            await s1.set_eligibility("nobody", "eligible")
        nursery.cancel_scope.cancel()


async def test_a_lapsed_node_with_a_disconnect_window_is_disconnected_then_reconciled(
        autojump_clock: object) -> None:
    heartbeat = HeartbeatConfig(min_ttl=2.0, grace=2.0)
    window = msgspec.structs.replace(sized("web", 1), task_groups=[msgspec.structs.replace(
        sized("web", 1).task_groups[0], max_client_disconnect=600 * 10**9)])
    async with servers(2, heartbeat=heartbeat) as (s1, s2), trio.open_nursery() as nursery:
        nursery.start_soon(s2.lead)
        for node_id in ("n1", "n2"):
            await s1.register_node(node(node_id), f"secret-{node_id}")
        await s1.register_job(window)
        await settle(s1, s2)
        (original,) = s1.job_allocs("web")
        away = original.node_id
        other = "n2" if away == "n1" else "n1"
        # Its node reports it running (a pending allocation is lost at once, as Nomad's).
        await s1.update_node_allocs(away, [msgspec.structs.replace(
            original, client_status="running")])
        for _ in range(12):  # only the other node heartbeats
            await s1.node_heartbeat(other, f"secret-{other}")
            await trio.sleep(1)
        await settle(s1, s2)
        assert s1.cluster_nodes[away].status == "disconnected"
        assert s1.cluster_nodes[away].events[-1].message == "Node heartbeat missed"
        assert s1.allocs[original.id].client_status == "unknown"
        (replacement,) = [a for a in s1.job_allocs("web") if a.id != original.id]
        assert replacement.node_id == other
        assert not replacement.is_terminal()
        # Back: initializing at its first heartbeat, ready at the next; then one copy runs.
        await s1.node_heartbeat(away, f"secret-{away}")
        await settle(s1, s2)
        assert s1.cluster_nodes[away].status == "initializing"
        await s1.node_heartbeat(away, f"secret-{away}")
        await settle(s1, s2)
        assert s1.cluster_nodes[away].status == "ready"
        live = [a for a in s1.job_allocs("web") if a.desired_status == "run"]
        assert len(live) == 1
        nursery.cancel_scope.cancel()


async def test_a_node_reregistered_through_another_server_stays_alive_and_can_still_die(
        autojump_clock: object) -> None:
    """Its first server keeps renewing the lease it knows, which the alive key is bound to
    again; and once the node stops, it is marked down."""
    heartbeat = HeartbeatConfig(min_ttl=2.0, grace=2.0)  # a lease of 6 s
    async with servers(2, heartbeat=heartbeat) as (s1, s2), trio.open_nursery() as nursery:
        nursery.start_soon(s2.lead)
        await s1.register_node(node("n1"), "secret")
        await s1.node_heartbeat("n1", "secret")
        await s2.register_node(node("n1"), "secret")  # a node change, sent to s2
        await settle(s1, s2)
        for _ in range(20):
            await s1.node_heartbeat("n1", "secret")
            await trio.sleep(1)
            assert s1.cluster_nodes["n1"].status == "ready"
        await trio.sleep(10)  # no more heartbeats
        await settle(s1, s2)
        assert s1.cluster_nodes["n1"].status == "down"
        nursery.cancel_scope.cancel()


async def test_a_conflict_under_the_leaders_collection_does_not_end_its_term(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another server commits while the leader collects old evaluations: the collection
    is skipped (and done at the next interval), the leader goes on leading."""
    now = [1_800_000_000 * 10**9]
    space = MemoryKV()
    started = []
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            kv = space.client()
            server = ClusterServer(EventBroker(), ClusterStore(kv, PREFIX), kv, PREFIX,
                                   unix_clock=lambda: now[0])
            await server.load()
            await nursery.start(server.follow)
            started.append(server)
        s1, s2 = started
        ended: list[str] = []

        async def lead() -> None:
            await s1.lead()
            ended.append("lead() returned")

        nursery.start_soon(lead)
        await s1.register_job(sized("empty", 0))
        await settle(s1, s2)
        now[0] += 2 * 3600 * 10**9  # past the collection threshold
        real = s1.cluster_store.delete_evals
        conflicts = 0

        async def delete_evals(*args: Any, **kwargs: Any) -> None:
            nonlocal conflicts
            if conflicts == 0:
                conflicts += 1
                await s2.register_job(sized("other", 0))  # moves the counter meanwhile
            await real(*args, **kwargs)

        monkeypatch.setattr(s1.cluster_store, "delete_evals", delete_evals)
        await trio.sleep(EVAL_GC_INTERVAL + 1)
        await settle(s1, s2)
        assert conflicts == 1
        assert not ended
        assert s1.leading
        assert "empty" in s1.jobs  # the leader still serves
        await trio.sleep(EVAL_GC_INTERVAL + 1)  # the next collection goes through
        await settle(s1, s2)
        assert not any(e.job_id == "empty" for e in s1.evals.values())
        nursery.cancel_scope.cancel()


async def test_a_new_leader_gives_nodes_nobody_heard_the_failover_ttl(
        autojump_clock: object) -> None:
    """Every server down past the nodes' leases: the next leader does not call them down at
    once; those that heartbeat again stay ready, one that does not is down after the
    failover TTL."""
    heartbeat = HeartbeatConfig(min_ttl=2.0, grace=2.0, failover_ttl=30.0)
    async with servers(1, heartbeat=heartbeat) as (s1,):
        for node_id in ("n1", "n2"):
            await s1.register_node(node(node_id), f"secret-{node_id}")
        await trio.sleep(60)  # nobody leads, nobody takes heartbeats: the keys lapse
        assert s1.cluster_nodes["n1"].status == "ready"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(s1.lead)
            await settle(s1)
            assert {n.status for n in s1.nodes()} == {"ready"}
            for _ in range(40):  # n1 is back; n2 never
                await s1.node_heartbeat("n1", "secret-n1")
                await trio.sleep(1)
                if trio.current_time() < 60 + 29:
                    assert s1.cluster_nodes["n2"].status == "ready"
            await settle(s1)
            assert s1.cluster_nodes["n1"].status == "ready"
            assert s1.cluster_nodes["n2"].status == "down"
            # n1's key is on a heartbeat lease again (with its headroom), not the failover one.
            key, _ = await s1.kv.get(s1.alive_prefix + b"n1")
            assert key is not None
            assert await s1.kv.lease_keepalive(key.lease) == math.ceil(
                s1._lease_ttl() * LEASE_HEADROOM)
            nursery.cancel_scope.cancel()


async def test_the_leaders_liveness_watch_survives_a_compaction(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """etcd compacted the history a quiet watch would re-open from: the leader looks at
    every node again and goes on watching; a node that lapses later is still marked down."""
    heartbeat = HeartbeatConfig(min_ttl=2.0, grace=2.0)
    async with servers(2, heartbeat=heartbeat) as (s1, s2), trio.open_nursery() as nursery:
        await s1.register_node(node("n1"), "secret")
        real_watch = s2.kv.watch
        cut = []

        def watch(prefix: bytes, start: int) -> Any:
            if prefix == s2.alive_prefix and not cut:
                cut.append(start)

                async def compacted() -> AsyncIterator[Any]:
                    raise EtcdCompacted(start + 1)
                    yield  # an async generator

                return compacted()
            return real_watch(prefix, start)

        monkeypatch.setattr(s2.kv, "watch", watch)
        nursery.start_soon(s2.lead)
        await settle(s1, s2)
        assert cut
        assert s2.leading
        for _ in range(5):
            await s1.node_heartbeat("n1", "secret")
            await trio.sleep(1)
        assert s1.cluster_nodes["n1"].status == "ready"
        await trio.sleep(20)  # n1 stops
        await settle(s1, s2)
        assert s1.cluster_nodes["n1"].status == "down"
        nursery.cancel_scope.cancel()


async def test_namespaces_and_variables_are_the_clusters(autojump_clock: object) -> None:
    """Written through one server, read through the other; Nomad's check-and-set; items
    sealed in etcd; racing writers through both servers lose nothing."""
    from yurt.runtime.server.namespaces import Namespace
    from yurt.runtime.server.state.objects_etcd import ClusterObjectStore
    from yurt.runtime.server.variables import Conflict
    from yurt.runtime.structs.variables import Variable

    async with servers(2) as (s1, s2):
        o1, o2 = ClusterObjectStore(s1), ClusterObjectStore(s2)
        await o1.put_namespace(Namespace(name="team"))
        assert [ns.name for ns in await o2.namespaces()] == ["default", "team"]
        stored = await o1.put_variable(
            Variable(namespace="team", path="app/db", items={"password": "s3cret"}), None)
        assert isinstance(stored, Variable)
        seen = await o2.variable("team", "app/db")
        assert seen is not None
        assert seen.items == {"password": "s3cret"}
        assert seen.modify_index == stored.modify_index
        # Sealed at rest: the items are nowhere in etcd in clear.
        kvs, _ = await s1.kv.get_prefix(PREFIX)
        assert not any(b"s3cret" in kv.value for kv in kvs)
        # Check-and-set as Nomad's: a stale index conflicts and carries what is stored.
        stale = await o2.put_variable(
            Variable(namespace="team", path="app/db", items={"password": "x"}),
            stored.modify_index - 1)
        assert isinstance(stale, Conflict)
        assert stale.current.items == {"password": "s3cret"}
        assert await o1.delete_namespace("team", lambda has_vars: "has variables"
                                         if has_vars else None) == "has variables"
        # Racing writers through both servers: every write lands, each with its index.
        results: list[object] = []

        async def write(store: ClusterObjectStore, n: int) -> None:
            results.append(await store.put_variable(
                Variable(namespace="team", path=f"race/{n}", items={"n": str(n)}), 0))

        async with trio.open_nursery() as nursery:
            for n in range(40):
                nursery.start_soon(write, (o1, o2)[n % 2], n)
        assert all(isinstance(r, Variable) for r in results)
        assert len({r.modify_index for r in results if isinstance(r, Variable)}) == 40
        listed = await o2.variables("team", "race/")
        assert sorted(v.path for v in listed) == sorted(f"race/{n}" for n in range(40))
        assert (await o1.delete_variable("team", "app/db", stored.modify_index)) is None
        assert await o2.variable("team", "app/db") is None


async def test_the_scheduler_configuration_is_the_clusters(autojump_clock: object) -> None:
    from yurt.runtime.server.schedconfig import SchedulerConfiguration

    async with servers(2) as (s1, s2):
        updated, index = await s1.set_scheduler_config(
            SchedulerConfiguration(scheduler_algorithm="spread"), None)
        assert updated
        await settle(s1, s2)
        assert s2.scheduler_config.scheduler_algorithm == "spread"
        assert s2.scheduler_config.modify_index == index
        stale, _ = await s2.set_scheduler_config(
            SchedulerConfiguration(scheduler_algorithm="binpack"), index - 1)
        assert not stale
        assert s1.scheduler_config.scheduler_algorithm == "spread"
        # A server started later reads it.
        kv = s1.kv
        late = ClusterServer(EventBroker(), ClusterStore(kv, PREFIX), kv, PREFIX)
        await late.load()
        assert late.scheduler_config.scheduler_algorithm == "spread"


async def test_a_purged_jobs_allocations_wake_their_node(autojump_clock: object) -> None:
    """A purge removes allocations the node still runs: its pull (on either server) must
    answer, and without them, so the node stops their tasks."""
    async with servers(2) as (s1, s2), trio.open_nursery() as nursery:
        nursery.start_soon(s2.lead)
        await s1.register_node(node("n1"), "secret")
        for job_id in ("a", "b"):
            await s1.register_job(sized(job_id, 1))
        await settle(s1, s2)  # placed by the leader
        await s1.deregister_job("a")  # stopped: the node hears it and its pull moves on
        await settle(s1, s2)
        seen = {server: server.node_alloc_index("n1") for server in (s1, s2)}
        assert len(s1.client_allocs("n1")) == 2
        await s1.deregister_job("a", purge=True)  # then gone, before the node stopped it
        await settle(s1, s2)
        for server in (s1, s2):
            assert server.node_alloc_index("n1") > seen[server]
            assert [a.job_id for a in server.allocs_on("n1")] == ["b"]
        # A server started after the purge answers a node that last asked before it.
        kv = s1.kv
        late = ClusterServer(EventBroker(), ClusterStore(kv, PREFIX), kv, PREFIX)
        await late.load()
        assert late.node_alloc_index("n1") > seen[s1]
        nursery.cancel_scope.cancel()


def canaried(version: str) -> Job:
    """One allocation, updated through one canary that waits to be promoted."""
    return Job(id="web", name="web", datacenters=["dc1"], task_groups=[TaskGroup(
        name="g", count=1, update=UpdateStrategy(canary=1, max_parallel=1),
        tasks=[Task(name="t", driver="mock_driver", env={"V": version},
                    resources=Resources(cpu=400, memory=64))])])


async def test_a_promote_that_meets_a_write_conflict_is_retried(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another server commits while a promote is being committed: the promote is made
    again on the view that caught up, as every write of a cluster server is, instead of
    failing the user's request."""
    async with servers(2) as (s1, s2), trio.open_nursery() as nursery:
        nursery.start_soon(s2.lead)
        await s1.register_node(node("n1"), "secret")
        await s1.register_job(canaried("1"))
        await settle(s1, s2)  # placed: the next version is a canary's
        await s1.register_job(canaried("2"))
        await settle(s1, s2)
        (d,) = [d for d in s1.deployments.values() if d.job_version == 1]
        (canary,) = d.task_groups["g"].placed_canaries
        await s1.set_alloc_health(d.id, [canary], [])
        await settle(s1, s2)
        assert not s1.deployments[d.id].task_groups["g"].promoted
        real = s1.cluster_store.save
        conflicts = 0

        async def save(*args: Any, **kwargs: Any) -> None:
            nonlocal conflicts
            if conflicts == 0:
                conflicts += 1
                await s2.register_job(sized("other", 0))  # moves the counter meanwhile
            await real(*args, **kwargs)

        monkeypatch.setattr(s1.cluster_store, "save", save)
        outcome = await s1.promote_deployment(d.id, None)
        await settle(s1, s2)
        assert conflicts == 1
        assert outcome.eval is not None
        assert s1.evals[outcome.eval.id].deployment_id == d.id
        for server in (s1, s2):
            assert server.deployments[d.id].task_groups["g"].promoted
            assert "other" in server.jobs
        nursery.cancel_scope.cancel()


async def test_node_pools_are_the_clusters(autojump_clock: object) -> None:
    """A pool written through one server is read, updated and deleted through the other,
    its indexes on the cluster's one counter; the built-in pools are never stored."""
    from yurt.runtime.server.nodepools import NodePool, delete_refusal
    from yurt.runtime.server.state.objects_etcd import ClusterObjectStore

    async with servers(2) as (s1, s2):
        o1, o2 = ClusterObjectStore(s1), ClusterObjectStore(s2)
        assert [p.name for p in await o2.node_pools()] == ["all", "default"]
        made = await o1.put_node_pool(NodePool(name="gpu", description="GPUs"))
        seen = await o2.node_pool("gpu")
        assert seen is not None
        assert (seen.description, seen.create_index) == ("GPUs", made.create_index)
        assert [p.name for p in await o2.node_pools()] == ["all", "default", "gpu"]
        again = await o2.put_node_pool(NodePool(name="gpu", description="more"))
        assert (again.create_index, again.modify_index > made.modify_index) == (
            made.create_index, True)
        assert await o1.delete_node_pool("all", lambda exists: delete_refusal(
            "all", live_jobs=False, nodes=False, exists=exists)) == (
            'deleting node pool "all" is not allowed')
        assert await o1.delete_node_pool("gpu", lambda exists: delete_refusal(
            "gpu", live_jobs=False, nodes=False, exists=exists)) is None
        assert await o2.node_pool("gpu") is None
        kvs, _ = await s1.kv.get_prefix(PREFIX)
        assert not any(b"node_pools/" in kv.key for kv in kvs)

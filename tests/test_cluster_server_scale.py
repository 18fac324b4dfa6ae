"""What a `ClusterServer` (over an in-memory etcd, under the mock clock) costs per node call
at scale, and what it does with a write too large for etcd: node update posts of one 50 ms
window share one etcd transaction (Nomad's Node.UpdateAlloc batch), a failed commit reaches
every caller of its batch, a heartbeat is one lease keepalive and no write, a growing
cluster does not re-grant every node's lease, and a plan larger than one transaction fails
its evaluation while the leader leads on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.cluster.etcd.client import EtcdError
from yurt.runtime.server.cluster.etcd.memkv import MemoryKV
from yurt.runtime.server.cluster.server import ClusterServer, HeartbeatConfig
from yurt.runtime.server.state.etcd import ClusterStore
from yurt.runtime.structs import (
    EVAL_STATUS_FAILED,
    Job,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
    Resources,
    Task,
    TaskGroup,
)

PREFIX = b"/yurt/"


def node(node_id: str) -> Node:
    return Node(id=node_id, name=f"name-{node_id}", datacenter="dc1",
                attributes={"unique.network.ip-address": "127.0.0.1"},
                node_resources=NodeResources(cpu=NodeCpuResources(cpu_shares=4000),
                                             memory=NodeMemoryResources(memory_mb=4096)))


def batch_job(job_id: str, count: int) -> Job:
    return Job(id=job_id, name=job_id, type="batch", datacenters=["dc1"], task_groups=[
        TaskGroup(name="g", count=count, tasks=[Task(
            name="t", driver="mock_driver", resources=Resources(cpu=100, memory=16))])])


class Counting:
    """Counts the calls a server makes to its etcd client, by method."""

    def __init__(self, server: ClusterServer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: dict[str, int] = {}
        self.fail_next_txn: Exception | None = None
        for name in ("txn", "lease_grant", "lease_keepalive", "get", "put"):
            monkeypatch.setattr(server.kv, name, self._wrap(name, getattr(server.kv, name)))

    def _wrap(self, name: str, call: Any) -> Any:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            if name == "txn" and self.fail_next_txn is not None:
                failure, self.fail_next_txn = self.fail_next_txn, None
                await trio.lowlevel.checkpoint()
                raise failure
            return await call(*args, **kwargs)
        return counted

    def reset(self) -> None:
        self.calls.clear()


@asynccontextmanager
async def leader(*, max_txn_ops: int = 20_000, heartbeat: HeartbeatConfig | None = None
                 ) -> AsyncIterator[ClusterServer]:
    """One server over a fresh in-memory etcd, following and leading."""
    kv = MemoryKV().client()
    server = ClusterServer(EventBroker(), ClusterStore(kv, PREFIX, max_txn_ops=max_txn_ops),
                           kv, PREFIX, heartbeat=heartbeat)
    await server.load()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.follow)
        nursery.start_soon(server.lead)
        yield server
        nursery.cancel_scope.cancel()


async def placed(server: ClusterServer, nodes: int, count: int) -> list[Any]:
    for n in range(nodes):
        await server.register_node(node(f"n{n}"), f"secret-n{n}")
    await server.register_job(batch_job("work", count))
    await trio.testing.wait_all_tasks_blocked()
    allocs = server.job_allocs("work")
    assert len(allocs) == count
    return allocs


async def post_all(server: ClusterServer, allocs: list[Any]) -> list[int | Exception]:
    """Every allocation's node posts it running, all at once; each caller's answer."""
    answers: list[int | Exception] = []

    async def post(alloc: Any) -> None:
        try:
            answers.append(await server.update_node_allocs(alloc.node_id, [
                msgspec.structs.replace(alloc, client_status="running")]))
        except Exception as e:
            answers.append(e)

    async with trio.open_nursery() as nursery:
        for alloc in allocs:
            nursery.start_soon(post, alloc)
    return answers


async def test_update_posts_within_the_window_share_one_commit(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    async with leader() as server:
        allocs = await placed(server, 10, 30)
        counting = Counting(server, monkeypatch)
        started = trio.current_time()
        answers = await post_all(server, allocs)
        assert trio.current_time() - started == pytest.approx(0.05)  # one batch window
        assert counting.calls.get("txn") == 1  # one etcd write for 30 posts
        assert len(answers) == 30
        (index,) = set(answers)  # every caller answered with the one commit's index
        assert isinstance(index, int)
        assert index == server.visible_index
        assert {a.client_status for a in server.job_allocs("work")} == {"running"}
        # A post after the window is the next batch's: its own commit.
        await post_all(server, allocs[:1])
        assert counting.calls.get("txn") == 1  # it changed nothing: nothing written


async def test_a_failed_commit_reaches_every_caller_of_its_batch(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    async with leader() as server:
        allocs = await placed(server, 10, 20)
        counting = Counting(server, monkeypatch)
        counting.fail_next_txn = EtcdError("etcd went away")
        answers = await post_all(server, allocs)
        assert counting.calls.get("txn") == 1
        assert len(answers) == 20
        assert all(isinstance(a, EtcdError) for a in answers)
        assert {a.client_status for a in server.job_allocs("work")} == {"pending"}
        # The nodes send again: the next batch goes through.
        answers = await post_all(server, allocs)
        assert all(isinstance(a, int) for a in answers)
        assert counting.calls.get("txn") == 2
        assert {a.client_status for a in server.job_allocs("work")} == {"running"}


async def test_a_batch_larger_than_a_transaction_is_split(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    async with leader(max_txn_ops=20) as server:  # ten updates per commit at most
        allocs = await placed(server, 5, 15)
        counting = Counting(server, monkeypatch)
        answers = await post_all(server, allocs)
        assert all(isinstance(a, int) for a in answers)
        assert counting.calls.get("txn") == 2
        assert {a.client_status for a in server.job_allocs("work")} == {"running"}


async def test_a_plan_too_large_for_etcd_fails_its_evaluation_and_the_leader_leads_on(
        autojump_clock: object) -> None:
    async with leader(max_txn_ops=20) as server:
        for n in range(5):
            await server.register_node(node(f"n{n}"), f"secret-n{n}")
        registered = await server.register_job(batch_job("huge", 40))  # 40 rows > 20 ops
        await trio.testing.wait_all_tasks_blocked()
        assert server.leading
        assert not server.job_allocs("huge")
        failed = server.evals[registered.eval_id]
        assert failed.status == EVAL_STATUS_FAILED
        assert "does not fit in one etcd transaction" in failed.status_description
        assert "--max-txn-ops" in failed.status_description
        # Still leading: a job that fits is placed.
        await server.register_job(batch_job("small", 3))
        await trio.testing.wait_all_tasks_blocked()
        assert len(server.job_allocs("small")) == 3


async def test_a_heartbeat_is_one_keepalive_and_a_growing_cluster_keeps_its_leases(
        autojump_clock: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # One heartbeat a second: the TTL grows with every node (base = nodes, at least 2 s).
    heartbeat = HeartbeatConfig(min_ttl=2.0, max_per_second=1.0, grace=2.0)
    async with leader(heartbeat=heartbeat) as server:
        for n in range(2):
            await server.register_node(node(f"n{n}"), f"secret-n{n}")
        counting = Counting(server, monkeypatch)
        for _ in range(5):
            for n in range(2):
                await server.node_heartbeat(f"n{n}", f"secret-n{n}")
            await trio.sleep(1)
        assert counting.calls == {"lease_keepalive": 10}  # no binding write, no grant
        # One node more: the longest TTL grows from 2 to 3 s; the leases granted for two
        # nodes (with headroom) still cover every heartbeat of a three-node cluster.
        await server.register_node(node("n2"), "secret-n2")
        counting.reset()
        for _ in range(5):
            for n in range(2):
                await server.node_heartbeat(f"n{n}", f"secret-n{n}")
            await trio.sleep(1)
        assert counting.calls == {"lease_keepalive": 10}
        assert {n.status for n in server.nodes()} == {"ready"}

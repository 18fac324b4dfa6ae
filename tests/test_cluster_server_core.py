"""`ClusterServer` over an in-memory etcd, under the mock clock: two servers share one state,
each sees the other's writes through the watch, racing writers lose nothing, and only the
leader schedules (an evaluation written elsewhere waits, pending, for it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from yurt.runtime.cluster.memkv import MemoryKV
from yurt.runtime.cluster.server import ClusterServer
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.etcdstore import ClusterStore
from yurt.runtime.structs import EVAL_STATUS_PENDING, Job, Task, TaskGroup

PREFIX = b"/yurt/"


def job(job_id: str, n: int = 0) -> Job:
    return Job(id=job_id, name=job_id, datacenters=["dc1"], meta={"n": str(n)},
               task_groups=[TaskGroup(name="g", count=1, tasks=[
                   Task(name="t", driver="mock_driver", config={"run_for": "1h"})])])


@asynccontextmanager
async def servers(count: int) -> AsyncIterator[list[ClusterServer]]:
    space = MemoryKV()
    started = []
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            kv = space.client()
            server = ClusterServer(EventBroker(), ClusterStore(kv, PREFIX), kv, PREFIX)
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

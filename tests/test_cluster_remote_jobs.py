"""A `RemoteServer` keeps one decoded Job per job version, whichever allocations bring it:
each fetched allocation arrives with its own copy (several KiB each, ten allocations of one
job on a node, a thousand nodes in one simulator). Its own cache holds only the versions its
allocations run; a cache given by the caller is shared and kept."""

from __future__ import annotations

import random

import msgspec
import trio
import trio.testing

from yurt.runtime.client.remote import JobKey, RemoteServer
from yurt.runtime.structs import Allocation, Job, Node


class Server:
    """Registers, heartbeats, lists `allocs` for any node and hands them out on a fetch."""

    def __init__(self) -> None:
        self.allocs: list[Allocation] = []
        self.index = 1

    async def __call__(self, method: str, url: str, *, content: bytes | None,
                       params: dict[str, str] | None, headers: dict[str, str]
                       ) -> tuple[int, bytes]:
        await trio.lowlevel.checkpoint()
        if url.endswith("/allocs") and method == "GET":
            if params and int(params.get("index", "0")) >= self.index:
                await trio.sleep(1)  # nothing new: as a blocking query that times out
            return 200, msgspec.json.encode({
                "Allocs": {a.id: a.alloc_modify_index for a in self.allocs},
                "Index": self.index})
        if url.endswith("/v1/internal/allocs"):
            return 200, msgspec.json.encode({"Allocs": self.allocs, "Index": self.index})
        return 200, msgspec.json.encode({"HeartbeatTTL": int(10e9), "Index": 1})


def allocs(job: Job, index: int, n: int = 3) -> list[Allocation]:
    return [Allocation(id=f"a{i}", job_id=job.id, job=job, node_id="n1",
                       alloc_modify_index=index) for i in range(n)]


async def test_allocations_of_one_job_version_share_one_job(autojump_clock: object) -> None:
    server = Server()
    v0 = Job(id="web", name="web", version=0, job_modify_index=5, meta={"x": "y" * 1000})
    server.allocs = allocs(v0, 5)
    remote = RemoteServer(Node(id="n1", name="n1"), ["http://s"], "secret",
                          rng=random.Random(1), transport=server)
    async with trio.open_nursery() as nursery:
        await nursery.start(remote.run)
        await remote.pulled.wait()
        jobs = {id(a.job) for a in remote.allocs.values()}
        assert len(jobs) == 1
        assert next(iter(remote.allocs.values())).job == v0
        # A new version replaces the old one in the cache: it keeps what runs.
        v1 = msgspec.structs.replace(v0, version=1, job_modify_index=9)
        server.allocs, server.index = allocs(v1, 9), 9
        await trio.sleep(5)
        assert {a.job.version for a in remote.allocs.values() if a.job} == {1}
        assert len({id(a.job) for a in remote.allocs.values()}) == 1
        assert list(remote._jobs) == [("default", "web", 1, 9)]
        nursery.cancel_scope.cancel()


async def test_a_shared_cache_serves_every_node(autojump_clock: object) -> None:
    server = Server()
    job = Job(id="batch", name="batch", job_modify_index=3)
    server.allocs = allocs(job, 3)
    shared: dict[JobKey, Job] = {}
    remotes = [RemoteServer(Node(id="n1", name=f"n{i}"), ["http://s"], "secret",
                            rng=random.Random(i), transport=server, jobs=shared)
               for i in range(3)]
    async with trio.open_nursery() as nursery:
        for remote in remotes:
            await nursery.start(remote.run)
        for remote in remotes:
            await remote.pulled.wait()
        assert len({id(a.job) for r in remotes for a in r.allocs.values()}) == 1
        assert list(shared) == [("default", "batch", 0, 3)]
        nursery.cancel_scope.cancel()

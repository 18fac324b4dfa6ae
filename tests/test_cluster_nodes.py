"""Node loss in a real cluster (real etcd, `yurt server`, `yurt agent --servers`, raw_exec
tasks): a node killed with its tasks has its allocation lost and replaced elsewhere; a node
frozen past its heartbeat TTL, then continued, stops the copy that was replaced, so exactly
one copy of the task runs."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.cluster_support import Cluster, Member, cluster, get, procs, wait_for

pytestmark = pytest.mark.slow

#: Short TTLs: a node is down about 3 s after its last heartbeat (lease 2 × 1 + 1 s).
FAST = ("--min-heartbeat-ttl", "1", "--heartbeat-grace", "1", "--leader-ttl", "2")


def sleep_job(job_id: str, marker: str) -> dict[str, Any]:
    return {"Job": {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"],
                    "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                        "Name": "t", "Driver": "raw_exec",
                        "Config": {"command": "/bin/sh",
                                   "args": ["-c", f"echo up-{job_id}; exec sleep {marker}"]},
                        "Resources": {"CPU": 10, "MemoryMB": 10}}]}]}}


async def three_nodes(c: Cluster) -> tuple[Member, list[Member]]:
    server = await c.server("s1", *FAST)
    agents: dict[int, Member] = {}

    async def agent(i: int) -> None:
        agents[i] = await c.agent(f"a{i}", [server], "--driver-allow", "raw_exec")

    async with trio.open_nursery() as nursery:  # three Python starts overlap, not queue
        for i in (1, 2, 3):
            nursery.start_soon(agent, i)

    async def ready() -> bool:
        nodes = await get(server.address, "/v1/nodes")
        return sum(n["Status"] == "ready" for n in nodes) == 3

    await wait_for(ready)
    return server, [agents[i] for i in (1, 2, 3)]


async def allocs(server: Member, job_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = await get(server.address, f"/v1/job/{job_id}/allocations")
    return found


async def running_on(server: Member, job_id: str) -> dict[str, str]:
    """Running allocations: alloc ID -> node name."""
    nodes = {n["ID"]: n["Name"] for n in await get(server.address, "/v1/nodes")}
    return {a["ID"]: nodes[a["NodeID"]] for a in await allocs(server, job_id)
            if a["ClientStatus"] == "running"}


async def start(server: Member, job_id: str, marker: str) -> tuple[str, str]:
    async with httpx2.AsyncClient(base_url=server.address, timeout=30) as client:
        r = await client.put("/v1/jobs", json=sleep_job(job_id, marker))
        assert r.status_code == 200, r.text
    ((alloc_id, node),) = (await wait_for(lambda: running_on(server, job_id))).items()
    assert procs.children(marker), "the task runs"
    return alloc_id, node


async def test_a_node_killed_with_its_tasks_has_its_allocation_replaced(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    marker = f"{3600 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    with trio.fail_after(90):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            server, agents = await three_nodes(c)
            alloc_id, node = await start(server, "web", marker)
            # A server forwards a node's own routes to its agent: the task's log, its stats.
            async with httpx2.AsyncClient(base_url=server.address, timeout=30) as client:

                async def logged() -> bool:
                    r = await client.get(f"/v1/client/fs/logs/{alloc_id[:8]}",
                                         params={"task": "t", "type": "stdout",
                                                 "plain": "true"})
                    assert r.status_code == 200, r.text
                    return "up-web" in r.text

                await wait_for(logged)
                stats = await client.get(f"/v1/client/allocation/{alloc_id}/stats")
                assert stats.status_code == 200, stats.text
                assert "ResourceUsage" in stats.json()
            # Any agent answers for any allocation: one that does not run it asks a server.
            other = next(a for a in agents if a.name != node)
            async with httpx2.AsyncClient(base_url=other.address, timeout=30) as client:
                r = await client.get(f"/v1/client/fs/logs/{alloc_id}",
                                     params={"task": "t", "type": "stdout", "plain": "true"})
                assert r.status_code == 200, r.text
                assert "up-web" in r.text
            victim = next(a for a in agents if a.name == node)
            victim.kill_with_tasks()
            await wait_for(lambda: _count(marker, 0))  # SIGKILL is delivered, not awaited

            async def replaced() -> dict[str, str]:
                found = await running_on(server, "web")
                return found if found and alloc_id not in found else {}

            ((new_id, new_node),) = (await wait_for(replaced)).items()
            assert new_node != node
            (lost,) = [a for a in await allocs(server, "web") if a["ID"] == alloc_id]
            assert (lost["ClientStatus"], lost["DesiredStatus"]) == ("lost", "stop")
            (new,) = [a for a in await allocs(server, "web") if a["ID"] == new_id]
            assert new["PreviousAllocation"] == alloc_id
            nodes = {n["Name"]: n["Status"] for n in await get(server.address, "/v1/nodes")}
            assert nodes[node] == "down"
            await wait_for(lambda: _count(marker, 1))


async def test_a_frozen_node_stops_its_replaced_allocation_when_it_comes_back(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    marker = f"{3600 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    with trio.fail_after(90):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            server, agents = await three_nodes(c)
            alloc_id, node = await start(server, "web", marker)
            frozen = next(a for a in agents if a.name == node)
            frozen.process.send_signal(signal.SIGSTOP)  # the agent only: its task runs on

            async def replaced() -> dict[str, str]:
                found = await running_on(server, "web")
                return found if found and alloc_id not in found else {}

            ((new_id, new_node),) = (await wait_for(replaced)).items()
            assert new_node != node
            # While the frozen node cannot hear it, two copies run: the one it still runs
            # and the replacement.
            await wait_for(lambda: _count(marker, 2))
            frozen.process.send_signal(signal.SIGCONT)

            async def original_stopped() -> bool:
                (original,) = [a for a in await allocs(server, "web") if a["ID"] == alloc_id]
                states = original.get("TaskStates") or {}
                return bool(states) and states["t"]["State"] == "dead"

            await wait_for(original_stopped)
            assert len(procs.children(marker)) == 1
            assert await running_on(server, "web") == {new_id: new_node}

            # It came back: its next heartbeat, which may reach the server after its first
            # look at its allocations (two loops of the client's, as in Nomad's).
            async def ready_again() -> bool:
                nodes = await get(server.address, "/v1/nodes")
                return {n["Name"]: n["Status"] for n in nodes}[node] == "ready"

            await wait_for(ready_again)


async def _count(marker: str, n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return len(procs.children(marker)) == n

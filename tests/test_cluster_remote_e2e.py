"""`yurt agent --servers` against real `yurt server` processes over a real etcd (layer 3):
the agent registers, runs what the servers schedule on it and reports it; its API forwards
the servers' routes; when the server it speaks to is SIGKILLed it fails over to the other and
keeps following the cluster."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.cluster_support import cluster, get, wait_for

pytestmark = pytest.mark.slow


def mock_job(job_id: str) -> dict[str, Any]:
    return {"Job": {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"],
                    "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                        "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"},
                        "Resources": {"CPU": 10, "MemoryMB": 10}}]}]}}


async def test_an_agent_follows_the_cluster_and_fails_over(etcd_urls: list[str],
                                                            etcd_prefix: bytes,
                                                            tmp_path: Path) -> None:
    with trio.fail_after(120):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1", "--min-heartbeat-ttl", "2", "--heartbeat-grace", "5")
            s2 = await c.server("s2", "--min-heartbeat-ttl", "2", "--heartbeat-grace", "5")
            agent = await c.agent("a1", [s1, s2], "--driver-allow", "mock_driver")

            async def node_ready() -> Any:
                nodes = await get(s2.address, "/v1/nodes")
                return [n for n in nodes if n["Name"] == "a1" and n["Status"] == "ready"]

            (node,) = await wait_for(node_ready)
            async with httpx2.AsyncClient(base_url=agent.address, timeout=30) as client:
                # Registered through the agent's API: forwarded to a server.
                r = await client.put("/v1/jobs", json=mock_job("web"))
                assert r.status_code == 200, r.text

                async def statuses() -> Any:
                    allocs = await get(s2.address, "/v1/job/web/allocations")
                    return [(a["NodeID"], a["ClientStatus"], a["DesiredStatus"])
                            for a in allocs]

                async def running() -> Any:
                    return [s for s in await statuses() if s[1] == "running"]

                assert await wait_for(running) == [(node["ID"], "running", "run")]
                (alloc,) = await get(s1.address, "/v1/job/web/allocations")
                stats = await client.get(f"/v1/client/allocation/{alloc['ID']}/stats")
                assert stats.status_code == 200, stats.text  # node-local: the agent's own

                c.members[0].kill(signal.SIGKILL)  # s1, the agent's first server, dies
                await c.members[0].process.wait()
                r = await client.delete("/v1/job/web")  # forwarded, now to s2
                assert r.status_code == 200, r.text

                async def complete() -> Any:
                    return [s for s in await statuses() if s[1] == "complete"]

                assert await wait_for(complete) == [(node["ID"], "complete", "stop")]
            # The node stayed up through the failover: its heartbeats reached s2.
            assert [n["Status"] for n in await get(s2.address, "/v1/nodes")] == ["ready"]


async def test_the_ui_restarts_an_allocation_through_its_server(etcd_urls: list[str],
                                                                etcd_prefix: bytes,
                                                                tmp_path: Path) -> None:
    """The web UI a server serves posts a node's route (restart) with the server's own
    `Origin`: the server checks it (api/origin.py) and forwards the call as its own
    (noderpc.py `to_node`), which the node's agent, at another address, accepts. Another
    site's `Origin` is still refused by the server."""
    with trio.fail_after(120):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            server = await c.server("s1")
            await c.agent("a1", [server], "--driver-allow", "mock_driver")

            async def node_ready() -> Any:
                nodes = await get(server.address, "/v1/nodes")
                return [n for n in nodes if n["Status"] == "ready"]

            await wait_for(node_ready)
            async with httpx2.AsyncClient(base_url=server.address, timeout=30) as client:
                r = await client.put("/v1/jobs", json=mock_job("web"))
                assert r.status_code == 200, r.text

                async def running() -> Any:
                    allocs = await get(server.address, "/v1/job/web/allocations")
                    return [a for a in allocs if a["ClientStatus"] == "running"]

                (alloc,) = await wait_for(running)
                restart = f"/v1/client/allocation/{alloc['ID']}/restart"
                r = await client.post(restart, json={},
                                      headers={"Origin": "http://evil.example"})
                assert r.status_code == 403, r.text  # the server's own check
                r = await client.post(restart, json={}, headers={"Origin": server.address})
                assert r.status_code == 200, r.text

                async def restarted() -> Any:
                    a = await get(server.address, f"/v1/allocation/{alloc['ID']}")
                    return a["TaskStates"]["t"]["Restarts"] >= 1 and a

                await wait_for(restarted)

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

"""Two `yurt server` processes over one real etcd: every server answers for the whole
cluster, concurrent writes through both lose nothing, and when the leader is SIGKILLed the
other server schedules the next job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.cluster_support import cluster, get

pytestmark = pytest.mark.slow


def mock_job(job_id: str, meta: dict[str, str] | None = None, count: int = 1) -> dict[str, Any]:
    return {"Job": {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"],
                    "Meta": meta or {},
                    "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
                        "Name": "t", "Driver": "mock_driver",
                        "Config": {"run_for": "1h"},
                        "Resources": {"CPU": 10, "MemoryMB": 10}}]}]}}


async def test_two_servers_race_100_updates_of_one_job(etcd_urls: list[str],
                                                       etcd_prefix: bytes,
                                                       tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1")
            s2 = await c.server("s2")
            answers: list[dict[str, Any]] = []

            async def update(i: int) -> None:
                address = (s1, s2)[i % 2].address
                async with httpx2.AsyncClient(base_url=address, timeout=30) as client:
                    r = await client.put("/v1/jobs", json=mock_job("race", {"n": str(i)}))
                    r.raise_for_status()
                    answers.append(r.json())

            async with trio.open_nursery() as nursery:
                for i in range(100):
                    nursery.start_soon(update, i)
            assert len(answers) == 100
            # Each update is one new version: none overwrote another decided on the same
            # state (that would repeat a version and lose an update).
            modify_indexes = [a["JobModifyIndex"] for a in answers]
            assert len(set(modify_indexes)) == 100
            for server in (s1, s2):
                job = await get(server.address, "/v1/job/race")
                assert job["Version"] == 99
                assert job["JobModifyIndex"] == max(modify_indexes)
            versions = await get(s2.address, "/v1/job/race/versions")
            numbers = [v["Version"] for v in versions["Versions"]]
            assert len(numbers) == len(set(numbers))

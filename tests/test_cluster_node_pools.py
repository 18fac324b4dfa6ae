"""Node pools in a cluster: two `yurt server` processes over one real etcd (layer 2). A pool
written through one server is read through the other; a node registering in a pool makes it
exist (Nomad's registration creates it); a job in that pool is placed on that node only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.cluster_support import cluster, get, wait_for
from tests.test_cluster_servers import mock_job, node_body

pytestmark = pytest.mark.slow


def pooled(body: dict[str, Any], pool: str) -> dict[str, Any]:
    body["Node" if "Node" in body else "Job"]["NodePool"] = pool
    return body


async def test_pools_across_servers_and_a_job_placed_in_its_pool(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1")
            s2 = await c.server("s2")
            async with httpx2.AsyncClient(timeout=30) as client:
                r = await client.put(f"{s1.address}/v1/node/pools",
                                     json={"Name": "batch", "Description": "B"})
                assert r.status_code == 200, r.text
                got = await get(s2.address, "/v1/node/pool/batch")
                assert got["Description"] == "B"
                for node_id, pool in (("n1", "default"), ("n2", "gpu")):
                    r = await client.put(f"{s1.address}/v1/internal/node/register",
                                         json=pooled(node_body(node_id), pool))
                    assert r.status_code == 200, r.text

                async def names() -> list[str]:
                    return [p["Name"] for p in await get(s2.address, "/v1/node/pools")]

                await wait_for(lambda: _has(names, "gpu"))
                assert await names() == ["all", "batch", "default", "gpu"]
                r = await client.put(f"{s2.address}/v1/jobs",
                                     json=pooled(mock_job("ml", count=2), "gpu"))
                assert r.status_code == 200, r.text

            async def placed() -> list[str]:
                allocs = await get(s1.address, "/v1/job/ml/allocations")
                return [a["NodeID"] for a in allocs] if len(allocs) == 2 else []

            assert await wait_for(placed) == ["n2", "n2"]
            nodes = await get(s1.address, "/v1/node/pool/gpu/nodes")
            assert [n["ID"] for n in nodes] == ["n2"]


async def _has(names: Any, name: str) -> bool:
    return name in await names()

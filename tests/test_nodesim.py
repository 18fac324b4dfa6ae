"""`yurt nodesim` against a real cluster (layer 3): a real etcd, a real `yurt server`
process, and `yurt nodesim --nodes 100 --json` as a process of its own. A batch job of 1,000
allocations (10 fit on each simulated node) runs to completion on the simulated nodes; the
simulator, stopped with SIGINT, prints a summary that must account for all of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.cli_proc_support import YURT
from tests.cluster_support import cluster, get, wait_for

pytestmark = pytest.mark.slow

NODES = 100
COUNT = 1000


def batch_job(count: int) -> dict[str, Any]:
    # The default simulated node has 4000 MHz and 8192 MB: exactly 10 of these fit.
    return {"Job": {"ID": "sim", "Name": "sim", "Type": "batch", "Datacenters": ["dc1"],
                    "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
                        "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1s"},
                        "Resources": {"CPU": 400, "MemoryMB": 800}}]}]}}


async def test_nodesim_runs_a_thousand_allocations_on_a_hundred_nodes(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text("[alloc]\nstart_delay = [0.1, 0.3]\nrun_time = [0.5, 1.0]\n")
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            server = await c.server("s1")
            out = tmp_path / "nodesim.json"
            err = tmp_path / "nodesim.err"
            with out.open("wb") as stdout, err.open("wb") as stderr:
                sim = await trio.lowlevel.open_process(
                    [YURT, "nodesim", "--servers", server.address, "--nodes", str(NODES),
                     "--seed", "7", "--profile", str(profile), "--json"],
                    stdout=stdout, stderr=stderr, start_new_session=True)
            try:
                async def all_ready() -> Any:
                    nodes = await get(server.address, "/v1/nodes")
                    ready = [n for n in nodes if n["Status"] == "ready"]
                    return len(ready) == NODES and ready

                ready = await wait_for(all_ready, interval=0.2)
                assert {n["Name"] for n in ready} == {f"sim-{i}" for i in range(NODES)}
                async with httpx2.AsyncClient(base_url=server.address, timeout=30) as client:
                    r = await client.put("/v1/jobs", json=batch_job(COUNT))
                    assert r.status_code == 200, r.text

                async def all_complete() -> Any:
                    allocs = await get(server.address, "/v1/job/sim/allocations")
                    done = [a for a in allocs if a["ClientStatus"] == "complete"]
                    return len(done) == COUNT and allocs

                allocs = await wait_for(all_complete, interval=0.5)
                assert len({a["NodeID"] for a in allocs}) == NODES  # 10 on every node
                os.killpg(sim.pid, signal.SIGINT)
                assert await sim.wait() == 0, err.read_text()[-2000:]
            finally:
                if sim.returncode is None:
                    os.killpg(sim.pid, signal.SIGKILL)
    summary = json.loads(out.read_text())
    assert summary["nodes"] == NODES
    assert summary["registered"] == NODES
    received = summary["servers_received"]
    calls = received["calls"]
    assert calls["register"] == NODES  # once each: no registration failed or was repeated
    assert calls["alloc_fetch"] >= NODES  # every node fetched its allocations
    # The first pull, the one with its allocations, and a few more as their indexes move;
    # not a node spinning on pulls answered at once (an index 0 answered for a node with
    # nothing yet: thousands per node).
    assert 2 * NODES <= calls["alloc_pull"] <= 5 * NODES
    # Nothing refused, unreachable or given up at a deadline; what was in flight at the stop
    # is mostly the pull each node had open.
    assert received["refused"] == {}
    assert received["unreachable"] == {}
    assert received["unanswered"] == {}
    assert received["in_flight_at_stop"]["alloc_pull"] <= NODES
    # Every allocation's end reached the servers (its pending and running may be folded
    # into a later update of the same tick); batching carried them in fewer calls.
    assert received["updates_carried"] >= COUNT
    assert 0 < calls["update"] < received["updates_carried"]
    assert received["bytes_sent"] > 0
    assert received["bytes_received"] > 0
    saw = summary["nodes_saw"]
    assert saw["allocations"] == {"complete": COUNT}
    latency = saw["placement_to_running_ms"]
    assert latency["count"] == COUNT
    assert 0 < latency["p50"] <= latency["p95"] <= latency["max"]
    assert saw["heartbeat_failures"] == 0
    assert saw["reregistrations"] == 0
    assert summary["memory"]["per_node_kib"] > 0


def test_nodesim_refuses_a_bad_profile(tmp_path: Path) -> None:
    profile = tmp_path / "bad.toml"
    profile.write_text("[node]\nmemory_mb = \"lots\"\n")
    result = subprocess.run([YURT, "nodesim", "--servers", "http://127.0.0.1:1", "--nodes", "1",
                             "--profile", str(profile)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert f"{profile}: node.memory_mb: expected an integer >= 1, got 'lots'" in result.stderr

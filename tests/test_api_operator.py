"""Status, agent, operator, system, scaling, search and metrics endpoints over a real socket
(layer 2): Nomad's shapes, the scheduler configuration honoured by placement and kept across a
restart, and every endpoint's errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import mock_job, running_agent

pytestmark = pytest.mark.slow


def _sized(job_id: str, *, priority: int, memory: int) -> dict[str, Any]:
    body = mock_job(job_id)
    body["Job"]["Priority"] = priority
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"] = {"CPU": 1, "MemoryMB": memory}
    return body


async def _allocs(c: httpx2.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    return list((await c.get(f"/v1/job/{job_id}/allocations")).json())


async def _until(c: httpx2.AsyncClient, job_id: str, status: str) -> None:
    """Until every allocation of the job has `status` (bounded by the caller)."""
    while True:
        allocs = await _allocs(c, job_id)
        if allocs and all(x["ClientStatus"] == status for x in allocs):
            return
        await trio.sleep(0.05)


async def test_status_regions_agent_members_servers_health_and_raft(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            leader = (await c.get("/v1/status/leader")).json()
            assert leader == "127.0.0.1:4647"
            assert (await c.get("/v1/status/peers")).json() == [leader]
            assert (await c.get("/v1/regions")).json() == ["global"]
            members = (await c.get("/v1/agent/members")).json()
            assert members["ServerRegion"] == "global"
            assert members["ServerDC"] == a.agent.config.datacenter
            (me,) = members["Members"]
            assert me["Name"] == members["ServerName"] == f"{a.agent.node.name}.global"
            assert (me["Addr"], me["Port"], me["Status"]) == ("127.0.0.1", 4648, "alive")
            assert me["Tags"]["role"] == "nomad"
            assert me["Tags"]["region"] == "global"
            assert (await c.get("/v1/agent/servers")).json() == [leader]
            # Nomad's client replaces its list, adding the default port where none is given.
            r = await c.post("/v1/agent/servers",
                             params=[("address", "10.0.0.9"), ("address", "10.1.1.1:4829")])
            assert r.status_code == 200
            assert (await c.get("/v1/agent/servers")).json() == ["10.0.0.9:4647",
                                                                 "10.1.1.1:4829"]
            assert (await c.put("/v1/agent/servers")).status_code == 400
            assert (await c.delete("/v1/agent/servers")).status_code == 405
            joined = await c.put("/v1/agent/join", params={"address": "nope"})
            assert joined.status_code == 200
            assert joined.json()["num_joined"] == 0
            assert joined.json()["error"]
            assert (await c.put("/v1/agent/join")).status_code == 400
            assert (await c.get("/v1/agent/join")).status_code == 405
            assert (await c.post("/v1/agent/force-leave",
                                 params={"node": "nope"})).status_code == 200
            assert (await c.post("/v1/agent/force-leave")).status_code == 400
            assert (await c.post("/v1/agent/force-leave",
                                 params={"node": "n", "prune": "x"})).status_code == 400
            health = await c.get("/v1/agent/health")
            assert health.status_code == 200
            assert health.json() == {"client": {"ok": True, "message": "ok"},
                                     "server": {"ok": True, "message": "ok"}}
            only = (await c.get("/v1/agent/health", params={"type": "client"})).json()
            assert set(only) == {"client"}
            raft = (await c.get("/v1/operator/raft/configuration")).json()
            (server,) = raft["Servers"]
            assert (server["Leader"], server["Voter"], server["Address"]) == (True, True,
                                                                              leader)
            assert raft["Index"] >= 0
            for path in ("/v1/status/leader", "/v1/status/peers", "/v1/regions",
                         "/v1/agent/members", "/v1/agent/health",
                         "/v1/operator/raft/configuration"):
                assert (await c.delete(path)).status_code == 405, path


async def test_scheduler_configuration_switches_preemption_and_persists(
        tmp_path: Path) -> None:
    path = "/v1/operator/scheduler/configuration"
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            got = (await c.get(path)).json()
            config = got["SchedulerConfig"]
            assert config["SchedulerAlgorithm"] == "binpack"
            # yurt preempts for every job type unless told otherwise.
            assert all(config["PreemptionConfig"].values())
            assert set(config["PreemptionConfig"]) == {
                "SystemSchedulerEnabled", "SysBatchSchedulerEnabled", "BatchSchedulerEnabled",
                "ServiceSchedulerEnabled"}
            # Nomad's PUT: absent switches are off.
            r = await c.put(path, json={"SchedulerAlgorithm": "binpack", "PreemptionConfig": {
                "SystemSchedulerEnabled": True}})
            assert r.status_code == 200
            assert r.json()["Updated"] is True
            index = r.json()["Index"]
            config = (await c.get(path)).json()["SchedulerConfig"]
            assert config["PreemptionConfig"]["ServiceSchedulerEnabled"] is False
            assert config["ModifyIndex"] == index
            # Placement: a high-priority service does not evict a low one now.
            total = a.agent.node.node_resources.memory.memory_mb
            assert (await c.post("/v1/jobs", json=_sized("low", priority=20,
                                                         memory=total - 100))).status_code == 200
            assert (await c.post("/v1/jobs", json=_sized("high", priority=80,
                                                         memory=500))).status_code == 200
            assert await _allocs(c, "high") == []
            assert [x["DesiredStatus"] for x in await _allocs(c, "low")] == ["run"]
            # A stale cas changes nothing; errors are 400s.
            stale = await c.post(path, params={"cas": str(index - 1)},
                                 json={"PreemptionConfig": {"ServiceSchedulerEnabled": True}})
            assert stale.json()["Updated"] is False
            assert (await c.get(path)).json()["SchedulerConfig"]["ModifyIndex"] == index
            assert (await c.put(path, params={"cas": "x"}, json={})).status_code == 400
            assert (await c.put(path, json={"SchedulerAlgorithm": "best"})).status_code == 400
            assert (await c.put(path, json={"PreemptionConfig": 3})).status_code == 400
            assert (await c.put(path, json={"PreemptionConfig": {
                "BatchSchedulerEnabled": "yes"}})).status_code == 400
            assert (await c.put(path, content=b"[")).status_code == 400
            assert (await c.delete(path)).status_code == 405
        async with running_agent(tmp_path) as a:
            c = a.client
            config = (await c.get(path)).json()["SchedulerConfig"]
            assert config["ModifyIndex"] == index
            assert config["PreemptionConfig"]["ServiceSchedulerEnabled"] is False
            ok = await c.put(path, params={"cas": str(index)}, json={
                "PreemptionConfig": {"ServiceSchedulerEnabled": True}})
            assert ok.json()["Updated"] is True
            # Preemption back on: registering again places the high job, evicting low.
            assert (await c.post("/v1/jobs", json=_sized("high", priority=80,
                                                         memory=500))).status_code == 200
            assert len(await _allocs(c, "high")) == 1
            assert [x["DesiredStatus"] for x in await _allocs(c, "low")] == ["evict"]


async def test_system_gc_reconcile_and_scaling(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.post("/v1/jobs", json=mock_job("keep"))).status_code == 200
            assert (await c.post("/v1/jobs", json=mock_job("gone"))).status_code == 200
            assert (await c.delete("/v1/job/gone")).status_code == 200
            await _until(c, "gone", "complete")
            r = await c.put("/v1/system/gc")
            assert r.status_code == 200
            assert [j["ID"] for j in (await c.get("/v1/jobs")).json()] == ["keep"]
            assert (await c.get("/v1/job/gone")).status_code == 404
            assert (await c.post("/v1/system/gc")).status_code == 405  # PUT only, as Nomad
            assert (await c.put("/v1/system/reconcile/summaries")).status_code == 200
            assert (await c.get("/v1/system/reconcile/summaries")).status_code == 405
            assert (await c.get("/v1/scaling/policies")).json() == []
            missing = await c.get("/v1/scaling/policy/abc")
            assert missing.status_code == 404
            assert missing.text == "policy not found"
            assert (await c.put("/v1/scaling/policies")).status_code == 405


async def test_prefix_and_fuzzy_search(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            for job_id in ("web-frontend", "web-backend", "batchy"):
                assert (await c.post("/v1/jobs", json=mock_job(job_id))).status_code == 200
            r = (await c.post("/v1/search", json={"Prefix": "web", "Context": "jobs"})).json()
            assert r["Matches"] == {"jobs": ["web-backend", "web-frontend"]}
            assert r["Truncations"] == {"jobs": False}
            alloc_id = (await _allocs(c, "batchy"))[0]["ID"]
            node_id = a.agent.node.id
            every = (await c.put("/v1/search", json={"Prefix": alloc_id[:6],
                                                     "Context": "all"})).json()
            assert every["Matches"]["allocs"] == [alloc_id]
            assert {"jobs", "evals", "nodes", "namespaces"} <= set(every["Matches"])
            nodes = (await c.put("/v1/search", json={"Prefix": node_id[:4],
                                                     "Context": "nodes"})).json()
            assert nodes["Matches"]["nodes"] == [node_id]
            fuzzy = (await c.post("/v1/search/fuzzy", json={"Text": "END",
                                                            "Context": "jobs"})).json()
            assert [m["ID"] for m in fuzzy["Matches"]["jobs"]] == ["web-backend",
                                                                   "web-frontend"]
            assert fuzzy["Matches"]["jobs"][0]["Scope"] == ["default", "web-backend"]
            allocs = (await c.post("/v1/search/fuzzy", json={"Text": "batchy.g",
                                                             "Context": "allocs"})).json()
            assert allocs["Matches"]["allocs"] == [{"ID": "batchy.g[0]",
                                                    "Scope": ["default", alloc_id]}]
            tasks = (await c.post("/v1/search/fuzzy", json={"Text": "web",
                                                            "Context": "all"})).json()
            assert "jobs" in tasks["Matches"]
            # More than 20: truncated.
            for i in range(21):
                await c.post("/v1/jobs", json=mock_job(f"many-{i:02d}"))
            many = (await c.put("/v1/search", json={"Prefix": "many",
                                                    "Context": "jobs"})).json()
            assert len(many["Matches"]["jobs"]) == 20
            assert many["Truncations"]["jobs"] is True
            # Fuzzy search looks at 20 jobs at most (Nomad's limit_query): truncated.
            cut = (await c.post("/v1/search/fuzzy", json={"Text": "many",
                                                          "Context": "jobs"})).json()
            assert cut["Truncations"]["jobs"] is True
            # Errors.
            for path, body in (("/v1/search", {"Prefix": "a", "Context": "bogus"}),
                               ("/v1/search", {"Prefix": 1, "Context": "jobs"}),
                               ("/v1/search", {"Prefix": "a"}),
                               ("/v1/search/fuzzy", {"Text": "a"}),
                               ("/v1/search/fuzzy", {"Text": "ab", "Context": "bogus"})):
                assert (await c.post(path, json=body)).status_code == 400, (path, body)
            assert (await c.get("/v1/search")).status_code == 405
            assert (await c.get("/v1/search/fuzzy")).status_code == 405


async def test_metrics_json_and_prometheus(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            r = await c.post("/v1/jobs", json={"Job": {
                "ID": "sleeper", "TaskGroups": [{"Name": "g", "Tasks": [{
                    "Name": "t", "Driver": "raw_exec",
                    "Config": {"command": "/bin/sleep", "args": ["1000"]},
                    "Resources": {"CPU": 50, "MemoryMB": 20}}]}]}})
            assert r.status_code == 200
            await _until(c, "sleeper", "running")
            alloc_id = (await _allocs(c, "sleeper"))[0]["ID"]
            body = (await c.get("/v1/metrics")).json()
            assert set(body) == {"Timestamp", "Gauges", "Points", "Counters", "Samples"}
            assert body["Timestamp"].endswith("+0000 UTC")
            gauges = {(g["Name"], g["Labels"].get("alloc_id", "")): g for g in body["Gauges"]}
            running = gauges[("nomad.client.allocations.running", "")]
            assert running["Value"] == 1
            assert running["Labels"]["node_id"] == a.agent.node.id
            assert gauges[("nomad.client.allocations.terminal", "")]["Value"] == 0
            assert gauges[("nomad.client.host.memory.total", "")]["Value"] > 0
            assert any(n == "nomad.client.host.cpu.idle" for n, _ in gauges)
            rss = gauges[("nomad.client.allocs.memory.rss", alloc_id)]
            assert rss["Value"] > 0
            assert rss["Labels"] == {"alloc_id": alloc_id, "job": "sleeper",
                                     "task_group": "g", "task": "t", "namespace": "default"}
            assert gauges[("nomad.client.allocs.memory.allocated", alloc_id)]["Value"] == (
                20 * 1024 * 1024)
            total = a.agent.node.node_resources
            assert gauges[("nomad.client.allocated.memory", "")]["Value"] == 20
            assert gauges[("nomad.client.unallocated.cpu", "")]["Value"] == (
                total.cpu.cpu_shares - 50)
            text = await c.get("/v1/metrics", params={"format": "prometheus"})
            assert text.status_code == 200
            assert text.headers["content-type"].startswith("text/plain")
            assert "# TYPE nomad_client_allocations_running gauge" in text.text
            line = next(x for x in text.text.splitlines()
                        if x.startswith("nomad_client_allocs_memory_rss{"))
            assert f'alloc_id="{alloc_id}"' in line
            assert float(line.rsplit(" ", 1)[1]) > 0
            assert (await c.post("/v1/metrics")).status_code == 405

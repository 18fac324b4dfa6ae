"""`yurt node eligibility|drain`, `yurt system gc|reconcile summaries` and `yurt tasks`, run as
a user runs them (a real `yurt` process) against an agent on a real socket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import Running, mock_job, running_agent
from tests.cli_proc_support import yurt
from yurt.runtime.cli.node import overview_rows

pytestmark = pytest.mark.slow


async def _node(a: Running) -> dict[str, Any]:
    return dict((await a.client.get(f"/v1/node/{a.agent.node.id}")).json())


async def test_node_eligibility(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            out = await yurt(a.address, "node", "eligibility", "-disable", "-self")
            assert out.returncode == 0, out.stderr
            assert b"ineligible" in out.stdout
            assert (await _node(a))["SchedulingEligibility"] == "ineligible"
            prefix = a.agent.node.id[:6]
            out = await yurt(a.address, "node", "eligibility", "--enable", prefix)
            assert out.returncode == 0, out.stderr
            assert (await _node(a))["SchedulingEligibility"] == "eligible"
            # Usage errors: 2; an unknown node: 1.
            assert (await yurt(a.address, "node", "eligibility", "-self")).returncode == 2
            assert (await yurt(a.address, "node", "eligibility", "-enable")).returncode == 2
            assert (await yurt(a.address, "node", "eligibility", "-enable", "-disable",
                                       "-self")).returncode == 2
            missing = await yurt(a.address, "node", "eligibility", "-enable", "ffffffff")
            assert missing.returncode == 1
            assert b"No node(s) with prefix" in missing.stderr


async def test_node_drain_follows_until_done_and_disable(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=mock_job("m", 2))).status_code == 200
            out = await yurt(a.address, "node", "drain", "-enable", "-deadline", "10m", "-self")
            assert out.returncode == 0, out.stderr
            lines = out.stdout.decode().splitlines()
            assert lines[0] == f'Node "{a.agent.node.id}" drain strategy set'
            assert any(line.endswith("Node drain complete") for line in lines), lines
            assert lines[-1].endswith(f"Drain complete for node {a.agent.node.id}")
            node = await _node(a)
            assert (node["Drain"], node["SchedulingEligibility"]) == (False, "ineligible")
            allocs = (await a.client.get("/v1/job/m/allocations")).json()
            assert {x["DesiredStatus"] for x in allocs} == {"stop"}
            # -detach returns at once; -disable marks eligible unless -keep-ineligible.
            out = await yurt(a.address, "node", "drain", "-enable", "-no-deadline", "-detach",
                                     "-self")
            assert out.returncode == 0, out.stderr
            out = await yurt(a.address, "node", "drain", "-disable", "-keep-ineligible", "-self")
            assert out.returncode == 0, out.stderr
            node = await _node(a)
            assert (node["Drain"], node["SchedulingEligibility"]) == (False, "ineligible")
            assert (await yurt(a.address, "node", "drain", "-disable", "-self")).returncode == 0
            assert (await _node(a))["SchedulingEligibility"] == "eligible"
            for bad in (("-enable", "-deadline", "soon", "-self"),
                        ("-enable", "-force", "-no-deadline", "-self"),
                        ("-disable", "-force", "-self"), ("-self",)):
                assert (await yurt(a.address, "node", "drain", *bad)).returncode == 2, bad


async def test_system_gc_and_status_overview(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.post("/v1/jobs", json=mock_job("web", 2))).status_code == 200
            assert (await c.post("/v1/jobs", json=mock_job("old"))).status_code == 200
            assert (await c.delete("/v1/job/old")).status_code == 200
            while True:
                allocs = (await c.get("/v1/allocations")).json()
                states = {(x["JobID"], x["ClientStatus"]) for x in allocs}
                if states == {("web", "running"), ("old", "complete")}:
                    break
                await trio.sleep(0.05)
            out = await yurt(a.address, "tasks")
            assert out.returncode == 0, out.stderr
            text = out.stdout.decode()
            assert text.splitlines()[0].split() == ["Name", "State", "Alloc", "Detail"]
            assert "web.g[0]:t" in text
            assert "web.g[1]:t" in text
            assert "RUNNING" in text
            assert "old" in text  # a stopped job with nothing left running: one line
            data = json.loads((await yurt(a.address, "tasks", "-json")).stdout)
            assert {j["ID"] for j in data["Jobs"]} == {"web", "old"}
            out = await yurt(a.address, "system", "gc")
            assert out.returncode == 0, out.stderr
            assert [j["ID"] for j in (await c.get("/v1/jobs")).json()] == ["web"]
            out = await yurt(a.address, "system", "reconcile", "summaries")
            assert out.returncode == 0, out.stderr


def test_overview_rows() -> None:
    jobs = [{"ID": "web", "Type": "service", "Status": "running", "Stop": False},
            {"ID": "done", "Type": "batch", "Status": "dead", "Stop": False}]
    allocs = [
        {"ID": "a" * 36, "JobID": "web", "Name": "web.g[0]", "DesiredStatus": "run",
         "ClientStatus": "running", "TaskStates": {
             "t": {"State": "running", "StartedAt": "2020-01-01T00:00:00Z", "Restarts": 2},
             "side": {"State": "dead", "Failed": True, "Restarts": 0}}},
        {"ID": "b" * 36, "JobID": "done", "Name": "done.g[0]", "DesiredStatus": "stop",
         "ClientStatus": "complete", "TaskStates": {"t": {"State": "dead"}}}]
    rows = overview_rows(jobs, allocs)
    assert [r[:3] for r in rows] == [("web.g[0]:side", "DEAD", "aaaaaaaa"),
                                     ("web.g[0]:t", "RUNNING", "aaaaaaaa"),
                                     ("done", "DEAD", "-")]
    assert rows[0][3] == "failed"
    assert rows[1][3].startswith("uptime ")
    assert rows[1][3].endswith(", 2 restarts")

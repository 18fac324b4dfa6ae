"""A rolling update end to end (layer 2): raw_exec processes, the real clock, the API on a real
socket. The group's `health_check = "manual"` makes the test the operator Nomad's manual mode
expects: it marks each allocation healthy once its task runs, unhealthy once it failed, through
`/v1/deployment/allocation-health`. Sampled every 200 ms, a count-3 rollout with
`max_parallel = 1` never has fewer than 2 healthy allocations running; a version that crashes
fails its deployment and `auto_revert` brings the last stable version back, never fewer than 2
of the working version's processes running meanwhile."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import running_agent

pytestmark = pytest.mark.slow


def job(script: str) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", script]},
            "Resources": {"CPU": 10, "MemoryMB": 10}}
    return {"Job": {"ID": "roll", "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": 3, "Tasks": [task],
        "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Update": {"MaxParallel": 1, "HealthCheck": "manual", "MinHealthyTime": "1s",
                   "HealthyDeadline": "10s", "ProgressDeadline": "30s", "AutoRevert": True}}]}}


async def allocations(c: httpx2.AsyncClient) -> list[dict[str, Any]]:
    """The job's allocations in full (their DeploymentID and DeploymentStatus)."""
    listed = await c.get("/v1/job/roll/allocations")
    stubs = listed.json() if listed.status_code == 200 else []
    return [(await c.get(f"/v1/allocation/{s['ID']}")).json() for s in stubs]


async def operate(c: httpx2.AsyncClient) -> None:
    """The operator of a manual health check: healthy once running, unhealthy once failed."""
    while True:
        for alloc in await allocations(c):
            status = alloc.get("DeploymentStatus") or {}
            did = alloc["DeploymentID"]
            if status.get("Healthy") is not None or alloc["DesiredStatus"] != "run" or not did:
                continue
            key = {"running": "HealthyAllocationIDs",
                   "failed": "UnhealthyAllocationIDs"}.get(alloc["ClientStatus"])
            if key is not None:
                await c.post(f"/v1/deployment/allocation-health/{did}",
                             json={"DeploymentID": did, key: [alloc["ID"]]})
        await trio.sleep(0.1)


async def healthy_running(c: httpx2.AsyncClient) -> int:
    return sum(1 for a in await allocations(c)
               if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"
               and (a.get("DeploymentStatus") or {}).get("Healthy") is True)


async def sleepers_running(c: httpx2.AsyncClient) -> int:
    """Running allocations of a version that works (the crashing one's task exits at once).
    A rollback updates the good ones in place into its own deployment, which asks for their
    health again, as Nomad does: counted here, they are the same processes all along."""
    return sum(1 for a in await allocations(c)
               if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"
               and a["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["args"][1] != "exit 1")


async def settled(c: httpx2.AsyncClient, version: int, samples: list[int],
                  sample: Any = healthy_running) -> dict[str, Any]:
    """The deployment of `version` once it is over, sampling a count meanwhile."""
    while True:
        samples.append(await sample(c))
        found = [d for d in (await c.get("/v1/deployments")).json()
                 if d["JobVersion"] == version and d["Status"] not in ("running", "paused")]
        if found:
            return found[0]  # type: ignore[no-any-return]
        await trio.sleep(0.2)


async def test_a_rolling_update_keeps_two_healthy_and_a_crash_reverts(tmp_path: Path) -> None:
    with trio.fail_after(120):
        async with running_agent(tmp_path) as a, trio.open_nursery() as nursery:
            c = a.client
            nursery.start_soon(operate, c)
            first = job("exec sleep 1000")
            assert (await c.post("/v1/jobs", json=first)).status_code == 200
            assert (await settled(c, 0, []))["Status"] == "successful"

            second = copy.deepcopy(first)
            second["Job"]["TaskGroups"][0]["Tasks"][0]["Env"] = {"V": "2"}
            await c.post("/v1/jobs", json=second)
            samples: list[int] = []
            done = await settled(c, 1, samples)
            assert done["Status"] == "successful", done
            assert min(samples) >= 2, samples
            # One batch at a time: each version-1 allocation came from its own evaluation.
            batches = {x["EvalID"] for x in await allocations(c) if x["Job"]["Version"] == 1}
            assert len(batches) == 3
            assert (await c.get("/v1/job/roll")).json()["Stable"] is True

            crashing = copy.deepcopy(first)
            crashing["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["args"] = ["-c", "exit 1"]
            await c.post("/v1/jobs", json=crashing)
            samples = []
            failed = await settled(c, 2, samples, sleepers_running)
            assert (failed["Status"], failed["StatusDescription"]) == (
                "failed", "Failed due to unhealthy allocations - rolling back to job version 1")
            reverted = await settled(c, 3, samples, sleepers_running)
            assert min(samples) >= 2, samples
            assert reverted["Status"] == "successful"
            current = (await c.get("/v1/job/roll")).json()
            assert current["Version"] == 3
            assert current["TaskGroups"][0]["Tasks"][0]["Env"] == {"V": "2"}
            assert await healthy_running(c) == 3
            nursery.cancel_scope.cancel()

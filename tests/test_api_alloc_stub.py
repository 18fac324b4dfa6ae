"""The allocation list stub over a real socket (layer 2): the fields of Nomad's
`AllocListStub` (`DeploymentStatus`, `DesiredTransition`) on every list that answers stubs,
and `?task_states=false`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import mock_job, running_agent


async def _ok(r: httpx2.Response) -> Any:
    assert r.status_code == 200, (r.request.url, r.status_code, r.text)
    return r.json()


async def test_stub_carries_deployment_status_and_transition(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            doc = mock_job("web", 2)
            doc["Job"]["TaskGroups"][0]["Update"] = {"MaxParallel": 1,
                                                     "HealthCheck": "manual"}
            await _ok(await c.post("/v1/jobs", json=doc))
            d = await _ok(await c.get("/v1/job/web/deployment"))
            first, second = await _ok(await c.get(f"/v1/deployment/allocations/{d['ID']}"))
            assert first["DeploymentStatus"] is None  # no health set yet, as in Nomad
            await _ok(await c.post(f"/v1/deployment/allocation-health/{d['ID']}", json={
                "DeploymentID": d["ID"], "HealthyAllocationIDs": [first["ID"]],
                "UnhealthyAllocationIDs": [second["ID"]]}))
            lists = ["/v1/allocations", "/v1/job/web/allocations",
                     f"/v1/deployment/allocations/{d['ID']}"]
            for path in lists:
                stubs = {s["ID"]: s for s in await _ok(await c.get(path))}
                healthy = stubs[first["ID"]]["DeploymentStatus"]
                assert (healthy["Healthy"], healthy["Canary"]) == (True, False), path
                assert healthy["Timestamp"] != "0001-01-01T00:00:00Z"
                assert healthy["ModifyIndex"] > 0
                assert stubs[second["ID"]]["DeploymentStatus"]["Healthy"] is False, path
                assert stubs[first["ID"]]["DesiredTransition"] == {
                    "Migrate": None, "Reschedule": None, "ForceReschedule": None,
                    "NoShutdownDelay": None}, path
                assert stubs[first["ID"]]["TaskStates"]["t"]["State"] in ("pending", "running")
            # An allocation stop asks for a migration: the stub shows it.
            await _ok(await c.post(f"/v1/allocation/{first['ID']}/stop"))
            stubs = {s["ID"]: s for s in await _ok(await c.get("/v1/allocations"))}
            assert stubs[first["ID"]]["DesiredTransition"]["Migrate"] is True
            bare = await _ok(await c.get("/v1/allocations", params={"task_states": "false"}))
            assert len(bare) == 3
            assert all(s["TaskStates"] is None for s in bare)

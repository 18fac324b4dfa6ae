"""`yurt deployment list|status|promote|fail`, run as a user runs them (a real `yurt` process)
against an agent on a real socket; plus the table formatting (Nomad's columns)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import Running, mock_job, running_agent
from tests.cli_proc_support import yurt
from yurt.runtime.cli.deployfmt import groups_table, list_table

pytestmark = pytest.mark.slow


def job(env: str = "1", canary: int = 0) -> dict[str, Any]:
    doc = mock_job("web", 2)
    group = doc["Job"]["TaskGroups"][0]
    group["Update"] = {"MaxParallel": 1, "HealthCheck": "manual", "Canary": canary,
                       "AutoRevert": True}
    group["Tasks"][0]["Env"] = {"V": env}
    return doc


async def healthy(a: Running, deployment_id: str, alloc_ids: list[str]) -> None:
    r = await a.client.post(f"/v1/deployment/allocation-health/{deployment_id}", json={
        "DeploymentID": deployment_id, "HealthyAllocationIDs": alloc_ids})
    assert r.status_code == 200, r.text


async def test_list_status_promote_fail(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            out = await yurt(a.address, "deployment", "list")
            assert (out.returncode, out.stdout) == (0, b"No deployments found\n")
            await a.client.post("/v1/jobs", json=job())
            (d0,) = (await a.client.get("/v1/deployments")).json()
            allocs = (await a.client.get(f"/v1/deployment/allocations/{d0['ID']}")).json()
            await healthy(a, d0["ID"], [x["ID"] for x in allocs])
            await a.client.post("/v1/jobs", json=job("2", canary=1))
            d1 = (await a.client.get("/v1/job/web/deployment")).json()
            out = await yurt(a.address, "deployment", "list")
            assert out.returncode == 0, out.stderr
            lines = out.stdout.decode().splitlines()
            assert lines[0].split() == ["ID", "Job", "ID", "Job", "Version", "Status",
                                        "Description"]
            assert lines[2].startswith(d1["ID"][:8] + "  web")
            assert "Deployment is running but requires manual promotion" in lines[2]
            out = await yurt(a.address, "deployment", "status", d1["ID"][:6])
            assert out.returncode == 0, out.stderr
            text = out.stdout.decode()
            assert f"ID          = {d1['ID'][:8]}\n" in text
            assert "Deployed\nTask Group  Auto Revert  Promoted  Desired  Canaries" in text
            out = await yurt(a.address, "deployment", "status", "-json", d1["ID"])
            assert json.loads(out.stdout)["ID"] == d1["ID"]
            # The canary is not healthy yet: Nomad's refusal, exit 1.
            out = await yurt(a.address, "deployment", "promote", d1["ID"])
            assert out.returncode == 1
            assert b'Task group "g" has 0/1 healthy allocations' in out.stderr
            canary = (await a.client.get(f"/v1/deployment/{d1['ID']}")).json()[
                "TaskGroups"]["g"]["PlacedCanaries"]
            await healthy(a, d1["ID"], canary)
            out = await yurt(a.address, "deployment", "promote", d1["ID"])
            assert out.returncode == 0, out.stderr
            assert out.stdout.startswith(b"Evaluation ID: ")
            promoted = (await a.client.get(f"/v1/deployment/{d1['ID']}")).json()
            assert promoted["TaskGroups"]["g"]["Promoted"] is True
            out = await yurt(a.address, "deployment", "fail", d1["ID"][:8])
            assert out.returncode == 0, out.stderr
            assert out.stdout.decode().startswith(
                f'Deployment "{d1["ID"]}" failed. Auto-reverted to job version 0.\n')
            out = await yurt(a.address, "deployment", "fail", d1["ID"])
            assert out.returncode == 1
            assert b"can't fail terminal deployment" in out.stderr
            missing = await yurt(a.address, "deployment", "status", "ffffffff")
            assert missing.returncode == 1
            assert (await yurt(a.address, "deployment", "status")).returncode == 2


def test_tables_follow_nomads_columns() -> None:
    d = {"ID": "0123456789", "JobID": "web", "JobVersion": 3, "Status": "running",
         "StatusDescription": "Deployment is running"}
    assert list_table([d], 8) == (
        "ID        Job ID  Job Version  Status   Description\n"
        "01234567  web     3            running  Deployment is running")
    state = {"AutoRevert": False, "DesiredCanaries": 0, "ProgressDeadline": 0,
             "Promoted": False, "DesiredTotal": 3, "PlacedAllocs": 1, "HealthyAllocs": 0,
             "UnhealthyAllocs": 0, "RequireProgressBy": "0001-01-01T00:00:00Z"}
    assert groups_table({"g": state}) == (
        "Task Group  Desired  Placed  Healthy  Unhealthy\n"
        "g           3        1       0        0")
    with_deadline = {**state, "ProgressDeadline": 600, "RequireProgressBy":
                     "2026-12-01T06:30:00Z"}
    assert groups_table({"g": with_deadline}).splitlines()[1].endswith(
        "0          2026-12-01T06:30:00Z")

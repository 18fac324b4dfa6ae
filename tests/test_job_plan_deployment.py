"""`PUT /v1/job/:id/plan` for a job with an `update` block, over a real socket (layer 2): the
dry run sees the job's latest deployment as the scheduler does, and reports canaries
(Nomad's `DesiredTGUpdates.Canary` and the diff's "canary" update)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import Running, mock_job, running_agent

YURT = str(Path(sys.executable).parent / "yurt")


def job(env: str, canary: int = 0) -> dict[str, Any]:
    doc = mock_job("web", 3)
    group = doc["Job"]["TaskGroups"][0]
    # Manual health: nothing turns healthy by itself, so a rollout stays where it is.
    group["Update"] = {"MaxParallel": 1, "HealthCheck": "manual", "Canary": canary}
    group["Tasks"][0]["Env"] = {"V": env}
    return doc


async def _ok(r: httpx2.Response) -> Any:
    assert r.status_code == 200, (r.request.url, r.status_code, r.text)
    return r.json()


async def _healthy(a: Running) -> None:
    d = await _ok(await a.client.get("/v1/job/web/deployment"))
    allocs = await _ok(await a.client.get(f"/v1/deployment/allocations/{d['ID']}"))
    await _ok(await a.client.post(f"/v1/deployment/allocation-health/{d['ID']}", json={
        "DeploymentID": d["ID"], "HealthyAllocationIDs": [x["ID"] for x in allocs]}))


async def _plan(a: Running, doc: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = await _ok(await a.client.put(
        "/v1/job/web/plan", json={"Job": doc["Job"], "Diff": True}))
    return answer


async def test_plan_follows_the_active_rollout(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            await _ok(await a.client.post("/v1/jobs", json=job("1")))
            await _healthy(a)
            await _ok(await a.client.post("/v1/jobs", json=job("2")))
            # One replacement placed (max_parallel 1), not yet healthy: planning the same
            # version again changes nothing more until it is.
            updates = (await _plan(a, job("2")))["Annotations"]["DesiredTGUpdates"]["g"]
            assert (updates["DestructiveUpdate"], updates["Place"], updates["Stop"]) \
                == (0, 0, 0), updates
            assert updates["Ignore"] == 3, updates


async def test_plan_reports_canaries(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            await _ok(await a.client.post("/v1/jobs", json=job("1")))
            await _healthy(a)
            answer = await _plan(a, job("2", canary=1))
            updates = answer["Annotations"]["DesiredTGUpdates"]["g"]
            assert (updates["Canary"], updates["Ignore"], updates["DestructiveUpdate"]) \
                == (1, 3, 0), updates
            assert answer["Diff"]["TaskGroups"][0]["Updates"] == {"canary": 1, "ignore": 3}
            # A dry run: no deployment and no allocation was made.
            assert len(await _ok(await a.client.get("/v1/job/web/allocations"))) == 3
            assert len(await _ok(await a.client.get("/v1/job/web/deployments"))) == 1


async def test_cli_plan_shows_canaries(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            await _ok(await a.client.post("/v1/jobs", json=job("1")))
            await _healthy(a)
            spec = tmp_path / "web.json"
            spec.write_text(json.dumps(job("2", canary=1)))
            out = await trio.run_process(
                [YURT, "job", "plan", str(spec)], capture_stdout=True, capture_stderr=True,
                check=False, env={**os.environ, "YURT_ADDR": a.address})
            text = out.stdout.decode()
            assert 'Task Group: "g" (1 canary, 3 ignore)' in text, (text, out.stderr)
            assert out.returncode == 1, out.stderr  # Nomad counts canaries as changes

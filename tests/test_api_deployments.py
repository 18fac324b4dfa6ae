"""Deployments as yurt has them: none yet (layer 2, real socket). Nomad's answers for jobs
without an `update` block: empty lists, a `null` latest deployment, an unknown ID 404."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.agent_support import mock_job, running_agent


async def test_no_job_has_a_deployment(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.post("/v1/jobs", json=mock_job("web"))).status_code == 200
            listed = await c.get("/v1/deployments")
            assert (listed.status_code, listed.json()) == (200, [])
            assert "X-Nomad-Index" in listed.headers
            assert (await c.get("/v1/job/web/deployments")).json() == []
            latest = await c.get("/v1/job/web/deployment")
            assert (latest.status_code, latest.json()) == (200, None)
            assert (await c.get("/v1/deployment/nope")).status_code == 404
            # As Nomad's: a job's deployments are not looked up by the job.
            assert (await c.get("/v1/job/nope/deployments")).json() == []
            assert (await c.get("/v1/job/nope/deployment")).json() is None
            assert (await c.post("/v1/deployments")).status_code == 405
            assert (await c.delete("/v1/job/web/deployments")).status_code == 405

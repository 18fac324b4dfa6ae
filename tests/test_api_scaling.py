"""Scaling policies over a real agent (layer 3): a group's `scaling` block is served by
/v1/scaling/policies and /v1/scaling/policy/:id in Nomad's shapes, and `job scale` keeps the
count within its min and max with Nomad's 400s (nomad/job_endpoint.go `Scale`)."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.agent_support import mock_job, running_agent, stop_job


def _scaled_job(job_id: str) -> dict[str, object]:
    body = mock_job(job_id, count=2)
    group = body["Job"]["TaskGroups"][0]  # type: ignore[index]
    group["Scaling"] = {"Min": 1, "Max": 3, "Policy": {"cooldown": "1m"}}
    return body


async def test_policies_are_listed_read_and_bound_scale(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.post("/v1/jobs", json=_scaled_job("web"))).status_code == 200
            assert (await c.post("/v1/jobs", json=mock_job("plain"))).status_code == 200
            (stub,) = (await c.get("/v1/scaling/policies")).json()
            assert stub["Target"] == {"Namespace": "default", "Job": "web", "Group": "g"}
            assert (stub["Type"], stub["Enabled"]) == ("horizontal", True)
            assert (await c.get("/v1/scaling/policies?job=plain")).json() == []
            assert (await c.get("/v1/scaling/policies?type=vertical_cpu")).json() == []
            policy = (await c.get(f"/v1/scaling/policy/{stub['ID']}")).json()
            assert (policy["Min"], policy["Max"], policy["Policy"]) == (1, 3, {"cooldown": "1m"})
            assert policy["ID"] == stub["ID"]
            other_ns = await c.get(f"/v1/scaling/policy/{stub['ID']}?namespace=elsewhere")
            assert other_ns.status_code == 404

            def scale(count: int) -> dict[str, object]:
                return {"Count": count, "Target": {"Group": "g"}}

            high = await c.post("/v1/job/web/scale", json=scale(4))
            assert (high.status_code, high.text) == (
                400, "group count was greater than scaling policy maximum: 4 > 3")
            low = await c.post("/v1/job/web/scale", json=scale(0))
            assert (low.status_code, low.text) == (
                400, "group count was less than scaling policy minimum: 0 < 1")
            assert (await c.post("/v1/job/web/scale", json=scale(3))).status_code == 200
            job = (await c.get("/v1/job/web")).json()
            assert job["TaskGroups"][0]["Count"] == 3
            # The policy keeps its ID across the job's versions.
            again = (await c.get("/v1/scaling/policies")).json()
            assert [s["ID"] for s in again] == [stub["ID"]]
            await stop_job(c, "web")
            await stop_job(c, "plain")

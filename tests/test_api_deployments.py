"""Deployments over HTTP (layer 2, a real agent on a real socket): the lists, a deployment by
ID or prefix, a job's deployments and latest one, its allocations; the actions (health set by
hand, fail, pause/resume, promote, unblock) with Nomad's answers and Nomad's error texts (400
for a bad request or a refusal, 404 for an unknown deployment); events on the
`Deployment` topic. Jobs without an `update` block have none, as in Nomad's answers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import mock_job, running_agent

UPDATE = {"MaxParallel": 1, "MinHealthyTime": 1_000_000_000, "HealthyDeadline": 60 * 10**9,
          "ProgressDeadline": 120 * 10**9, "HealthCheck": "manual"}


def job_with_update(job_id: str, count: int = 2, **update: Any) -> dict[str, Any]:
    doc = mock_job(job_id, count)
    doc["Job"]["TaskGroups"][0]["Update"] = {**UPDATE, **update}
    return doc


async def until(client: httpx2.AsyncClient, path: str, key: str, value: Any) -> Any:
    while True:
        body = (await client.get(path)).json()
        if body is not None and body.get(key) == value:
            return body
        await trio.sleep(0.05)


async def second_version(client: httpx2.AsyncClient, **update: Any) -> Any:
    """Roll job "web" out with `update` (its deployment completed by health set by hand),
    register a changed version of it; the deployment of that version."""
    first = job_with_update("web", **update)
    await client.post("/v1/jobs", json=first)
    (d0,) = (await client.get("/v1/deployments")).json()
    allocs = (await client.get(f"/v1/deployment/allocations/{d0['ID']}")).json()
    await client.post(f"/v1/deployment/allocation-health/{d0['ID']}", json={
        "DeploymentID": d0["ID"], "HealthyAllocationIDs": [x["ID"] for x in allocs]})
    await until(client, f"/v1/deployment/{d0['ID']}", "Status", "successful")
    second = copy.deepcopy(first)
    second["Job"]["TaskGroups"][0]["Tasks"][0]["Env"] = {"V": "2"}
    await client.post("/v1/jobs", json=second)
    return (await client.get("/v1/job/web/deployment")).json()


async def test_no_job_without_update_has_a_deployment(tmp_path: Path) -> None:
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


async def test_a_deployment_is_listed_completed_by_health_and_then_terminal(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            async with c.stream("GET", "/v1/event/stream",
                                params={"topic": "Deployment"}) as events:
                lines = events.aiter_lines()
                assert (await c.post("/v1/jobs", json=job_with_update("web"))).status_code \
                    == 200
                (d,) = (await c.get("/v1/deployments")).json()
                assert (d["JobID"], d["JobVersion"], d["Status"], d["StatusDescription"]) == (
                    "web", 0, "running", "Deployment is running")
                state = d["TaskGroups"]["g"]
                assert (state["DesiredTotal"], state["PlacedAllocs"], state["HealthyAllocs"],
                        state["Promoted"], state["PlacedCanaries"]) == (2, 2, 0, False, [])
                assert (await c.get("/v1/job/web/deployment")).json()["ID"] == d["ID"]
                assert [x["ID"] for x in (await c.get("/v1/job/web/deployments")).json()] \
                    == [d["ID"]]
                assert (await c.get(f"/v1/deployment/{d['ID'][:8]}")).json()["ID"] == d["ID"]
                allocs = (await c.get(f"/v1/deployment/allocations/{d['ID']}")).json()
                assert len(allocs) == 2
                full = [(await c.get(f"/v1/allocation/{x['ID']}")).json() for x in allocs]
                assert {x["DeploymentID"] for x in full} == {d["ID"]}
                line = "{}"
                while line == "{}":
                    line = await lines.__anext__()
                record = json.loads(line)
                assert [(e["Topic"], e["Type"], e["Key"]) for e in record["Events"]] == [
                    ("Deployment", "DeploymentStatusUpdate", d["ID"])]

                # Re-registering the unchanged job makes no deployment.
                await c.post("/v1/jobs", json=job_with_update("web"))
                assert len((await c.get("/v1/deployments")).json()) == 1

                r = await c.post(f"/v1/deployment/allocation-health/{d['ID']}", json={
                    "DeploymentID": d["ID"], "HealthyAllocationIDs": [x["ID"] for x in allocs]})
                assert r.status_code == 200, r.text
                answer = r.json()
                assert set(answer) == {"EvalID", "EvalCreateIndex", "DeploymentModifyIndex",
                                       "RevertedJobVersion", "Index"}
                assert answer["EvalID"]
                assert answer["RevertedJobVersion"] is None
                done = await until(c, f"/v1/deployment/{d['ID']}", "Status", "successful")
                assert done["StatusDescription"] == "Deployment completed successfully"
                assert done["TaskGroups"]["g"]["HealthyAllocs"] == 2
                assert (await c.get("/v1/job/web")).json()["Stable"] is True
                ev = (await c.get(f"/v1/evaluation/{answer['EvalID']}")).json()
                assert (ev["TriggeredBy"], ev["DeploymentID"]) == ("deployment-watcher",
                                                                   d["ID"])
                types = []
                while "DeploymentAllocHealth" not in types:
                    line = await lines.__anext__()
                    if line != "{}":
                        types += [e["Type"] for e in json.loads(line)["Events"]]

            did = d["ID"]
            refused = {
                f"/v1/deployment/fail/{did}": ({}, "can't fail terminal deployment"),
                f"/v1/deployment/pause/{did}": ({"DeploymentID": did, "Pause": True},
                                                "can't pause terminal deployment"),
                f"/v1/deployment/promote/{did}": ({"DeploymentID": did, "All": True},
                                                  "can't promote terminal deployment"),
                f"/v1/deployment/allocation-health/{did}": (
                    {"DeploymentID": did, "HealthyAllocationIDs": [did]},
                    "can't set health of allocations for a terminal deployment"),
                f"/v1/deployment/unblock/{did}": ({"DeploymentID": did},
                                                  "can't unblock terminal deployment"),
            }
            for path, (body, text) in refused.items():
                r = await c.post(path, json=body)
                assert (r.status_code, r.text) == (400, text), path
            resume = await c.put(f"/v1/deployment/pause/{did}",
                                 json={"DeploymentID": did, "Pause": False})
            assert (resume.status_code, resume.text) == (400, "can't resume terminal deployment")


async def test_bad_requests_and_unknown_deployments(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=job_with_update("web"))
            (d,) = (await c.get("/v1/deployments")).json()
            did = d["ID"]
            for action in ("pause", "promote", "unblock", "allocation-health"):
                r = await c.post(f"/v1/deployment/{action}/{did}", json={"DeploymentID": "x"})
                assert (r.status_code, r.text) == (400, "Deployment ID does not match")
                r = await c.post(f"/v1/deployment/{action}/{did}", json={})
                assert (r.status_code, r.text) == (400, "DeploymentID must be specified")
                r = await c.post(f"/v1/deployment/{action}/nope", json={"DeploymentID": "nope"})
                assert (r.status_code, r.text) == (404, "deployment not found")
            r = await c.post("/v1/deployment/fail/nope")
            assert (r.status_code, r.text) == (404, "deployment not found")
            r = await c.post(f"/v1/deployment/allocation-health/{did}",
                             json={"DeploymentID": did, "HealthyAllocationIDs": ["nope"]})
            assert (r.status_code, r.text) == (400, 'unknown alloc "nope"')
            await c.post("/v1/jobs", json=mock_job("other"))
            other = (await c.get("/v1/job/other/allocations")).json()[0]["ID"]
            r = await c.post(f"/v1/deployment/allocation-health/{did}",
                             json={"DeploymentID": did, "UnhealthyAllocationIDs": [other]})
            assert (r.status_code, r.text) == (
                400, f'alloc "{other}" is not part of deployment "{did}"')
            r = await c.post(f"/v1/deployment/promote/{did}",
                             json={"DeploymentID": did, "All": True})
            assert r.status_code == 200  # nothing to promote: no canaries
            r = await c.post(f"/v1/deployment/unblock/{did}", json={"DeploymentID": did})
            assert (r.status_code, r.text) == (400, "can't unblock running deployment")
            assert (await c.get(f"/v1/deployment/allocations/{did}")).status_code == 200
            assert (await c.delete(f"/v1/deployment/fail/{did}")).status_code == 405


async def test_pause_resume_and_fail_with_rollback(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            d1 = await second_version(c, AutoRevert=True)
            assert d1["JobVersion"] == 1
            did = d1["ID"]
            r = await c.put(f"/v1/deployment/pause/{did}", json={"DeploymentID": did,
                                                                 "Pause": True})
            assert r.status_code == 200
            assert r.json()["EvalID"] == ""
            paused = (await c.get(f"/v1/deployment/{did}")).json()
            assert (paused["Status"], paused["StatusDescription"]) == (
                "paused", "Deployment is paused")
            assert (await c.get("/v1/job/web")).json()["Status"] == "running"
            r = await c.put(f"/v1/deployment/pause/{did}", json={"DeploymentID": did,
                                                                 "Pause": False})
            assert r.json()["EvalID"]
            assert (await c.get(f"/v1/deployment/{did}")).json()["Status"] == "running"
            r = await c.post(f"/v1/deployment/fail/{did}")
            assert r.status_code == 200, r.text
            assert r.json()["RevertedJobVersion"] == 0
            failed = (await c.get(f"/v1/deployment/{did}")).json()
            assert (failed["Status"], failed["StatusDescription"]) == (
                "failed", "Deployment marked as failed - rolling back to job version 0")
            job = (await c.get("/v1/job/web")).json()
            assert job["Version"] == 2
            assert job["TaskGroups"][0]["Tasks"][0]["Env"] in (None, {})
            # The old deployment stays listed; the newest is the job's latest.
            listed = (await c.get("/v1/deployments")).json()
            assert [x["JobVersion"] for x in listed] == [0, 1, 2]
            assert [x["JobVersion"] for x in
                    (await c.get("/v1/deployments", params={"reverse": "true"})).json()] \
                == [2, 1, 0]
            assert (await c.get("/v1/job/web/deployment")).json()["JobVersion"] == 2


async def test_promote_canaries_over_http(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            d1 = await second_version(c, Canary=1)
            assert d1["StatusDescription"] == \
                "Deployment is running but requires manual promotion"
            (canary,) = d1["TaskGroups"]["g"]["PlacedCanaries"]
            assert (await c.get(f"/v1/allocation/{canary}")).json()["DeploymentStatus"][
                "Canary"] is True
            live = [x for x in (await c.get("/v1/job/web/allocations")).json()
                    if x["DesiredStatus"] == "run"]
            assert len(live) == 3  # the canary beside the two old ones
            did = d1["ID"]
            r = await c.post(f"/v1/deployment/promote/{did}",
                             json={"DeploymentID": did, "All": True})
            assert (r.status_code, r.text) == (
                400, '1 error occurred:\n\t* Task group "g" has 0/1 healthy allocations\n\n')
            await c.post(f"/v1/deployment/allocation-health/{did}", json={
                "DeploymentID": did, "HealthyAllocationIDs": [canary]})
            async with c.stream("GET", "/v1/event/stream",
                                params={"topic": "Deployment", "index": "1"}) as events:
                r = await c.post(f"/v1/deployment/promote/{did}",
                                 json={"DeploymentID": did, "Groups": ["g"]})
                assert r.status_code == 200, r.text
                assert r.json()["EvalID"]
                types: list[str] = []
                lines = events.aiter_lines()
                while "DeploymentPromotion" not in types:
                    line = await lines.__anext__()
                    if line != "{}":
                        types += [e["Type"] for e in json.loads(line)["Events"]]
            promoted = (await c.get(f"/v1/deployment/{did}")).json()
            assert promoted["TaskGroups"]["g"]["Promoted"] is True
            assert promoted["StatusDescription"] == "Deployment is running"
            # Promoted, the canary is one of the group's allocations like any other.
            status = (await c.get(f"/v1/allocation/{canary}")).json()["DeploymentStatus"]
            assert (status["Canary"], status["Healthy"]) == (False, True)
            # The canary took its name over; one old one is replaced next.
            live = [x for x in (await c.get("/v1/job/web/allocations")).json()
                    if x["DesiredStatus"] == "run"]
            assert len(live) == 2
            assert canary in {x["ID"] for x in live}


async def test_health_set_by_hand_auto_promotes(tmp_path: Path) -> None:
    """With health_check "manual", the health the API sets is what auto_promote waits for."""
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            d1 = await second_version(c, Canary=1, AutoPromote=True)
            assert d1["StatusDescription"] == \
                "Deployment is running pending automatic promotion"
            (canary,) = d1["TaskGroups"]["g"]["PlacedCanaries"]
            r = await c.post(f"/v1/deployment/allocation-health/{d1['ID']}", json={
                "DeploymentID": d1["ID"], "HealthyAllocationIDs": [canary]})
            assert r.status_code == 200, r.text
            # Decided before the answer, under the same lock.
            promoted = (await c.get(f"/v1/deployment/{d1['ID']}")).json()
            assert promoted["TaskGroups"]["g"]["Promoted"] is True
            assert promoted["StatusDescription"] == "Deployment is running"

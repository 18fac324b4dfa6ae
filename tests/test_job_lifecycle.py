"""A job's lifecycle over a real socket (layer 2): status, versions with diffs, revert,
stable, summary, plan (changes nothing), validate, scale, purge; and their errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import Running, mock_job, running_agent


def batch_job(job_id: str, run_for: str) -> dict[str, Any]:
    body = mock_job(job_id)
    body["Job"]["Type"] = "batch"
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["run_for"] = run_for
    return body


def with_priority(body: dict[str, Any], priority: int) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["Job"]["Priority"] = priority
    return body


async def _ok(r: httpx2.Response) -> Any:
    assert r.status_code == 200, (r.request.url, r.status_code, r.text)
    return r.json()


async def _until_status(a: Running, job_id: str, status: str) -> None:
    while True:
        changed = a.agent.server.changed  # before reading: no change slips by
        if (await _ok(await a.client.get(f"/v1/job/{job_id}")))["Status"] == status:
            return
        await changed.wait()


async def test_job_status_follows_nomads_rules(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await _ok(await c.post("/v1/jobs", json=batch_job("once", "0.2s")))
            # A batch job whose allocations are all terminal is dead.
            await _until_status(a, "once", "dead")
            (alloc,) = await _ok(await c.get("/v1/job/once/allocations"))
            assert alloc["ClientStatus"] == "complete"
            stub = [j for j in await _ok(await c.get("/v1/jobs")) if j["ID"] == "once"]
            assert stub[0]["Status"] == "dead"
            assert stub[0]["JobSummary"]["Summary"]["g"]["Complete"] == 1
            # The status change was published as Nomad publishes any job upsert.
            async with c.stream("GET", "/v1/event/stream",
                                params={"index": "1", "topic": "Job:once"}) as response:
                statuses = []
                async for line in response.aiter_lines():
                    if line == "{}":
                        continue
                    event = json.loads(line)["Events"][0]
                    assert event["Type"] == "JobRegistered"
                    statuses.append(event["Payload"]["Job"]["Status"])
                    if statuses[-1] == "dead":
                        break
            assert statuses[0] == "pending"
            await _ok(await c.post("/v1/jobs", json=mock_job("svc")))
            await _until_status(a, "svc", "running")


async def test_versions_diffs_revert_and_stable(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            v0 = mock_job("web")
            await _ok(await c.post("/v1/jobs", json=v0))
            await _ok(await c.post("/v1/jobs", json=with_priority(v0, 70)))
            same = await _ok(await c.post("/v1/jobs", json=with_priority(v0, 70)))
            versions = await _ok(await c.get("/v1/job/web/versions"))
            assert [v["Version"] for v in versions["Versions"]] == [1, 0]
            assert versions["Diffs"] is None
            assert same["JobModifyIndex"] == versions["Versions"][0]["JobModifyIndex"]
            diffs = (await _ok(await c.get("/v1/job/web/versions",
                                           params={"diffs": "true"})))["Diffs"]
            (diff,) = diffs
            assert (diff["Type"], diff["ID"]) == ("Edited", "web")
            assert diff["Fields"] == [{"Type": "Edited", "Name": "Priority", "Old": "50",
                                       "New": "70", "Annotations": None}]
            assert diff["TaskGroups"][0]["Type"] == "None"
            # Revert to version 0: a new version 2 with version 0's spec.
            reverted = await _ok(await c.put("/v1/job/web/revert",
                                             json={"JobID": "web", "JobVersion": 0,
                                                   "EnforcePriorVersion": 1}))
            ev = await _ok(await c.get(f"/v1/evaluation/{reverted['EvalID']}"))
            assert ev["Status"] == "complete"
            job = await _ok(await c.get("/v1/job/web"))
            assert (job["Version"], job["Priority"]) == (2, 50)
            assert (await c.put("/v1/job/web/revert", json={"JobVersion": 2})).status_code \
                == 400  # the current version
            wrong = await c.put("/v1/job/web/revert",
                                json={"JobVersion": 0, "EnforcePriorVersion": 1})
            assert wrong.status_code == 400
            assert "does not match current version 2" in wrong.text
            assert (await c.put("/v1/job/web/revert", json={"JobVersion": 9})).status_code \
                == 400
            assert (await c.put("/v1/job/web/revert", json={})).status_code == 400
            assert (await c.put("/v1/job/nope/revert", json={"JobVersion": 0})).status_code \
                == 404
            marked = await _ok(await c.put("/v1/job/web/stable",
                                           json={"JobVersion": 2, "Stable": True}))
            assert marked["Index"] > reverted["EvalCreateIndex"]
            assert (await _ok(await c.get("/v1/job/web")))["Stable"] is True
            history = (await _ok(await c.get("/v1/job/web/versions")))["Versions"]
            assert [(v["Version"], v["Stable"]) for v in history] == [
                (2, True), (1, False), (0, False)]
            assert (await c.put("/v1/job/web/stable",
                                json={"JobVersion": 7, "Stable": True})).status_code == 404
            assert (await c.get("/v1/job/web/revert")).status_code == 405
            assert (await c.get("/v1/job/nope/versions")).status_code == 404


async def test_versions_are_bounded_like_nomads(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            for priority in range(40, 49):
                await _ok(await c.post("/v1/jobs", json=with_priority(mock_job("w"),
                                                                      priority)))
            versions = (await _ok(await c.get("/v1/job/w/versions")))["Versions"]
            assert [v["Version"] for v in versions] == [8, 7, 6, 5, 4, 3]


async def test_plan_changes_nothing_and_explains(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await _ok(await c.post("/v1/jobs", json=mock_job("web")))
            before = await c.get("/v1/jobs")
            scaled = mock_job("web", count=3)
            answer = await _ok(await c.put("/v1/job/web/plan",
                                           json={"Job": scaled["Job"], "Diff": True}))
            updates = answer["Annotations"]["DesiredTGUpdates"]["g"]
            # A count change is a new version: the running one is updated in place.
            assert (updates["Place"], updates["InPlaceUpdate"], updates["Ignore"],
                    updates["Stop"]) == (2, 1, 0, 0)
            assert answer["FailedTGAllocs"] is None
            assert answer["Diff"]["TaskGroups"][0]["Updates"] == {"create": 2,
                                                              "in-place update": 1}
            assert answer["Diff"]["TaskGroups"][0]["Fields"][0]["Name"] == "Count"
            job = await _ok(await c.get("/v1/job/web"))
            assert answer["JobModifyIndex"] == job["JobModifyIndex"]
            huge = mock_job("web")
            huge["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"] = 1 << 30
            failing = await _ok(await c.put("/v1/job/web/plan", json=huge))
            assert failing["FailedTGAllocs"]["g"]["DimensionExhausted"] == {"memory": 1}
            assert failing["Diff"] is None
            # As Nomad's reconciler: what the plan meant to do, counted before its placement
            # failed (the failure is beside it).
            assert failing["Annotations"]["DesiredTGUpdates"]["g"]["DestructiveUpdate"] == 1
            # Nothing changed: same index, same allocations, same version.
            after = await c.get("/v1/jobs")
            assert after.headers["X-Nomad-Index"] == before.headers["X-Nomad-Index"]
            assert len(await _ok(await c.get("/v1/job/web/allocations"))) == 1
            assert (await _ok(await c.get("/v1/job/web")))["Version"] == 0
            new = await _ok(await c.post("/v1/job/new/plan", json=mock_job("new")))
            assert new["Annotations"]["DesiredTGUpdates"]["g"]["Place"] == 1
            assert new["JobModifyIndex"] == 0
            assert (await c.get("/v1/job/new")).status_code == 404
            assert (await c.put("/v1/job/other/plan", json=mock_job("web"))).status_code \
                == 400
            assert (await c.put("/v1/job/web/plan", json={})).status_code == 400
            assert (await c.get("/v1/job/web/plan")).status_code == 405


async def test_validate_summary_scale_and_purge(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            valid = await _ok(await c.put("/v1/validate/job", json=mock_job("v")))
            assert (valid["ValidationErrors"], valid["Error"]) == (None, "")
            bad = mock_job("v")
            bad["Job"]["Type"] = "nonsense"
            invalid = await _ok(await c.post("/v1/validate/job", json=bad))
            assert invalid["Error"]
            assert invalid["ValidationErrors"] == [invalid["Error"]]
            assert (await c.put("/v1/validate/job", json={})).status_code == 400
            assert (await c.get("/v1/validate/job")).status_code == 405

            await _ok(await c.post("/v1/jobs", json=mock_job("web", count=2)))
            summary = await _ok(await c.get("/v1/job/web/summary"))
            counts = summary["Summary"]["g"]
            assert set(counts) == {"Queued", "Complete", "Failed", "Running", "Starting",
                                   "Lost", "Unknown"}
            assert counts["Starting"] + counts["Running"] == 2
            assert summary["Children"] == {"Pending": 0, "Running": 0, "Dead": 0}
            assert (await c.get("/v1/job/nope/summary")).status_code == 404

            status = await _ok(await c.get("/v1/job/web/scale"))
            assert status["TaskGroups"]["g"]["Desired"] == 2
            assert status["TaskGroups"]["g"]["Placed"] == 2
            assert status["JobStopped"] is False
            scaled = await _ok(await c.post("/v1/job/web/scale", json={
                "Count": 3, "Target": {"Group": "g"}, "Message": "more"}))
            ev = await _ok(await c.get(f"/v1/evaluation/{scaled['EvalID']}"))
            assert ev["TriggeredBy"] == "job-scaling"
            status = await _ok(await c.get("/v1/job/web/scale"))
            group = status["TaskGroups"]["g"]
            assert (group["Desired"], group["Placed"]) == (3, 3)
            (event,) = group["Events"]
            assert (event["Count"], event["PreviousCount"], event["Message"],
                    event["EvalID"]) == (3, 2, "more", scaled["EvalID"])
            assert (await _ok(await c.get("/v1/job/web")))["Version"] == 1
            for body in ({"Count": 1}, {"Count": -1, "Target": {"Group": "g"}},
                         {"Count": 1, "Target": {"Group": "nope"}},
                         {"Count": "x", "Target": {"Group": "g"}},
                         {"Count": 50_001, "Target": {"Group": "g"}}):  # job_max_count
                r = await c.post("/v1/job/web/scale", json=body)
                assert r.status_code == 400, body
            assert (await c.get("/v1/job/nope/scale")).status_code == 404
            assert (await c.post("/v1/job/nope/scale", json={
                "Count": 1, "Target": {"Group": "g"}})).status_code == 404
            assert (await c.delete("/v1/job/web/scale")).status_code == 405

            purged = await _ok(await c.delete("/v1/job/web", params={"purge": "true"}))
            gone = await _ok(await c.get(f"/v1/evaluation/{purged['EvalID']}"))
            assert gone["TriggeredBy"] == "job-deregister"
            assert (await c.get("/v1/job/web")).status_code == 404
            assert (await c.get("/v1/job/web/versions")).status_code == 404
            assert "web" not in [j["ID"] for j in await _ok(await c.get("/v1/jobs"))]
            assert (await c.delete("/v1/job/web")).status_code == 404

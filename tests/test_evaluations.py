"""Evaluations over a real socket (layer 2): register, deregister and evaluate answer an EvalID
that can be read; a group that does not fit leaves a blocked evaluation; the endpoints' errors;
the Evaluation topic on the event stream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import mock_job, running_agent


def huge_job(job_id: str) -> dict[str, Any]:
    """A job no node has the memory for."""
    body = mock_job(job_id)
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"] = 1 << 30
    return body


async def _get(c: httpx2.AsyncClient, path: str, **params: str) -> Any:
    r = await c.get(path, params=params)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


async def test_register_deregister_and_evaluate_answer_readable_evaluations(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            reg = (await c.post("/v1/jobs", json=mock_job("web"))).json()
            ev = await _get(c, f"/v1/evaluation/{reg['EvalID']}")
            assert (ev["ID"], ev["JobID"], ev["Type"], ev["TriggeredBy"], ev["Status"]) == (
                reg["EvalID"], "web", "service", "job-register", "complete")
            assert ev["JobModifyIndex"] == reg["JobModifyIndex"]
            assert ev["CreateIndex"] == reg["EvalCreateIndex"] < ev["ModifyIndex"]
            assert (ev["FailedTGAllocs"], ev["BlockedEval"]) == (None, "")
            assert ev["QueuedAllocations"] == {"g": 0}
            (placed,) = await _get(c, f"/v1/evaluation/{reg['EvalID']}/allocations")
            assert (placed["EvalID"], placed["JobID"]) == (reg["EvalID"], "web")
            assert (await _get(c, f"/v1/evaluation/{reg['EvalID'][:8]}"))["ID"] == ev["ID"]
            # Registering it unchanged is still an evaluation (as Nomad's), which does nothing.
            same = (await c.post("/v1/jobs", json=mock_job("web"))).json()
            assert same["JobModifyIndex"] == reg["JobModifyIndex"]
            unchanged = await _get(c, f"/v1/evaluation/{same['EvalID']}")
            assert (unchanged["Status"], unchanged["JobID"]) == ("complete", "web")
            assert await _get(c, f"/v1/evaluation/{same['EvalID']}/allocations") == []
            forced = (await c.put("/v1/job/web/evaluate", json={"JobID": "web"})).json()
            assert forced["EvalID"] not in ("", reg["EvalID"])
            again = await _get(c, f"/v1/evaluation/{forced['EvalID']}")
            assert (again["TriggeredBy"], again["Status"]) == ("job-register", "complete")
            # Nothing new to place: the running allocation is kept.
            assert await _get(c, f"/v1/evaluation/{forced['EvalID']}/allocations") == []
            stop = (await c.delete("/v1/job/web")).json()
            gone = await _get(c, f"/v1/evaluation/{stop['EvalID']}")
            assert (gone["TriggeredBy"], gone["Status"]) == ("job-deregister", "complete")
            ids = [e["ID"] for e in await _get(c, "/v1/job/web/evaluations")]
            assert ids == [reg["EvalID"], same["EvalID"], forced["EvalID"], stop["EvalID"]]
            listed = [e["ID"] for e in await _get(c, "/v1/evaluations", job="web")]
            assert listed == ids
            assert [e["ID"] for e in await _get(c, "/v1/evaluations",
                                                prefix=stop["EvalID"][:6])] == [stop["EvalID"]]
            assert [e["ID"] for e in await _get(c, "/v1/evaluations", job="nope")] == []
            assert (await _get(c, "/v1/job/web"))["Status"] == "dead"


async def test_a_group_that_does_not_fit_leaves_a_blocked_evaluation(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            reg = (await c.post("/v1/jobs", json=huge_job("big"))).json()
            assert "not placed" in reg["Warnings"]
            ev = await _get(c, f"/v1/evaluation/{reg['EvalID']}")
            assert ev["Status"] == "complete"
            metric = ev["FailedTGAllocs"]["g"]
            assert metric["DimensionExhausted"] == {"memory": 1}
            assert (metric["NodesEvaluated"], metric["NodesExhausted"]) == (1, 1)
            assert metric["CoalescedFailures"] == 0
            assert ev["QueuedAllocations"] == {"g": 1}
            blocked = await _get(c, f"/v1/evaluation/{ev['BlockedEval']}")
            assert (blocked["Status"], blocked["TriggeredBy"], blocked["PreviousEval"]) == (
                "blocked", "queued-allocs", ev["ID"])
            assert [e["ID"] for e in await _get(c, "/v1/evaluations", status="blocked")] == [
                blocked["ID"]]
            assert (await _get(c, "/v1/job/big"))["Status"] == "pending"
            # A second evaluation that fails too replaces the blocked one: one per job.
            forced = (await c.post("/v1/job/big/evaluate")).json()
            second = await _get(c, f"/v1/evaluation/{forced['EvalID']}")
            assert second["BlockedEval"] not in ("", blocked["ID"])
            assert (await _get(c, f"/v1/evaluation/{blocked['ID']}"))["Status"] == "canceled"
            assert len(await _get(c, "/v1/evaluations", status="blocked")) == 1


async def test_evaluation_endpoints_errors(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=mock_job("web"))
            for path in ("/v1/evaluation/0b5e0000-0000-0000-0000-000000000000",
                         "/v1/evaluation/0b5e0000-0000-0000-0000-000000000000/allocations"):
                r = await c.get(path)
                assert r.status_code == 404, path
            # Nomad's job_endpoint.go `Evaluations`: an unknown job has none, not an error.
            nope = await c.get("/v1/job/nope/evaluations")
            assert (nope.status_code, nope.json()) == (200, [])
            assert (await c.put("/v1/job/nope/evaluate")).status_code == 404
            assert (await c.get("/v1/job/web/evaluate")).status_code == 405
            assert (await c.post("/v1/evaluations")).status_code == 405
            assert (await c.post("/v1/evaluation/x")).status_code == 405
            mismatch = await c.put("/v1/job/web/evaluate", json={"JobID": "other"})
            assert mismatch.status_code == 400
            assert (await c.put("/v1/job/web/evaluate", content=b"[1]")).status_code == 400
            bad_options = await c.put("/v1/job/web/evaluate", json={"EvalOptions": 3})
            assert bad_options.status_code == 400


async def test_evaluations_on_the_event_stream(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            async with c.stream("GET", "/v1/event/stream",
                                params={"topic": "Evaluation"}) as response:
                lines = response.aiter_lines()
                reg = (await c.post("/v1/jobs", json=mock_job("web"))).json()
                statuses: list[str] = []
                async for line in lines:
                    if line == "{}":
                        continue
                    record = json.loads(line)
                    for event in record["Events"]:
                        assert (event["Topic"], event["Type"]) == ("Evaluation",
                                                                   "EvaluationUpdated")
                        payload = event["Payload"]["Evaluation"]
                        assert event["Key"] == payload["ID"] == reg["EvalID"]
                        assert event["Index"] == payload["ModifyIndex"]
                        statuses.append(payload["Status"])
                    if "complete" in statuses:
                        break
            assert statuses == ["pending", "complete"]


async def test_a_failed_allocation_waits_on_a_follow_up_evaluation(tmp_path: Path) -> None:
    from datetime import datetime

    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            body = mock_job("crash")
            task = body["Job"]["TaskGroups"][0]["Tasks"][0]
            task["Config"] = {"run_for": "0.1s", "exit_code": 1}
            body["Job"]["TaskGroups"][0]["RestartPolicy"] = {"Attempts": 0, "Mode": "fail"}
            await c.post("/v1/jobs", json=body)
            while True:
                changed = a.agent.server.changed  # before reading: no change slips by
                (alloc,) = await _get(c, "/v1/job/crash/allocations")
                if alloc["FollowupEvalID"]:
                    break
                await changed.wait()
            assert alloc["ClientStatus"] == "failed"
            follow = await _get(c, f"/v1/evaluation/{alloc['FollowupEvalID']}")
            assert (follow["Status"], follow["TriggeredBy"]) == ("pending", "failed-follow-up")
            wait_until = datetime.fromisoformat(follow["WaitUntil"])
            failed_at = datetime.fromisoformat(alloc["TaskStates"]["t"]["FinishedAt"])
            assert round((wait_until - failed_at).total_seconds()) == 30  # Nomad's first delay
            triggers = [e["TriggeredBy"] for e in await _get(c, "/v1/job/crash/evaluations")]
            assert triggers == ["job-register", "alloc-failure", "failed-follow-up"]

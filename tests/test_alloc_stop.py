"""`alloc stop` and a drain as Nomad has them: migrate, replace, block (layer 2, real socket).

Nomad's `alloc stop` is "stop and reschedule": the allocation gets `DesiredTransition.Migrate`,
an `alloc-stop` evaluation stops it and places a replacement naming it. A drained allocation
is migrated the same way; on one node its replacement cannot be placed while the node is
ineligible, so it waits as a blocked evaluation and is placed once the node is eligible again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import mock_job, running_agent


async def _allocs_when(c: httpx2.AsyncClient, job_id: str, done: Any) -> list[dict[str, Any]]:
    """The job's allocations once `done(allocs)` holds (blocking queries, no polling)."""
    index = 0
    while True:
        got = await c.get(f"/v1/job/{job_id}/allocations", params={"index": index})
        if done(got.json()):
            return list(got.json())
        index = int(got.headers["X-Nomad-Index"])


def _running(allocs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in allocs if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"]


async def test_alloc_stop_places_a_replacement_as_nomad(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.post("/v1/jobs", json=mock_job("web"))).status_code == 200
            (first,) = await _allocs_when(c, "web", lambda x: len(_running(x)) == 1)
            r = await c.post(f"/v1/allocation/{first['ID']}/stop")
            assert r.status_code == 200, r.text
            ev = (await c.get(f"/v1/evaluation/{r.json()['EvalID']}")).json()
            assert (ev["TriggeredBy"], ev["Status"], ev["JobID"]) == (
                "alloc-stop", "complete", "web")
            allocs = await _allocs_when(c, "web", lambda x: len(x) == 2 and len(_running(x)) == 1)
            by_id = {x["ID"]: x for x in allocs}
            (second,) = _running(allocs)
            stopped = (await c.get(f"/v1/allocation/{first['ID']}")).json()
            assert (stopped["DesiredStatus"], stopped["DesiredDescription"]) == (
                "stop", "alloc is being migrated")
            assert stopped["DesiredTransition"]["Migrate"] is True
            assert stopped["NextAllocation"] == second["ID"]
            assert by_id[second["ID"]]["PreviousAllocation"] == first["ID"]
            assert second["Name"] == first["Name"]
            assert (await c.post("/v1/allocation/nope/stop")).status_code == 404


async def test_a_drained_allocation_waits_blocked_and_is_placed_when_eligible(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            node_id = a.agent.node.id
            assert (await c.post("/v1/jobs", json=mock_job("web"))).status_code == 200
            (first,) = await _allocs_when(c, "web", lambda x: len(_running(x)) == 1)
            r = await c.put(f"/v1/node/{node_id}/drain",
                            json={"DrainSpec": {"Deadline": 60_000_000_000}})
            assert r.status_code == 200, r.text
            await _allocs_when(c, "web", lambda x: not _running(x))
            # Its replacement cannot go on an ineligible node: one blocked evaluation.
            index = 0
            while True:
                got = await c.get("/v1/job/web/evaluations", params={"index": index})
                blocked = [e for e in got.json() if e["Status"] == "blocked"]
                if blocked:
                    break
                index = int(got.headers["X-Nomad-Index"])
            assert len(blocked) == 1
            assert (await c.get("/v1/job/web/allocations")).json()[0]["NextAllocation"] == ""
            # The drain over and the node eligible: placed, without a new register.
            r = await c.put(f"/v1/node/{node_id}/drain",
                            json={"DrainSpec": None, "MarkEligible": True})
            assert r.status_code == 200, r.text
            allocs = await _allocs_when(c, "web", lambda x: len(_running(x)) == 1)
            (second,) = _running(allocs)
            assert second["ID"] != first["ID"]
            ev = (await c.get(f"/v1/evaluation/{blocked[0]['ID']}")).json()
            assert ev["Status"] == "complete"

"""One index space over a real socket: blocking queries, the event stream's `index`, and the
ModifyIndex allocation events carry are all the server's one counter."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import Running, mock_job, running_agent


async def _records(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    async for line in lines:
        if line != "{}":
            yield json.loads(line)


async def _settled_index(a: Running, alloc_id: str) -> int:
    """The index once the allocation runs and the server copy knows it (the client's update
    synced): from then on, nothing changes until the test changes something."""
    server = a.agent.server
    while server.allocs[alloc_id].client_status != "running":
        await server.changed.wait()
    return int((await a.client.get("/v1/jobs")).headers["X-Nomad-Index"])


async def test_blocking_query_wakes_on_the_next_change_only(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            reg = (await c.post("/v1/jobs", json=mock_job("one"))).json()
            (alloc,) = (await c.get("/v1/job/one/allocations")).json()
            # The job and its evaluation take one index (one commit), the placement the next.
            assert reg["JobModifyIndex"] == reg["EvalCreateIndex"] == alloc["CreateIndex"] - 1
            index = await _settled_index(a, alloc["ID"])
            # Asked for an index already passed: answers at once.
            past = await c.get("/v1/jobs", params={"index": str(index - 1), "wait": "20s"})
            assert int(past.headers["X-Nomad-Index"]) == index
            answers: list[httpx2.Response] = []
            asked = trio.Event()

            async def blocking() -> None:
                asked.set()
                answers.append(await c.get("/v1/jobs", params={"index": str(index),
                                                               "wait": "20s"}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(blocking)
                await asked.wait()
                second = (await c.post("/v1/jobs", json=mock_job("two"))).json()
            (answer,) = answers
            # Woken by that change (it is in the answer), numbered by it.
            assert int(answer.headers["X-Nomad-Index"]) >= second["JobModifyIndex"] > index
            assert [j["ID"] for j in answer.json()] == ["one", "two"]


async def test_event_stream_index_resumes_after_what_was_seen(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            first = (await c.post("/v1/jobs", json=mock_job("first"))).json()
            second = (await c.post("/v1/jobs", json=mock_job("second"))).json()
            seen = first["JobModifyIndex"]
            async with c.stream("GET", "/v1/event/stream",
                                params={"index": str(seen + 1), "topic": "Job"}) as response:
                records = _records(response.aiter_lines())
                async for record in records:
                    # Only what came after: the first job's later status changes included.
                    assert record["Index"] > seen
                    (event,) = record["Events"]
                    assert event["Index"] == record["Index"]
                    assert event["Payload"]["Job"]["ModifyIndex"] == record["Index"]
                    if event["Key"] == "second":
                        break
            assert event["Type"] == "JobRegistered"
            assert record["Index"] == second["JobModifyIndex"]
            # From the first one's own index, it is replayed too (Nomad's StartAtClosest).
            async with c.stream("GET", "/v1/event/stream",
                                params={"index": str(seen), "topic": "Job"}) as response:
                records = _records(response.aiter_lines())
                again = await records.__anext__()
            assert again["Events"][0]["Key"] == "first"
            assert again["Index"] == seen


async def test_allocation_events_carry_the_current_modify_index(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            async with c.stream("GET", "/v1/event/stream",
                                params={"topic": "Allocation"}) as response:
                records = _records(response.aiter_lines())
                await c.post("/v1/jobs", json=mock_job("ev"))
                by_index: dict[int, dict[str, Any]] = {}
                alloc_id = ""
                async for record in records:
                    for event in record["Events"]:
                        alloc = event["Payload"]["Allocation"]
                        assert event["Index"] == record["Index"] == alloc["ModifyIndex"]
                        by_index[alloc["ModifyIndex"]] = alloc
                        alloc_id = alloc["ID"]
                    if any(x["ClientStatus"] == "running" for x in by_index.values()):
                        break
                read = (await c.get(f"/v1/allocation/{alloc_id}")).json()
                # What the API answers was published, with that very index.
                while read["ModifyIndex"] not in by_index:
                    record = await records.__anext__()
                    for event in record["Events"]:
                        alloc = event["Payload"]["Allocation"]
                        by_index[alloc["ModifyIndex"]] = alloc
                assert by_index[read["ModifyIndex"]]["ClientStatus"] == read["ClientStatus"]
                assert read["ModifyIndex"] <= int(
                    (await c.get("/v1/allocations")).headers["X-Nomad-Index"])

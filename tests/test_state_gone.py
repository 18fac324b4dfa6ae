"""A client state DB deleted under a running agent (layer 2: a real agent on a socket, the
mock driver): the agent notices, refuses changes with a 503 that says why, and keeps
answering reads and supervising what runs."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.agent_support import mock_job, running_agent, wait_status


async def test_deleted_state_db_stops_new_work_with_a_clear_error(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with running_agent(tmp_path) as agent:
            client = agent.client
            assert (await client.put("/v1/jobs", json=mock_job("before"))).status_code == 200
            await wait_status(client, "before", "running")

            (tmp_path / "client" / "state.db").unlink()

            response = await client.put("/v1/jobs", json=mock_job("after"))
            assert response.status_code == 503
            assert "state database" in response.text
            assert "deleted" in response.text
            assert (await client.get("/v1/job/after")).status_code == 404
            stop = await client.delete("/v1/job/before")
            assert stop.status_code == 503
            # Reads still work, and what ran before still runs.
            allocs = (await client.get("/v1/job/before/allocations")).json()
            assert allocs[0]["ClientStatus"] == "running"

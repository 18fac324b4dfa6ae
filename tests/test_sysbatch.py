"""A sysbatch job on this one node behaves as Nomad's: one allocation, run to completion once,
not restarted after success, not run again when the unchanged job is registered again."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.agent_support import raw_job, running_agent

pytestmark = pytest.mark.slow


async def test_sysbatch_runs_once_to_completion(tmp_path: Path) -> None:
    marker = tmp_path / "runs"
    job = raw_job("sweep", f"echo run >> {marker}", job_type="sysbatch")
    del job["Job"]["TaskGroups"][0]["RestartPolicy"]  # Nomad's sysbatch default applies
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data") as a:
            server = a.agent.server
            r = await a.client.put("/v1/jobs", json=job)
            assert r.status_code == 200, r.text
            while not [x for x in server.job_allocs("sweep") if x.client_status == "complete"]:
                await server.changed.wait()
            (alloc,) = server.job_allocs("sweep")
            state = alloc.task_states["t"]
            assert (state.state, state.failed, state.restarts) == ("dead", False, 0)
            assert server.jobs["sweep"].task_groups[0].restart_policy is not None
            assert server.jobs["sweep"].task_groups[0].restart_policy.mode == "fail"
            # Registering the unchanged job again does not run it again (Nomad: a complete
            # sysbatch allocation on a node is done).
            again = await a.client.put("/v1/jobs", json=job)
            assert again.status_code == 200
            assert [x.id for x in server.job_allocs("sweep")] == [alloc.id]
            view = (await a.client.get(f"/v1/allocation/{alloc.id}")).json()
            assert view["ClientStatus"] == "complete"
            assert view["TaskStates"]["t"]["Restarts"] == 0
    assert marker.read_text() == "run\n"

"""A Nomad API client (python-nomad) pointed at a running yurt agent (layer 2).

python-nomad speaks Nomad's HTTP API with `requests`; it runs in a worker thread here, against
the agent on a real socket, and sees Nomad's shapes: register, list and read allocations, a
job's allocations, deregister.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import nomad
import pytest
import trio

from tests.agent_support import raw_job, running_agent, wait_status

pytestmark = pytest.mark.slow


async def test_python_nomad_drives_yurt(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            port = urlparse(a.address).port
            assert port is not None
            client = nomad.Nomad(host="127.0.0.1", port=port, timeout=10)
            job = raw_job("nomadjob", "sleep 1000")

            def register() -> Any:
                return client.jobs.register_job(job)

            registered = await trio.to_thread.run_sync(register)
            assert "EvalID" in registered
            await wait_status(a.client, "nomadjob", "running")

            def inspect() -> tuple[Any, Any, Any, Any]:
                allocs = client.allocations.get_allocations()
                one = client.allocation.get_allocation(allocs[0]["ID"])
                of_job = client.job.get_allocations("nomadjob")
                read_job = client.job.get_job("nomadjob")
                return allocs, one, of_job, read_job

            allocs, one, of_job, read_job = await trio.to_thread.run_sync(inspect)
            assert [x["JobID"] for x in allocs] == ["nomadjob"]
            assert one["TaskStates"]["t"]["State"] == "running"
            assert one["Job"]["ID"] == "nomadjob"
            assert [x["ID"] for x in of_job] == [one["ID"]]
            assert read_job["TaskGroups"][0]["Tasks"][0]["Driver"] == "raw_exec"

            await trio.to_thread.run_sync(lambda: client.job.deregister_job("nomadjob"))
            stopped = await wait_status(a.client, "nomadjob", "complete")
            assert stopped["DesiredStatus"] == "stop"

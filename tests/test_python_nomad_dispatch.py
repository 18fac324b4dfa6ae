"""python-nomad's `dispatch_job` and `periodic_job` (force) against a running yurt agent."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import nomad
import pytest
import trio

from tests.agent_support import raw_job, running_agent

pytestmark = pytest.mark.slow


async def test_python_nomad_dispatches_and_forces(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            port = urlparse(a.address).port
            assert port is not None
            client = nomad.Nomad(host="127.0.0.1", port=port, timeout=10)
            params = raw_job("params", "true", job_type="batch")
            params["Job"]["ParameterizedJob"] = {"MetaOptional": ["who"]}
            cron = raw_job("cron", "true", job_type="batch")
            cron["Job"]["Periodic"] = {"Spec": "@monthly", "TimeZone": "Europe/Berlin"}

            def drive() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
                client.jobs.register_job(params)
                client.jobs.register_job(cron)
                dispatched = client.job.dispatch_job(
                    "params", payload=base64.b64encode(b"data").decode(), meta={"who": "py"},
                    id_prefix_template="nightly")
                forced = client.job.periodic_job("cron")
                return dispatched, forced, client.job.get_job("cron")

            dispatched, forced, parent = await trio.to_thread.run_sync(drive)
            assert dispatched["DispatchedJobID"].startswith("params/dispatch-nightly-")
            child = a.agent.server.jobs[dispatched["DispatchedJobID"]]
            assert (child.payload, child.meta) == (b"data", {"who": "py"})
            assert forced["EvalID"]
            assert parent["Periodic"]["TimeZone"] == "Europe/Berlin"
            assert parent["Status"] == "running"
            assert [j.id for j in a.agent.server.jobs.values()
                    if j.parent_id == "cron"] != []

"""python-nomad's `dispatch_job` and `periodic_job` (force) against a running yurt agent with
ACLs on, bootstrapped by python-nomad (tests/test_python_nomad.py)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import raw_job
from tests.test_python_nomad import bootstrapped_by_python_nomad

pytestmark = pytest.mark.slow


async def test_python_nomad_dispatches_and_forces(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with bootstrapped_by_python_nomad(tmp_path) as (a, client):
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

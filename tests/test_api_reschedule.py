"""The reschedule block over a real socket: a registered job shows each group's canonical
`ReschedulePolicy` as Nomad's GET /v1/job/:id does, HCL through /v1/jobs/parse gives the same,
and a policy Nomad refuses is a 400 naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import mock_job, running_agent
from yurt.runtime.lib.durations import HOUR, SECOND

pytestmark = pytest.mark.slow

HCL = '''job "web" {
  reschedule {
    delay = "10s"
  }
  group "g" {
    reschedule {
      attempts       = 2
      interval       = "1h"
      delay_function = "constant"
      unlimited      = false
    }
    task "t" {
      driver = "mock_driver"
    }
  }
}
'''

EXPECTED = {"Attempts": 2, "Interval": HOUR, "Delay": 10 * SECOND,
            "DelayFunction": "constant", "MaxDelay": 3600 * SECOND, "Unlimited": False}


def job_with_policy(job_id: str) -> dict[str, Any]:
    body = mock_job(job_id)
    body["Job"]["Reschedule"] = {"Delay": 10 * SECOND}
    body["Job"]["TaskGroups"][0]["ReschedulePolicy"] = {
        "Attempts": 2, "Interval": HOUR, "DelayFunction": "constant", "Unlimited": False}
    return body


async def test_group_policy_is_shown_on_the_job(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            r = await c.put("/v1/jobs", json=job_with_policy("web"))
            assert r.status_code == 200, r.text
            job = (await c.get("/v1/job/web")).json()
            # service default (max_delay 1h) ← job block (delay) ← group block (the rest)
            assert job["TaskGroups"][0]["ReschedulePolicy"] == EXPECTED
            assert job.get("Reschedule") is None  # Nomad's server keeps it on the groups only

            parsed = await c.post("/v1/jobs/parse", json={"JobHCL": HCL})
            assert parsed.status_code == 200, parsed.text
            assert parsed.json()["TaskGroups"][0]["ReschedulePolicy"] == EXPECTED

            plain = await c.put("/v1/jobs", json=mock_job("plain"))
            assert plain.status_code == 200, plain.text
            policy = (await c.get("/v1/job/plain")).json()["TaskGroups"][0]["ReschedulePolicy"]
            assert policy == {"Attempts": 0, "Interval": 0, "Delay": 30 * SECOND,
                              "DelayFunction": "exponential", "MaxDelay": HOUR,
                              "Unlimited": True}


async def test_a_policy_nomad_refuses_is_a_400_naming_the_field(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            body = job_with_policy("bad")
            body["Job"]["TaskGroups"][0]["ReschedulePolicy"]["DelayFunction"] = "linear"
            r = await a.client.put("/v1/jobs", json=body)
            assert r.status_code == 400
            assert "group.g.reschedule.delay_function" in r.text
            assert '"linear"' in r.text
            assert (await a.client.get("/v1/job/bad")).status_code == 404


async def test_a_new_policy_updates_allocations_in_place(tmp_path: Path) -> None:
    # The policy says what happens after a failure; changing it restarts nothing (Nomad).
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.put("/v1/jobs", json=mock_job("web"))).status_code == 200
            (before,) = (await c.get("/v1/job/web/allocations")).json()
            changed = job_with_policy("web")
            plan = await c.put("/v1/job/web/plan", json={"Job": changed["Job"]})
            assert plan.status_code == 200, plan.text
            updates = plan.json()["Annotations"]["DesiredTGUpdates"]["g"]
            assert (updates["InPlaceUpdate"], updates["DestructiveUpdate"], updates["Place"]) \
                == (1, 0, 0)
            registered = await c.put("/v1/jobs", json=changed)
            assert registered.status_code == 200, registered.text
            (after,) = (await c.get("/v1/job/web/allocations")).json()
            assert after["ID"] == before["ID"]
            job = (await c.get("/v1/job/web")).json()
            assert (job["Version"], job["TaskGroups"][0]["ReschedulePolicy"]) == (1, EXPECTED)

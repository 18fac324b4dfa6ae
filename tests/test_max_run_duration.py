"""A batch group's `max_run_duration` under `autojump_clock` with the mock driver (layer 1):
an allocation still running that long after its CreateTime has its tasks killed with Nomad's
event, and ends `complete` with "allocation exceeded max_run_duration" (Nomad's
client/allocrunner/alloc_runner.go `EnforceMaxRunDurationTimeout`); one that finishes first,
or is stopped first, is not touched."""

from __future__ import annotations

from pathlib import Path

import msgspec
import trio
from trio.testing import MockClock

from tests.agent_support import mock_job, running_agent, wait_status
from tests.runtime_support import at, harness, job_alloc, seconds, unix_clock, until_running
from yurt.runtime.client.allocrunner.maxrun import MAX_RUN_EXCEEDED, deadline

JOB = '''job "j" {
  type = "batch"
  group "g" {
    max_run_duration = "30s"
    task "t" {
      driver = "mock_driver"
      config { run_for = "%s" }
    }
  }
}
'''


async def test_a_batch_alloc_past_its_max_run_duration_is_stopped(
        autojump_clock: MockClock) -> None:
    alloc = msgspec.structs.replace(job_alloc(JOB % "1h"), create_time=unix_clock())
    created = seconds(alloc.create_time)
    async with harness() as h:
        ar = h.start(alloc)
        await until_running(ar, "t")
        await ar.wait_done.wait()
    tr = ar.task_runners["t"]
    killing = [e for e in tr.state.events if e.type == "Killing"]
    assert [e.display_message for e in killing] == [MAX_RUN_EXCEEDED]
    assert 30.0 <= at(tr, "Killing") - created < 31.0
    assert (ar.state.client_status, ar.state.client_description) == (
        "complete", "allocation exceeded max_run_duration")


async def test_an_alloc_that_ends_in_time_is_untouched(autojump_clock: MockClock) -> None:
    alloc = msgspec.structs.replace(job_alloc(JOB % "5s"), create_time=unix_clock())
    async with harness() as h:
        ar = h.start(alloc)
        await ar.wait_done.wait()
        await trio.sleep(60)
    assert "Killing" not in [e.type for e in ar.task_runners["t"].state.events]
    assert (ar.state.client_status, ar.state.client_description) == (
        "complete", "All tasks have completed")


def test_the_deadline_is_create_time_plus_the_duration_while_it_should_run() -> None:
    alloc = msgspec.structs.replace(job_alloc(JOB % "1h"), create_time=1_000)
    assert deadline(alloc) == 1_000 + 30 * 10**9
    assert deadline(msgspec.structs.replace(alloc, desired_status="stop")) is None
    assert deadline(msgspec.structs.replace(alloc, client_status="complete")) is None
    assert deadline(msgspec.structs.replace(alloc, create_time=0)) is None


async def test_a_real_agent_stops_a_batch_alloc_past_its_max_run_duration(
        tmp_path: Path) -> None:
    body = mock_job("late")
    job = body["Job"]
    job["Type"] = "batch"
    job["TaskGroups"][0]["MaxRunDuration"] = 2 * 10**9
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.post("/v1/jobs", json=body)).status_code == 200
            alloc = await wait_status(c, "late", "complete")
            assert alloc["ClientDescription"] == MAX_RUN_EXCEEDED
            full = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
            events = full["TaskStates"]["t"]["Events"]
            assert [e["DisplayMessage"] for e in events if e["Type"] == "Killing"] == [
                MAX_RUN_EXCEEDED]
            started = full["CreateTime"]
            killed = next(e["Time"] for e in events if e["Type"] == "Killing")
            assert killed - started >= 2 * 10**9

"""Rolling updates end to end (layer 2): raw_exec processes, the real clock, the API on a real
socket. A count-3 group with `max_parallel = 1` is rolled out, sampled every 200 ms through
the API, and must never have fewer than 2 healthy allocations running; a broken version fails
its deployment and `auto_revert` brings the last stable version back, all 3 of it, never fewer
than 2 of the working version's processes running meanwhile.

Health comes three ways, as Nomad's `health_check` gives it:
- `manual`: the test is the operator Nomad's manual mode expects, marking each allocation
  healthy through `/v1/deployment/allocation-health` once its task ran for half a second.
- `task_states`: the client's own tracker. An allocation is healthy once its task ran for
  `min_healthy_time` (checked as a bound on each new allocation's health timestamp), unhealthy
  at once when its task fails, or when `healthy_deadline` passes with a task still pending
  (a prestart task that never ends).
- `checks`: each allocation serves `python3 -m http.server` on its dynamic port, checked over
  http; a version whose check answers 404 runs but never gets healthy, and its deadline fails
  it.

With rescheduling off, the first unhealthy allocation fails the deployment (Nomad's
`shouldFailEarly`); with it on, the crashed allocation holds the rollout until the progress
deadline fails it. Times are small (min_healthy_time 500 ms, deadlines of a few seconds), so
each test takes seconds to some fifteen; every one is bounded by `fail_after`."""

from __future__ import annotations

import copy
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import running_agent

pytestmark = pytest.mark.slow

Sample = Callable[[httpx2.AsyncClient], Awaitable[int]]

#: Why a deployment failed, as Nomad's deployment watcher words it.
UNHEALTHY = "Failed due to unhealthy allocations"
PROGRESS_DEADLINE = "Failed due to progress deadline"


#: Rescheduling off: the first unhealthy allocation fails its deployment at once (Nomad's
#: `shouldFailEarly`), where one that could still be replaced waits for the progress deadline.
NO_RESCHEDULE = {"Attempts": 0, "Unlimited": False}

#: Every version's min_healthy_time: long enough that a crashing task is seen failing before
#: it could count as healthy, short since each rollout waits it once per allocation.
MIN_HEALTHY = timedelta(milliseconds=500)


def job(script: str, health: str = "manual", *, deadline: str = "10s",
        progress: str = "30s", reschedule: bool = False) -> dict[str, Any]:
    # KillTimeout within the shortest progress deadline here (4 s): Nomad's Task.Validate
    # refuses a longer one.
    task = {"Name": "t", "Driver": "raw_exec", "KillTimeout": 2 * 10**9,
            "Config": {"command": "/bin/sh", "args": ["-c", script]},
            "Resources": {"CPU": 10, "MemoryMB": 10}}
    group = {"Name": "g", "Count": 3, "Tasks": [task],
             "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
             "Update": {"MaxParallel": 1, "HealthCheck": health, "MinHealthyTime": "500ms",
                        "HealthyDeadline": deadline, "ProgressDeadline": progress,
                        "AutoRevert": True}}
    if not reschedule:
        group["ReschedulePolicy"] = NO_RESCHEDULE
    return {"Job": {"ID": "roll", "Type": "service", "TaskGroups": [group]}}


def web_job() -> dict[str, Any]:
    """A group serving http on its dynamic port `http`, healthy by its http check."""
    spec = job("", "checks", deadline="4s")
    group = spec["Job"]["TaskGroups"][0]
    group["Tasks"][0]["Config"] = {
        "command": sys.executable,
        "args": ["-m", "http.server", "${NOMAD_PORT_http}", "--bind", "${NOMAD_IP_http}",
                 "--directory", "${NOMAD_TASK_DIR}"]}
    group["Networks"] = [{"DynamicPorts": [{"Label": "http"}]}]
    group["Services"] = [{"Name": "web", "PortLabel": "http", "Checks": [{
        "Name": "alive", "Type": "http", "Path": "/", "Interval": "1s", "Timeout": "1s"}]}]
    return spec


def broken(spec: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """A copy of `spec` changed by `change` (given its group), marked in the job's meta as a
    version that never gets healthy, so that samples can tell its allocations apart."""
    bad = copy.deepcopy(spec)
    bad["Job"]["Meta"] = {"broken": "yes"}
    change(bad["Job"]["TaskGroups"][0])
    return bad


def crash(group: dict[str, Any]) -> None:
    group["Tasks"][0]["Config"]["args"] = ["-c", "exit 1"]


def stick_in_prestart(group: dict[str, Any]) -> None:
    """A prestart task that never ends: the main task stays pending past the deadline."""
    group["Tasks"].append({"Name": "init", "Driver": "raw_exec",
                           "Config": {"command": "/bin/sh", "args": ["-c", "exec sleep 1000"]},
                           "Lifecycle": {"Hook": "prestart", "Sidecar": False},
                           "Resources": {"CPU": 10, "MemoryMB": 10}})


def miss_the_check(group: dict[str, Any]) -> None:
    """The server runs, but its check asks for a page it does not have (404)."""
    group["Services"][0]["Checks"][0]["Path"] = "/missing"


async def allocations(c: httpx2.AsyncClient) -> list[dict[str, Any]]:
    """The job's allocations in full (their DeploymentID and DeploymentStatus)."""
    listed = await c.get("/v1/job/roll/allocations")
    stubs = listed.json() if listed.status_code == 200 else []
    return [(await c.get(f"/v1/allocation/{s['ID']}")).json() for s in stubs]


async def operate(c: httpx2.AsyncClient) -> None:
    """The operator of a manual health check: healthy once its task has run for MIN_HEALTHY (a
    crashing task is seen running for an instant: marked healthy then, it would let the
    rollout go on). A failed allocation needs no operator: the client marks it unhealthy
    itself, as Nomad's does."""
    while True:
        for alloc in await allocations(c):
            status = alloc.get("DeploymentStatus") or {}
            did = alloc["DeploymentID"]
            task = alloc["TaskStates"].get("t") or {}
            if (status.get("Healthy") is None and alloc["DesiredStatus"] == "run" and did
                    and alloc["ClientStatus"] == "running" and task.get("State") == "running"
                    and datetime.now(UTC) - parse_time(task["StartedAt"]) >= MIN_HEALTHY):
                await c.post(f"/v1/deployment/allocation-health/{did}",
                             json={"DeploymentID": did, "HealthyAllocationIDs": [alloc["ID"]]})
        await trio.sleep(0.1)


def running(alloc: dict[str, Any]) -> bool:
    return bool(alloc["ClientStatus"] == "running" and alloc["DesiredStatus"] == "run")


async def healthy_running(c: httpx2.AsyncClient) -> int:
    return sum(1 for a in await allocations(c)
               if running(a) and (a.get("DeploymentStatus") or {}).get("Healthy") is True)


async def working_running(c: httpx2.AsyncClient) -> int:
    """Running allocations of a version that works (not marked broken). A rollback updates
    the good ones in place into its own deployment, which asks for their health again, as
    Nomad does: counted here, they are the same processes all along."""
    return sum(1 for a in await allocations(c)
               if running(a) and "broken" not in (a["Job"].get("Meta") or {}))


async def settled(c: httpx2.AsyncClient, version: int, samples: list[int],
                  sample: Sample = healthy_running) -> dict[str, Any]:
    """The deployment of `version` once it is over, sampling a count meanwhile."""
    while True:
        samples.append(await sample(c))
        found = [d for d in (await c.get("/v1/deployments")).json()
                 if d["JobVersion"] == version and d["Status"] not in ("running", "paused")]
        if found:
            return found[0]  # type: ignore[no-any-return]
        await trio.sleep(0.2)


def parse_time(text: str) -> datetime:
    """An RFC 3339 time of the API (nanoseconds cut to what `datetime` holds)."""
    head, dot, rest = text.partition(".")
    if dot:
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6]}{zone}"
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def roll_out(c: httpx2.AsyncClient, first: dict[str, Any], *,
                   tracked: bool) -> None:
    """Version 0, then version 1 rolled out one allocation at a time, never fewer than two
    healthy; `tracked`: the client's tracker set the health, so no new allocation was
    healthy before its task had run for min_healthy_time."""
    assert (await c.post("/v1/jobs", json=first)).status_code == 200
    assert (await settled(c, 0, []))["Status"] == "successful"

    second = copy.deepcopy(first)
    second["Job"]["TaskGroups"][0]["Tasks"][0]["Env"] = {"V": "2"}
    assert (await c.post("/v1/jobs", json=second)).status_code == 200
    samples: list[int] = []
    done = await settled(c, 1, samples)
    assert done["Status"] == "successful", done
    assert min(samples) >= 2, samples
    fresh = [x for x in await allocations(c) if x["Job"]["Version"] == 1]
    # One batch at a time: each version-1 allocation came from its own evaluation.
    assert len({x["EvalID"] for x in fresh}) == 3
    assert (await c.get("/v1/job/roll")).json()["Stable"] is True
    if tracked:
        for alloc in fresh:
            healthy_at = parse_time(alloc["DeploymentStatus"]["Timestamp"])
            started = parse_time(alloc["TaskStates"]["t"]["StartedAt"])
            assert healthy_at - started >= MIN_HEALTHY, alloc["DeploymentStatus"]


async def revert(c: httpx2.AsyncClient, bad: dict[str, Any],
                 why: str = UNHEALTHY) -> dict[str, Any]:
    """Submits `bad` as version 2, which must fail (`why`) and be rolled back to version 1
    (as version 3), never fewer than two of the working processes running. Returns the
    broken allocation."""
    assert (await c.post("/v1/jobs", json=bad)).status_code == 200
    samples: list[int] = []
    failed = await settled(c, 2, samples, working_running)
    assert (failed["Status"], failed["StatusDescription"]) == (
        "failed", f"{why} - rolling back to job version 1")
    reverted = await settled(c, 3, samples, working_running)
    assert min(samples) >= 2, samples
    assert reverted["Status"] == "successful", reverted
    current = (await c.get("/v1/job/roll")).json()
    assert current["Version"] == 3
    assert current["TaskGroups"][0]["Tasks"][0]["Env"] == {"V": "2"}
    assert await healthy_running(c) == 3
    (alloc,) = [a for a in await allocations(c) if a["Job"]["Version"] == 2]
    assert alloc["DeploymentStatus"]["Healthy"] is False
    return alloc


def unhealthy_reasons(alloc: dict[str, Any]) -> dict[str, list[str]]:
    """Task name → the messages of its `Alloc Unhealthy` events."""
    return {name: [e["DisplayMessage"] for e in state["Events"]
                   if e["Type"] == "Alloc Unhealthy"]
            for name, state in alloc["TaskStates"].items()}


@pytest.mark.parametrize("health", ["manual", "task_states"])
async def test_a_rolling_update_keeps_two_healthy_and_a_crash_reverts(
        tmp_path: Path, health: str) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a, trio.open_nursery() as nursery:
            c = a.client
            if health == "manual":
                nursery.start_soon(operate, c)
            first = job("exec sleep 1000", health, deadline="5s")
            await roll_out(c, first, tracked=health != "manual")
            alloc = await revert(c, broken(first, crash))
            assert alloc["ClientStatus"] == "failed"
            if health == "task_states":
                assert unhealthy_reasons(alloc) == {"t": ["Unhealthy because of failed task"]}
            nursery.cancel_scope.cancel()


async def test_a_task_pending_past_the_healthy_deadline_reverts(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            first = job("exec sleep 1000", "task_states", deadline="3s")
            await roll_out(c, first, tracked=True)
            alloc = await revert(c, broken(first, stick_in_prestart))
            assert alloc["TaskStates"]["t"]["StartedAt"] == "0001-01-01T00:00:00Z"  # never ran
            assert unhealthy_reasons(alloc) == {
                "t": ["Task not running by healthy_deadline of 3s"],
                "init": ["Task not running for min_healthy_time of 500ms by healthy_deadline "
                         "of 3s"]}


async def test_http_checks_gate_a_rollout_and_a_failing_check_reverts(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            first = web_job()
            await roll_out(c, first, tracked=True)
            alloc = await revert(c, broken(first, miss_the_check))
            # It served all along, unhealthy by its check alone, until the rollback stopped it.
            assert alloc["TaskStates"]["t"]["Failed"] is False
            assert alloc["DesiredStatus"] == "stop"
            assert unhealthy_reasons(alloc) == {
                "t": ["Task not running for min_healthy_time of 500ms by healthy_deadline of 4s"]}


async def test_a_crash_that_may_be_rescheduled_holds_the_rollout_until_the_progress_deadline(
        tmp_path: Path) -> None:
    """The crashed allocation could still be replaced (after the service policy's 30 s), so
    it does not fail the deployment: it holds it, and the progress deadline fails it. Meanwhile
    no other working allocation is replaced (this was not so: each crash's evaluation made the
    next destructive update, down to none of the working version)."""
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            first = job("exec sleep 1000", "task_states", deadline="3s", progress="4s",
                        reschedule=True)
            await roll_out(c, first, tracked=True)
            alloc = await revert(c, broken(first, crash), PROGRESS_DEADLINE)
            assert alloc["ClientStatus"] == "failed"
            # Replaced by the rollback at once, not at its reschedule time 30 s on.
            replacement = (await c.get(f"/v1/allocation/{alloc['NextAllocation']}")).json()
            assert replacement["Job"]["Version"] == 3

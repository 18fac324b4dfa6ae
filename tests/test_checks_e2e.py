"""Service checks through a real agent (layer 2: real processes, sockets and clock): a
group check's results at /v1/client/allocation/<id>/checks follow the target's health, and
— the issue's end-to-end case — a failing http check restarts a raw_exec task per its
`check_restart`, through the restart policy, counted as a failure, until the policy gives up."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

from tests.agent_support import checks_of, raw_job, running_agent, wait_checks, wait_status
from tests.http_fixture import HttpState, serve_http
from tests.test_agent_e2e import free_port


async def test_check_results_follow_the_targets_health(tmp_path: Path) -> None:
    state = HttpState()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_http, state)
            async with running_agent(tmp_path) as a:
                c = a.client
                job = raw_job("web", "sleep 1000")
                job["Job"]["TaskGroups"][0]["Services"] = [{
                    "Name": "web", "PortLabel": str(port), "Address": "127.0.0.1",
                    "Checks": [{"Name": "alive", "Type": "http", "Path": "/ok",
                                "Interval": 1_000_000_000, "Timeout": 1_000_000_000}]}]
                await c.post("/v1/jobs", json=job)
                alloc = await wait_status(c, "web", "running")
                results = await wait_checks(
                    c, alloc["ID"], lambda results: bool(results) and next(
                        iter(results.values()))["Status"] == "success")
                ((check_id, result),) = results.items()
                assert len(check_id) == 64  # Nomad's sha256 check ID
                assert result["ID"] == check_id
                assert result["Check"] == "alive"
                assert result["Service"] == "web"
                assert result["Group"] == alloc["Name"]
                assert result["Mode"] == "healthiness"
                assert (result["StatusCode"], result["Output"]) == (200, "nomad: http ok")
                state.healthy = False
                result = (await wait_checks(
                    c, alloc["ID"], lambda results: results[check_id]["Status"] == "failure"
                ))[check_id]
                assert result["StatusCode"] == 503
                await c.delete("/v1/job/web")
                await wait_status(c, "web", "complete")
                assert await checks_of(c, alloc["ID"]) == {}  # purged at the stop
            nursery.cancel_scope.cancel()


async def test_a_failing_http_check_restarts_the_task_per_check_restart(
        tmp_path: Path) -> None:
    port = free_port()
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            job = raw_job("web", f"exec {sys.executable} -m http.server {port} "
                                 "--bind 127.0.0.1")
            group = job["Job"]["TaskGroups"][0]
            # A short delay: the restart is counted the same, its wait asserts nothing here.
            group["RestartPolicy"] = {"Attempts": 1, "Interval": 600_000_000_000,
                                      "Delay": 100_000_000, "Mode": "fail"}
            group["Tasks"][0]["Services"] = [{
                "Name": "web", "PortLabel": str(port), "Address": "127.0.0.1",
                "Checks": [{"Name": "alive", "Type": "http", "Path": "/missing",
                            "Interval": 1_000_000_000, "Timeout": 1_000_000_000,
                            "CheckRestart": {"Limit": 2, "Grace": 1_000_000_000}}]}]
            await c.post("/v1/jobs", json=job)
            # The server answers 404 for /missing: the check fails, the task restarts once
            # (attempts = 1), fails again, and the policy gives up.
            alloc = await wait_status(c, "web", "failed")
            events = alloc["TaskStates"]["t"]["Events"]
            types = [e["Type"] for e in events]
            signaled = [e for e in events if e["Type"] == "Restart Signaled"]
            assert len(signaled) == 2
            assert {e["RestartReason"] for e in signaled} == {
                'healthcheck: check "alive" unhealthy'}
            assert types.count("Started") == 2
            assert types[-1] in ("Not Restarting", "Killed", "Terminated")
            assert "Not Restarting" in types
            assert alloc["TaskStates"]["t"]["Restarts"] == 1
            assert alloc["TaskStates"]["t"]["Failed"] is True
            # Nothing of the task is left in the catalogue.
            assert (await c.get("/v1/service/web")).json() == []


async def test_script_checks_run_beside_the_task_through_exec(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            job = raw_job("web", "sleep 1000")
            second = 1_000_000_000
            job["Job"]["TaskGroups"][0]["Tasks"][0]["Services"] = [{
                "Name": "web", "Checks": [
                    {"Name": "good", "Type": "script", "Command": "/bin/sh",
                     "Args": ["-c", "echo in $NOMAD_TASK_NAME"], "Interval": second,
                     "Timeout": second},
                    {"Name": "bad", "Type": "script", "Command": "/bin/sh",
                     "Args": ["-c", "echo broken; exit 2"], "Interval": second,
                     "Timeout": second}]}]
            await c.post("/v1/jobs", json=job)
            alloc = await wait_status(c, "web", "running")
            # Until both ran in the running task: a check that runs while the task is still
            # starting fails with "not running", which is not what is tested here.
            by_id = await wait_checks(c, alloc["ID"], lambda results: sorted(
                (r["Status"], r["Output"]) for r in results.values()) == [
                    ("failure", "broken\n"), ("success", "in t\n")])
            results = {r["Check"]: r for r in by_id.values()}
            assert (results["good"]["Status"], results["good"]["Output"]) == (
                "success", "in t\n")
            assert (results["bad"]["Status"], results["bad"]["Output"]) == (
                "failure", "broken\n")
            assert results["good"]["Task"] == "t"


async def test_allocation_health_in_checks_mode_waits_for_the_checks(tmp_path: Path) -> None:
    state = HttpState(healthy=False)
    second = 1_000_000_000
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_http, state)
            async with running_agent(tmp_path) as a:
                c = a.client
                job = raw_job("web", "sleep 1000")
                job["Job"]["Update"] = {"MaxParallel": 1, "HealthCheck": "checks",
                                        "MinHealthyTime": second // 2,
                                        "HealthyDeadline": 60 * second,
                                        "ProgressDeadline": 120 * second}
                job["Job"]["TaskGroups"][0]["Services"] = [{
                    "Name": "web", "PortLabel": str(port), "Address": "127.0.0.1",
                    "Checks": [{"Name": "alive", "Type": "http", "Path": "/ok",
                                "Interval": second, "Timeout": second}]}]
                await c.post("/v1/jobs", json=job)
                alloc = await wait_status(c, "web", "running")
                failures = 0
                while failures < 3:  # three failing rounds, each past min_healthy_time
                    result = next(iter((await checks_of(c, alloc["ID"])).values()), None)
                    if result is not None and result["Status"] == "failure":
                        failures = state.hits
                    await trio.sleep(0.05)
                server_copy = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
                assert (server_copy.get("DeploymentStatus") or {}).get("Healthy") is None
                state.healthy = True
                while True:
                    server_copy = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
                    if (server_copy.get("DeploymentStatus") or {}).get("Healthy") is not None:
                        break
                    await trio.sleep(0.05)
                assert server_copy["DeploymentStatus"]["Healthy"] is True
            nursery.cancel_scope.cancel()

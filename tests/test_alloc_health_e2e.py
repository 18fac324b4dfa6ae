"""Allocation health end to end (layer 2): a real agent on a real socket. The health the client
sets reaches the server through the alloc sync and shows in `/v1/allocation/<id>` as Nomad's
`DeploymentStatus`, and an agent restart neither forgets it nor judges the allocation again.

These jobs have no `update` block (the jobspec on this branch does not take it yet), so they
are judged as Nomad judges every service allocation outside a deployment: by the group's
`migrate` strategy (`MinHealthyTime`, `HealthyDeadline`, `HealthCheck = "task_states"`).
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import raw_job, running_agent
from yurt.runtime.agent import Agent, AgentConfig
from yurt.runtime.drivers.mock import MockDriver
from yurt.runtime.drivers.protocol import Driver
from yurt.runtime.durations import MINUTE, SECOND


def with_migrate(job: dict[str, Any], min_healthy: int) -> dict[str, Any]:
    job["Job"]["TaskGroups"][0]["Migrate"] = {
        "MaxParallel": 1, "HealthCheck": "task_states", "MinHealthyTime": min_healthy,
        "HealthyDeadline": MINUTE}
    return job


def mock_job(job_id: str, min_healthy: int) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"},
            "Resources": {"CPU": 1, "MemoryMB": 10}}
    return with_migrate({"Job": {"ID": job_id, "Type": "service",
                                 "TaskGroups": [{"Name": "g", "Tasks": [task]}]}}, min_healthy)


async def healthy_alloc(client: httpx2.AsyncClient, job_id: str) -> dict[str, Any]:
    """The job's allocation, once the server's copy has health (bounded by the caller)."""
    while True:  # an HTTP client learns of a change only by asking again
        allocs = (await client.get(f"/v1/job/{job_id}/allocations")).json()
        if allocs:
            alloc: dict[str, Any] = (await client.get(f"/v1/allocation/{allocs[0]['ID']}")).json()
            status = alloc.get("DeploymentStatus")
            if status is not None and status.get("Healthy") is not None:
                return alloc
        await trio.sleep(0.05)


def rfc3339(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_raw_exec_alloc_turns_healthy_after_min_healthy_time(tmp_path: Path) -> None:
    job = with_migrate(raw_job("web", "exec sleep 60"), SECOND)
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            registered = await agent.client.post("/v1/jobs", json=job)
            assert registered.status_code == 200
            alloc = await healthy_alloc(agent.client, "web")
    status = alloc["DeploymentStatus"]
    assert status["Healthy"] is True
    assert alloc["ClientStatus"] == "running"
    started = rfc3339(alloc["TaskStates"]["t"]["StartedAt"])
    assert (rfc3339(status["Timestamp"]) - started).total_seconds() >= 1.0
    # The server stamps the change that brought the health (Nomad's state store does).
    assert 0 < status["ModifyIndex"] <= alloc["ModifyIndex"]
    # Not in a deployment: no canary, and no task event blames anything.
    assert status["Canary"] is False
    assert all(e["Type"] != "Alloc Unhealthy" for e in alloc["TaskStates"]["t"]["Events"])


async def test_health_survives_an_agent_restart(tmp_path: Path) -> None:
    def config() -> AgentConfig:
        def mock(_: dict[str, Any]) -> Driver:
            return MockDriver(time.time_ns)
        return AgentConfig(data_dir=tmp_path, port=0, driver_factories={"mock_driver": mock},
                           device_wait=0)

    with trio.fail_after(60):
        first = Agent(config())
        async with trio.open_nursery() as nursery:
            address = await nursery.start(first.run)
            async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                assert (await client.post("/v1/jobs", json=mock_job("early", SECOND))
                        ).status_code == 200
                before = await healthy_alloc(client, "early")
                # Judged only after the restart: min_healthy_time is longer than this agent
                # lives.
                assert (await client.post("/v1/jobs", json=mock_job("late", 3 * SECOND))
                        ).status_code == 200
            first.stop()  # tasks are left running for the next agent to re-attach

        second = Agent(config())
        async with trio.open_nursery() as nursery:
            address = await nursery.start(second.run)
            async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                await second.restoring.done.wait()
                # The allocation without health is tracked again and gets it; by then the
                # other one would have been judged again too (1 s < 3 s), had it been.
                late = await healthy_alloc(client, "late")
                assert late["DeploymentStatus"]["Healthy"] is True
                after = (await client.get(f"/v1/allocation/{before['ID']}")).json()
            second.stop()
    assert after["DeploymentStatus"] == before["DeploymentStatus"]
    assert after["DeploymentStatus"]["Healthy"] is True

"""Allocation health end to end (layer 2): a real agent on a real socket. The health the client
sets reaches the server through the alloc sync and shows in `/v1/allocation/<id>` as Nomad's
`DeploymentStatus`, and an agent restart neither forgets it nor judges the allocation again.

These jobs have no `update` block, so they are judged as Nomad judges every service
allocation outside a deployment: by the group's `migrate` strategy (`MinHealthyTime`,
`HealthyDeadline`, `HealthCheck = "task_states"`).
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import msgspec
import trio

from tests.agent_support import raw_job, running_agent
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.drivers.protocol import Driver
from yurt.runtime.lib.durations import MILLISECOND, MINUTE
from yurt.runtime.server.state.sqlite import ServerStore
from yurt.store import open_state_db

#: min_healthy_time of the allocations judged on a first agent; the one judged only after a
#: restart waits four times as long (2 s), longer than that agent lives.
MIN_HEALTHY = 500 * MILLISECOND


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


def mock_config(data_dir: Path) -> AgentConfig:
    """A persistent agent whose mock driver re-attaches its tasks across agents."""
    def mock(_: dict[str, Any]) -> Driver:
        return MockDriver(time.time_ns)
    return AgentConfig(data_dir=data_dir, port=0, driver_factories={"mock_driver": mock},
                       device_wait=0)


def rfc3339(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def early_healthy_late_not(data_dir: Path) -> dict[str, Any]:
    """A first agent runs job "early" until its allocation is healthy (returned) and job
    "late", which is judged only after a restart: its min_healthy_time is longer than this
    agent lives. Tasks are left running for the next agent to re-attach."""
    first = Agent(mock_config(data_dir))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(first.run)
        async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
            assert (await client.post("/v1/jobs", json=mock_job("early", MIN_HEALTHY))
                    ).status_code == 200
            before = await healthy_alloc(client, "early")
            assert (await client.post("/v1/jobs", json=mock_job("late", 4 * MIN_HEALTHY))
                    ).status_code == 200
        first.stop()
    return before


async def test_raw_exec_alloc_turns_healthy_after_min_healthy_time(tmp_path: Path) -> None:
    job = with_migrate(raw_job("web", "exec sleep 60"), MIN_HEALTHY)
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            registered = await agent.client.post("/v1/jobs", json=job)
            assert registered.status_code == 200
            alloc = await healthy_alloc(agent.client, "web")
    status = alloc["DeploymentStatus"]
    assert status["Healthy"] is True
    assert alloc["ClientStatus"] == "running"
    started = rfc3339(alloc["TaskStates"]["t"]["StartedAt"])
    assert (rfc3339(status["Timestamp"]) - started).total_seconds() >= MIN_HEALTHY / 1e9
    # The server stamps the change that brought the health (Nomad's state store does).
    assert 0 < status["ModifyIndex"] <= alloc["ModifyIndex"]
    # Not in a deployment: no canary, and no task event blames anything.
    assert status["Canary"] is False
    assert all(e["Type"] != "Alloc Unhealthy" for e in alloc["TaskStates"]["t"]["Events"])


async def test_health_survives_an_agent_restart(tmp_path: Path) -> None:
    with trio.fail_after(60):
        before = await early_healthy_late_not(tmp_path)

        second = Agent(mock_config(tmp_path))
        async with trio.open_nursery() as nursery:
            address = await nursery.start(second.run)
            async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                await second.restoring.done.wait()
                # The allocation without health is tracked again and gets it; by then the
                # other one would have been judged again too (1 × < 4 × MIN_HEALTHY), had
                # it been.
                late = await healthy_alloc(client, "late")
                assert late["DeploymentStatus"]["Healthy"] is True
                after = (await client.get(f"/v1/allocation/{before['ID']}")).json()
            second.stop()
    assert after["DeploymentStatus"] == before["DeploymentStatus"]
    assert after["DeploymentStatus"]["Healthy"] is True


async def test_health_the_server_never_heard_of_survives_a_restart(tmp_path: Path) -> None:
    """The agent died after its client set health but before the sync delivered it: the
    restarted client takes it from the view it persisted, and does not judge again."""
    with trio.fail_after(60):
        before = await early_healthy_late_not(tmp_path)

        # As before the sync: the server's copy has no health, and the client's record of
        # what the server acknowledged has none either.
        store = await ServerStore.open(tmp_path / "server")
        try:
            jobs, allocs, index = await store.load()
            unsynced = [msgspec.structs.replace(a, deployment_status=None)
                        if a.id == before["ID"] else a for a in allocs]
            await store.save(index, jobs, unsynced)
        finally:
            await store.aclose()
        async with open_state_db(tmp_path / "client") as db:
            acked = await db.get_acknowledged_state(before["ID"])
            assert acked is not None
            await db.put_acknowledged_state(before["ID"], msgspec.structs.replace(
                acked, deployment_status=None))

        second = Agent(mock_config(tmp_path))
        async with trio.open_nursery() as nursery:
            address = await nursery.start(second.run)
            async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                await second.restoring.done.wait()
                await healthy_alloc(client, "late")  # 4 × MIN_HEALTHY after the restore: see above
                after = await healthy_alloc(client, "early")
            second.stop()
    for field in ("Healthy", "Timestamp"):
        assert after["DeploymentStatus"][field] == before["DeploymentStatus"][field]

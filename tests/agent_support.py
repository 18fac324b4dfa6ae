"""A real agent on a real socket for API tests (layer 2)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import trio
from click.testing import CliRunner, Result

from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.client.devices.protocol import DeviceGroup
from yurt.runtime.structs import is_client_terminal


@dataclass
class Running:
    agent: Agent
    address: str
    client: httpx2.AsyncClient


@asynccontextmanager
async def running_agent(data_dir: Path, token: str = "",
                        fake_devices: tuple[DeviceGroup, ...] = (), *,
                        dev_mode: bool = True,
                        driver_config: dict[str, dict[str, Any]] | None = None
                        ) -> AsyncIterator[Running]:
    """An agent in dev mode: when the test ends, every task it started is killed. With
    `dev_mode=False` its stop leaves the tasks running, as an agent restart does.
    `driver_config`: the drivers' plugin options (`[drivers.config.NAME]`)."""
    agent = Agent(AgentConfig(data_dir=data_dir, port=0, token=token, dev_mode=dev_mode,
                              fake_devices=fake_devices, driver_config=driver_config or {}))
    async with trio.open_nursery() as nursery:
        address = await nursery.start(agent.run)
        headers = {"X-Nomad-Token": token} if token else {}
        async with httpx2.AsyncClient(base_url=address, headers=headers, timeout=20) as client:
            try:
                yield Running(agent, address, client)
            finally:
                agent.stop()


def raw_job(job_id: str, script: str, *, job_type: str = "service",
            extra_task: dict[str, Any] | None = None) -> dict[str, Any]:
    task = {"Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", script]}}
    tasks = [task] + ([extra_task] if extra_task else [])
    return {"Job": {"ID": job_id, "Type": job_type,
                    "TaskGroups": [{"Name": "g", "Tasks": tasks,
                                    "RestartPolicy": {"Attempts": 0, "Mode": "fail"}}]}}


def mock_job(job_id: str, count: int = 1) -> dict[str, Any]:
    """A service job of `count` allocations of one mock task that runs for an hour, with
    small resources so that many fit on the node."""
    task = {"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"},
            "Resources": {"CPU": 1, "MemoryMB": 10}}
    return {"Job": {"ID": job_id, "Type": "service",
                    "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [task]}]}}


async def wait_status(client: httpx2.AsyncClient, job_id: str, status: str) -> dict[str, Any]:
    """Until the job's first allocation reports `status` (bounded by the caller)."""
    while True:
        allocs = (await client.get(f"/v1/job/{job_id}/allocations")).json()
        if allocs and allocs[0]["ClientStatus"] == status:
            return allocs[0]  # type: ignore[no-any-return]
        await trio.sleep(0.05)


async def run_until(client: httpx2.AsyncClient, job: dict[str, Any], status: str
                    ) -> dict[str, Any]:
    """Register `job` and wait until its first allocation is `status` (bounded by the
    caller); that allocation, whole (`/v1/allocation/:id`)."""
    assert (await client.post("/v1/jobs", json=job)).status_code == 200
    first = await wait_status(client, job["Job"]["ID"], status)
    return (await client.get(f"/v1/allocation/{first['ID']}")).json()  # type: ignore[no-any-return]


async def stop_job(client: httpx2.AsyncClient, job_id: str) -> None:
    """Stops the job and waits until none of its allocations runs (bounded by the caller): an
    agent whose stop leaves tasks running must have none left when the test ends."""
    assert (await client.delete(f"/v1/job/{job_id}")).status_code == 200
    while True:
        allocs = (await client.get(f"/v1/job/{job_id}/allocations")).json()
        if all(is_client_terminal(a["ClientStatus"]) for a in allocs):
            return
        await trio.sleep(0.05)


async def checks_of(client: httpx2.AsyncClient, alloc_id: str) -> dict[str, Any]:
    """The allocation's check results by check ID (`/v1/client/allocation/<id>/checks`)."""
    r = await client.get(f"/v1/client/allocation/{alloc_id}/checks")
    assert r.status_code == 200
    return r.json()  # type: ignore[no-any-return]


async def wait_checks(client: httpx2.AsyncClient, alloc_id: str,
                      done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Polls the allocation's check results until `done` holds for them (the API has no
    event to wait on; bounded by the caller)."""
    while True:
        results = await checks_of(client, alloc_id)
        if done(results):
            return results
        await trio.sleep(0.05)


async def yurt_cli(address: str, *args: str, stdin: bytes | None = None) -> Result:
    """`yurt <args>` in-process against the agent at `address`, in a worker thread (the
    command blocks on its HTTP client while the agent runs on this loop)."""
    from yurt.runtime.cli import cli

    return await trio.to_thread.run_sync(
        lambda: CliRunner().invoke(cli, list(args), input=stdin, env={"YURT_ADDR": address}))

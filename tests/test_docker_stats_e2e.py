"""A docker task's usage through a real agent (layer 2: the agent in this process, a real
dockerd, the real clock): `/v1/client/allocation/:id/stats` answers with what the Engine API
measured (the docker driver is a `StatsDriver`), in Nomad's shape and with Nomad's
`Measured` lists, not the /proc tree's."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.agent_support import run_until, running_agent, stop_job
from tests.docker_support import IMAGE, DockerDaemon
from yurt.runtime.client.drivers.docker.stats import MEASURED_CPU, MEASURED_MEMORY_V1

TIMEOUT = 90


async def test_alloc_stats_of_a_docker_task_come_from_the_engine_api(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    job = {"Job": {"ID": "burn", "Type": "service", "TaskGroups": [{
        "Name": "g", "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Tasks": [{"Name": "t", "Driver": "docker", "KillTimeout": 1_000_000_000,
                   "Config": {"image": IMAGE, "command": "/bin/sh",
                              "args": ["-c", "while :; do :; done"]},
                   "Resources": {"CPU": 100, "MemoryMB": 32}}]}]}}
    with trio.fail_after(TIMEOUT):
        async with running_agent(tmp_path / "data",
                                 driver_config={"docker": {"endpoint": dockerd.host}}) as run:
            alloc = await run_until(run.client, job, "running")
            stats = (await run.client.get(f"/v1/client/allocation/{alloc['ID']}/stats")).json()
            node = (await run.client.get(f"/v1/node/{alloc['NodeID']}")).json()
            await stop_job(run.client, "burn")
    usage = stats["Tasks"]["t"]["ResourceUsage"]
    cpu, memory = usage["CpuStats"], usage["MemoryStats"]
    assert cpu["Measured"] == list(MEASURED_CPU)
    assert cpu["Percent"] > 10.0, cpu  # a busy loop: most of one core
    mhz = float(node["Attributes"].get("cpu.frequency", "0"))
    assert cpu["TotalTicks"] == pytest.approx(cpu["Percent"] / 100 * mhz)
    assert memory["Measured"] == list(MEASURED_MEMORY_V1)
    assert memory["Usage"] > 0
    assert memory["RSS"] > 0
    assert stats["Tasks"]["t"]["Pids"] == {}
    assert stats["ResourceUsage"]["CpuStats"]["Percent"] == pytest.approx(cpu["Percent"])
    # The allocation's total is the sum of its tasks' (here one), every field of it.
    total = stats["ResourceUsage"]["MemoryStats"]
    assert {k: total[k] for k in memory if k != "Measured"} == {
        k: v for k, v in memory.items() if k != "Measured"}
    assert set(total["Measured"]) >= set(memory["Measured"])

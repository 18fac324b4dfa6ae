"""A job mounting a dynamic host volume (layer 3: a real in-process agent, the real exec
driver, namespaces and bind mounts, the real clock): the volume made by `mkdir` through the
API is placed on by name and mounted into an exec task, which writes into its directory; a
delete is refused while the allocation claims it (Nomad's "volume … in use by allocations")
and succeeds once the job is stopped; a job asking for a volume no node offers in its
namespace is not placed, with Nomad's reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import wait_status
from tests.test_execdriver import ROOTFS
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.client.drivers import execdriver
from yurt.runtime.structs import is_client_terminal

pytestmark = pytest.mark.slow


def _job(job_id: str, script: str, namespace: str = "default") -> dict[str, Any]:
    return {"Job": {"ID": job_id, "Namespace": namespace, "Type": "service", "TaskGroups": [{
        "Name": "g", "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Volumes": {"v": {"Name": "v", "Type": "host", "Source": "data"}},
        "Tasks": [{"Name": "t", "Driver": "exec",
                   "Config": {"command": "/bin/sh", "args": ["-c", script]},
                   "VolumeMounts": [{"Volume": "v", "Destination": "/data"}],
                   "Resources": {"CPU": 100, "MemoryMB": 16}}]}]}}


async def test_an_exec_task_writes_into_a_dynamic_volume(tmp_path: Path) -> None:
    agent = Agent(AgentConfig(
        data_dir=tmp_path / "data", port=0, dev_mode=True,
        driver_factories={"exec": execdriver.plugin},
        driver_config={"exec": {"rootfs_dir": str(ROOTFS)}}))
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(agent.run)
            try:
                async with httpx2.AsyncClient(base_url=address, timeout=20) as c:
                    made = await c.put("/v1/volume/host/create", json={
                        "Volume": {"Name": "data", "PluginID": "mkdir",
                                   "Parameters": {"mode": "0777"}}})
                    assert made.status_code == 200, made.text
                    vol = made.json()["Volume"]
                    host = Path(vol["HostPath"])

                    job = _job("writer", "echo written >/data/f; exec sleep 300")
                    assert (await c.post("/v1/jobs", json=job)).status_code == 200
                    alloc = await wait_status(c, "writer", "running")
                    while True:  # the task's write, bounded by the test's deadline
                        if await trio.Path(host / "f").exists():
                            break
                        await trio.sleep(0.05)
                    assert await trio.Path(host / "f").read_text() == "written\n"

                    got = (await c.get(f"/v1/volume/host/{vol['ID']}")).json()
                    assert [a["ID"] for a in got["Allocations"]] == [alloc["ID"]]
                    refused = await c.delete(f"/v1/volume/host/{vol['ID']}")
                    assert (refused.status_code, refused.text) == (
                        409, f"volume {vol['ID']} in use by allocations: [{alloc['ID']}]")

                    # Another namespace does not see it: not placed, Nomad's reason.
                    ns = await c.put("/v1/namespace/other", json={"Name": "other"})
                    assert ns.status_code == 200, ns.text
                    placed = await c.post("/v1/jobs", json=_job("elsewhere", "true", "other"))
                    assert placed.status_code == 200
                    while True:
                        evals = (await c.get("/v1/job/elsewhere/evaluations",
                                             params={"namespace": "other"})).json()
                        blocked = [e for e in evals if e.get("FailedTGAllocs")]
                        if blocked:
                            break
                        await trio.sleep(0.05)
                    metric = blocked[0]["FailedTGAllocs"]["g"]
                    assert metric["ConstraintFiltered"] == {"missing compatible host volumes": 1}

                    assert (await c.delete("/v1/job/writer")).status_code == 200
                    while True:
                        allocs = (await c.get("/v1/job/writer/allocations")).json()
                        if all(is_client_terminal(a["ClientStatus"]) for a in allocs):
                            break
                        await trio.sleep(0.05)
                    while True:  # until the client's "complete" reaches the server's copy
                        gone = await c.delete(f"/v1/volume/host/{vol['ID']}")
                        if "in use by allocations" not in gone.text:
                            break
                        await trio.sleep(0.05)
                    assert gone.status_code == 200, gone.text
                    assert not await trio.Path(host).exists()
            finally:
                agent.stop()

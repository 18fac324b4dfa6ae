"""Devices end to end with the agent (layer 2): two fake GPUs, real processes, real socket.

A GPU job gets its own instance ID in its env and its device's stats in its allocation's
stats; a second gets the other GPU; a third is not placed, with a reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import raw_job, running_agent, wait_status
from yurt.runtime.client.devices.protocol import DeviceGroup, DeviceInstance

pytestmark = pytest.mark.slow

GPUS = (DeviceGroup(vendor="nvidia", type="gpu", name="T4",
                    instances=[DeviceInstance(id="GPU-0"), DeviceInstance(id="GPU-1")]),)


def gpu_job(job_id: str) -> dict[str, Any]:
    body = raw_job(job_id, "echo devices=$FAKE_VISIBLE_DEVICES; sleep 1000")
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"] = {
        "Devices": [{"Name": "nvidia/gpu", "Count": 1}]}
    return body


async def test_gpu_jobs_get_their_own_instances_and_a_third_is_not_placed(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path, fake_devices=GPUS) as a:
            c = a.client
            node = (await c.get(f"/v1/node/{a.agent.node.id}")).json()
            (group,) = node["NodeResources"]["Devices"]
            assert [i["ID"] for i in group["Instances"]] == ["GPU-0", "GPU-1"]
            assert node["ComputedClass"].startswith("v1:")

            seen = {}
            for job_id in ("g1", "g2"):
                assert (await c.post("/v1/jobs", json=gpu_job(job_id))).json()["Warnings"] == ""
                alloc = await wait_status(c, job_id, "running")
                full = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
                (device,) = full["TaskResources"]["t"]["Devices"]
                (device_id,) = device["DeviceIDs"]
                seen[job_id] = device_id
                logs = f"/v1/client/fs/logs/{alloc['ID']}"
                params = {"task": "t", "type": "stdout", "plain": "true"}
                while True:
                    text = (await c.get(logs, params=params)).text
                    if text:
                        break
                    await trio.sleep(0.05)
                assert text == f"devices={device_id}\n"
                stats = (await c.get(f"/v1/client/allocation/{alloc['ID']}/stats")).json()
                (group_stats,) = stats["Tasks"]["t"]["ResourceUsage"]["DeviceStats"]
                assert list(group_stats["InstanceStats"]) == [device_id]
            assert sorted(seen.values()) == ["GPU-0", "GPU-1"]

            third = (await c.post("/v1/jobs", json=gpu_job("g3"))).json()
            assert "Resources exhausted: devices" in third["Warnings"]
            assert (await c.get("/v1/job/g3/allocations")).json() == []

            host = (await c.get("/v1/client/stats")).json()
            (host_group,) = host["DeviceStats"]
            assert sorted(host_group["InstanceStats"]) == ["GPU-0", "GPU-1"]

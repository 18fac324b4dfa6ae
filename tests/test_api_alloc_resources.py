"""`AllocatedResources` on allocations over a real socket (layer 2): always on
GET /v1/allocation/<id>, on the list only with `?resources=true`, in Nomad's shape, from what
the placement reserved (CPU, memory, devices), the tasks' lifecycles and the group's disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from tests.agent_support import running_agent, wait_status
from yurt.runtime.client.devices.protocol import DeviceGroup, DeviceInstance

pytestmark = pytest.mark.slow

GPUS = (DeviceGroup(vendor="nvidia", type="gpu", name="T4",
                    instances=[DeviceInstance(id="GPU-0")]),)


def job() -> dict[str, Any]:
    main = {"Name": "main", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", "sleep 1000"]},
            "Resources": {"CPU": 250, "MemoryMB": 64, "MemoryMaxMB": 128,
                          "Devices": [{"Name": "nvidia/gpu", "Count": 1}]}}
    init = {"Name": "init", "Driver": "raw_exec", "Lifecycle": {"Hook": "prestart"},
            "Config": {"command": "/bin/true"}, "Resources": {"CPU": 50, "MemoryMB": 20}}
    return {"Job": {"ID": "res", "Type": "service", "TaskGroups": [{
        "Name": "g", "EphemeralDisk": {"SizeMB": 150}, "Tasks": [init, main]}]}}


async def test_allocated_resources_on_the_allocation_and_the_list(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path, fake_devices=GPUS) as a:
            c = a.client
            await c.post("/v1/jobs", json=job())
            alloc_id = (await wait_status(c, "res", "running"))["ID"]
            full = (await c.get(f"/v1/allocation/{alloc_id}")).json()
            assert full["AllocatedResources"] == {
                "Tasks": {
                    "main": {"Cpu": {"CpuShares": 250, "ReservedCores": None},
                             "Memory": {"MemoryMB": 64, "MemoryMaxMB": 128},
                             "Networks": None,
                             "Devices": [{"Vendor": "nvidia", "Type": "gpu", "Name": "T4",
                                          "DeviceIDs": ["GPU-0"]}]},
                    "init": {"Cpu": {"CpuShares": 50, "ReservedCores": None},
                             "Memory": {"MemoryMB": 20, "MemoryMaxMB": 0},
                             "Networks": None, "Devices": None}},
                "TaskLifecycles": {"init": {"Hook": "prestart", "Sidecar": False},
                                   "main": None},
                "Shared": {"DiskMB": 150, "Networks": None, "Ports": None}}
            # Everything else is the allocation as it was answered before.
            view = a.agent.server.allocs[alloc_id]
            rest = {k: v for k, v in full.items() if k != "AllocatedResources"}
            stored = set(msgspec.json.decode(msgspec.json.encode(view)))
            assert set(rest) == stored - {"AllocatedShared"}  # answered inside Shared

            plain = (await c.get("/v1/allocations")).json()
            assert "AllocatedResources" not in plain[0]
            listed = (await c.get("/v1/allocations", params={"resources": "true"})).json()
            assert listed[0]["AllocatedResources"] == full["AllocatedResources"]
            assert (await c.get("/v1/allocations",
                                params={"resources": "maybe"})).status_code == 400
            assert (await c.get("/v1/allocation/ffffffff-0000")).status_code == 404
            assert (await c.delete(f"/v1/allocation/{alloc_id}")).status_code == 405

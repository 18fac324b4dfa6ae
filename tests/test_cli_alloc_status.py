"""`yurt alloc status` against an agent on a real socket (layer 2): Nomad's "Allocation
Addresses" section and its deployment lines (`Deployment Health`, `Canary`); plus the pure
formatting of both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent_support import mock_job, running_agent, yurt_cli
from yurt.runtime.cli.api_client import alloc_addresses, alloc_basic_info


def job(canary: int = 0, env: str = "1") -> dict[str, Any]:
    doc = mock_job("web", 1)
    group = doc["Job"]["TaskGroups"][0]
    group["Update"] = {"MaxParallel": 1, "HealthCheck": "manual", "Canary": canary}
    # A canary runs beside the allocation it replaces: only the first version holds a static
    # port.
    static = [] if canary else [{"Label": "db", "Value": 47124, "To": 6379}]
    group["Networks"] = [{"ReservedPorts": static, "DynamicPorts": [{"Label": "http"}]}]
    group["Tasks"][0]["Env"] = {"V": env}
    return doc


async def test_alloc_status_shows_addresses_and_deployment_health(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            ip = a.agent.node.attributes["unique.network.ip-address"]
            assert (await c.post("/v1/jobs", json=job())).status_code == 200
            (alloc,) = (await c.get("/v1/job/web/allocations")).json()
            full = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
            http = {p["Label"]: p["Value"] for p in
                    full["AllocatedResources"]["Shared"]["Ports"]}["http"]
            out = await yurt_cli(a.address, "alloc", "status", alloc["ID"])
            assert out.exit_code == 0, out.output
            lines = out.output.splitlines()
            assert f"Deployment ID     = {full['DeploymentID'][:8]}" in lines, out.output
            assert "Deployment Health = unset" in lines, out.output
            assert "Canary            = true" not in lines
            assert 'Allocation Addresses (mode = "host"):' in lines, out.output
            i = lines.index('Allocation Addresses (mode = "host"):')
            assert [x.split() for x in lines[i + 1:i + 4]] == [
                ["Label", "Dynamic", "Address"],
                ["*db", "yes", f"{ip}:47124", "->", "6379"],
                ["*http", "yes", f"{ip}:{http}"]]
            d = full["DeploymentID"]
            r = await c.post(f"/v1/deployment/allocation-health/{d}", json={
                "DeploymentID": d, "HealthyAllocationIDs": [alloc["ID"]]})
            assert r.status_code == 200, r.text
            # A canary of the next version: its own status says so.
            assert (await c.post("/v1/jobs", json=job(canary=1, env="2"))).status_code == 200
            canary = next(x for x in (await c.get("/v1/job/web/allocations")).json()
                          if x["ID"] != alloc["ID"])
            out = await yurt_cli(a.address, "alloc", "status", canary["ID"])
            assert "Canary            = true" in out.output.splitlines(), out.output
            assert "Deployment Health = unset" in out.output.splitlines()
            old = await yurt_cli(a.address, "alloc", "status", alloc["ID"])
            assert "Deployment Health = healthy" in old.output.splitlines(), old.output


def test_the_sections_as_nomad_formats_them() -> None:
    alloc: dict[str, Any] = {
        "ID": "a" * 36, "Name": "web.g[0]", "JobID": "web", "DesiredStatus": "run",
        "ClientStatus": "running", "ClientDescription": "Tasks are running",
        "DeploymentID": "d" * 36, "DeploymentStatus": {"Healthy": False, "Canary": False},
        "AllocatedResources": {"Shared": {"Ports": None, "Networks": [{
            "Mode": "", "IP": "10.0.0.1",
            "DynamicPorts": [{"Label": "http", "Value": 20001, "To": 0}],
            "ReservedPorts": [{"Label": "db", "Value": 6379, "To": 0}]}]}}}
    assert ("Deployment Health", "unhealthy") in alloc_basic_info(alloc)
    # Without the allocation's port list, the network's ports, unstarred, Nomad's order.
    assert alloc_addresses(alloc) == ("Allocation Addresses:\n"
                                      "Label  Dynamic  Address\n"
                                      "http   yes      10.0.0.1:20001\n"
                                      "db     yes      10.0.0.1:6379")
    alloc["AllocatedResources"]["Shared"]["Networks"] = None
    alloc["DeploymentID"] = ""
    assert alloc_addresses(alloc) == ""
    assert [k for k, _ in alloc_basic_info(alloc)] == ["ID", "Name", "Job ID", "Desired",
                                                       "Client Status"]

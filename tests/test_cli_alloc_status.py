"""`yurt alloc status` against an agent on a real socket (layer 2), as Nomad's
command/alloc_status.go prints it: the header's keys, "Allocation Addresses" (a static port is
not dynamic), the deployment lines (`Deployment Health`, `Canary`), each task's resources with
their live usage and its events, `-short`, `-verbose`, `-stats`; plus the pure formatting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.agent_support import mock_job, running_agent, wait_status, yurt_cli
from yurt.runtime.cli.alloc_status import (
    addresses_text,
    alloc_detail_text,
    alloc_header,
    task_order,
)

NOW = 1_800_000_000 * 10**9


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
            alloc = await wait_status(c, "web", "running")
            full = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
            http = {p["Label"]: p["Value"] for p in
                    full["AllocatedResources"]["Shared"]["Ports"]}["http"]
            out = await yurt_cli(a.address, "alloc", "status", alloc["ID"])
            assert out.exit_code == 0, out.output
            lines = out.output.splitlines()
            keys = [line.split(" = ")[0].strip() for line in lines[:lines.index("")]]
            assert keys == ["ID", "Eval ID", "Name", "Node ID", "Node Name", "Job ID",
                            "Job Version", "Client Status", "Client Description",
                            "Desired Status", "Desired Description", "Created", "Modified",
                            "Deployment ID", "Deployment Health"], out.output
            assert f"Deployment ID       = {full['DeploymentID'][:8]}" in lines, out.output
            assert "Deployment Health   = unset" in lines, out.output
            assert "Canary              = true" not in lines
            assert 'Task "t" is "running"' in lines
            i = lines.index("Task Resources:")
            assert lines[i + 1].split() == ["CPU", "Memory", "Disk", "Addresses"]
            assert lines[i + 2].split()[1] == "MHz"  # used/reserved, from the stats
            assert lines[i + 2].split()[0].endswith("/1")
            assert "Task Events:" in lines
            assert "Recent Events:" in lines
            i = lines.index("Recent Events:")
            assert lines[i + 1].split() == ["Time", "Type", "Description"]
            assert lines[i + 2].split()[1] == "Started"  # newest first
            assert 'Allocation Addresses (mode = "host"):' in lines, out.output
            i = lines.index('Allocation Addresses (mode = "host"):')
            assert [x.split() for x in lines[i + 1:i + 4]] == [
                ["Label", "Dynamic", "Address"],
                ["*db", "no", f"{ip}:47124", "->", "6379"],  # static: not dynamic
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
            assert "Canary              = true" in out.output.splitlines(), out.output
            assert "Deployment Health   = unset" in out.output.splitlines()
            old = await yurt_cli(a.address, "alloc", "status", alloc["ID"])
            assert "Deployment Health   = healthy" in old.output.splitlines(), old.output
            short = await yurt_cli(a.address, "alloc", "status", "-short", alloc["ID"][:6])
            assert short.exit_code == 0, short.output
            shown = short.output.splitlines()
            assert [x.split(" = ")[0].strip() for x in shown[:4]] == ["ID", "Name", "Created",
                                                                    "Modified"]
            assert shown[5:7] == ["Tasks", shown[6]]
            assert shown[6].split() == ["Name", "State", "Last", "Event", "Time", "Lifecycle"]
            verbose = await yurt_cli(a.address, "alloc", "status", "-verbose", "-stats",
                                     alloc["ID"])
            assert verbose.exit_code == 0, verbose.output
            assert f"Eval ID             = {full['EvalID']}" in verbose.output
            assert "\nMemory Stats\n" in verbose.output
            assert "\nPlacement Metrics\n" in verbose.output
            listed = await yurt_cli(a.address, "alloc", "status", "-t", "{{len .}}")
            assert (listed.exit_code, listed.output) == (0, "2")
            bare = await yurt_cli(a.address, "alloc", "status")
            assert bare.exit_code == 2


def test_the_sections_as_nomad_formats_them() -> None:
    alloc: dict[str, Any] = {
        "ID": "a" * 36, "EvalID": "e" * 36, "Name": "web.g[0]", "NodeID": "n" * 36,
        "NodeName": "vm", "JobID": "web", "Job": {"Version": 3, "TaskGroups": [{
            "Name": "g", "Tasks": [{"Name": "web"},
                                   {"Name": "init", "Lifecycle": {"Hook": "prestart"}},
                                   {"Name": "log", "Lifecycle": {"Hook": "prestart",
                                                                 "Sidecar": True}}]}]},
        "TaskGroup": "g", "DesiredStatus": "run", "DesiredDescription": "",
        "ClientStatus": "running", "ClientDescription": "Tasks are running",
        "CreateTime": NOW - 65 * 10**9, "ModifyTime": NOW - 5 * 10**9,
        "DeploymentID": "d" * 36, "DeploymentStatus": {"Healthy": False, "Canary": False},
        "TaskStates": {name: {"State": "running", "Restarts": 0, "Events": [
            {"Type": "Received", "Time": NOW - 60 * 10**9, "DisplayMessage": "got it"},
            {"Type": "Started", "Time": NOW - 50 * 10**9, "DisplayMessage": "went"}]}
            for name in ("web", "init", "log")},
        "AllocatedResources": {
            "Tasks": {"web": {"Cpu": {"CpuShares": 100}, "Memory": {"MemoryMB": 64}}},
            "Shared": {"DiskMB": 300, "Ports": None, "Networks": [{
                "Mode": "", "IP": "10.0.0.1",
                "DynamicPorts": [{"Label": "http", "Value": 20001, "To": 0}],
                "ReservedPorts": [{"Label": "db", "Value": 6379, "To": 0}]}]}}}
    header = dict(alloc_header(alloc, verbose=False, now_ns=NOW))
    assert (header["Eval ID"], header["Node ID"], header["Job Version"]) == (
        "eeeeeeee", "nnnnnnnn", "3")
    assert (header["Created"], header["Modified"]) == ("1m5s ago", "5s ago")
    assert header["Deployment Health"] == "unhealthy"
    # Without the allocation's port list, the network's ports, unstarred, Nomad's order; the
    # reserved (static) port is not dynamic.
    assert addresses_text(alloc) == ("Allocation Addresses:\n"
                                     "Label  Dynamic  Address\n"
                                     "http   yes      10.0.0.1:20001\n"
                                     "db     no       10.0.0.1:6379")
    assert task_order(alloc) == ["init", "log", "web"]  # prestart, sidecar, main
    usage = {"Tasks": {"web": {"ResourceUsage": {
        "CpuStats": {"TotalTicks": 40.7, "Measured": ["Total Ticks"]},
        "MemoryStats": {"RSS": 3 * 1024 * 1024, "Measured": ["RSS"]}}}}}
    text = alloc_detail_text(alloc, usage, now_ns=NOW)
    assert 'Task "init" (prestart) is "running"' in text
    assert 'Task "log" (prestart sidecar) is "running"' in text
    assert ("Task Resources:\nCPU         Memory          Disk     Addresses\n"
            "40/100 MHz  3.0 MiB/64 MiB  300 MiB") in text
    assert "Recent Events:\nTime" in text
    events = text.split('Task "web" is "running"')[1].split("Recent Events:\n")[1]
    assert [line.split()[1] for line in events.splitlines()[1:3]] == ["Started", "Received"]
    alloc["AllocatedResources"]["Shared"]["Networks"] = None
    alloc["DeploymentID"] = ""
    assert addresses_text(alloc) == ""
    assert "Deployment ID" not in dict(alloc_header(alloc, verbose=True, now_ns=NOW))

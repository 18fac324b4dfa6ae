"""Nomad's deprecated task network (`resources { network { … } }`) over a real agent
(layer 3): registered in Nomad's JSON, as `nomad job run` sends it, the job is accepted with a
warning, and its ports are the group's, allocated to the allocation."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.agent_support import mock_job, running_agent, stop_job, wait_status
from yurt.runtime.jobspec.rules_volume import job_warnings


def test_the_warning_names_the_group_and_task() -> None:
    job = {"TaskGroups": [{"Name": "g", "Tasks": [
        {"Name": "t", "Resources": {"Networks": [{"DynamicPorts": [{"Label": "http"}]}]}},
        {"Name": "u", "Resources": {"Networks": []}}]}]}
    assert job_warnings(job) == [
        'group "g" task "t": resources.network is deprecated; its ports were moved to the '
        "group's network"]
    assert job_warnings({"TaskGroups": "nonsense"}) == []
    # Nomad 1.10's deprecated group fields, ignored with its warning.
    assert job_warnings({"TaskGroups": [{"Name": "g", "PreventRescheduleOnLost": True,
                                         "StopAfterClientDisconnect": 10**9}]}) == [
        'Group "g" has warnings: StopAfterClientDisconnect is deprecated and ignored favor '
        "of Disconnect.StopOnClientAfter",
        'Group "g" has warnings: PreventRescheduleOnLost is deprecated and ignored in favor '
        "of Disconnect.Replace"]
    assert job_warnings({"TaskGroups": [{"Name": "g", "PreventRescheduleOnLost": False}]}) == []


async def test_a_task_network_registers_with_a_warning_and_its_ports_are_allocated(
        tmp_path: Path) -> None:
    body = mock_job("web")
    task = body["Job"]["TaskGroups"][0]["Tasks"][0]
    task["Resources"]["Networks"] = [{"DynamicPorts": [{"Label": "http"}]}]
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            answer = (await a.client.post("/v1/jobs", json=body)).json()
            assert "resources.network is deprecated" in answer["Warnings"]
            job = (await a.client.get("/v1/job/web")).json()
            group = job["TaskGroups"][0]
            assert group["Tasks"][0]["Resources"]["Networks"] == []
            assert [p["Label"] for p in group["Networks"][0]["DynamicPorts"]] == ["http"]
            alloc = await wait_status(a.client, "web", "running")
            full = (await a.client.get(f"/v1/allocation/{alloc['ID']}")).json()
            ports = full["AllocatedResources"]["Shared"]["Ports"]
            assert [p["Label"] for p in ports] == ["http"]
            assert ports[0]["Value"] > 0
            await stop_job(a.client, "web")

"""The service catalogue over a real socket (layer 2): a job's group and task services
registered with Nomad's IDs and fields, `/v1/services`, `/v1/service/<name>` with `?tag=`
and `?choose=`, deletes, Nomad's error answers, the `Service` event topic, and every
registration gone once its allocation stops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.agent_support import raw_job, running_agent, stop_job, wait_checks, wait_status


def service_job(job_id: str = "web") -> dict[str, Any]:
    job = raw_job(job_id, "sleep 1000")
    group = job["Job"]["TaskGroups"][0]
    group["Services"] = [{"Name": "web-api", "PortLabel": "8080", "Tags": ["global", "v1"]}]
    group["Tasks"][0]["Services"] = [{"Name": "web-task", "PortLabel": "9090",
                                      "Tags": ["task"]}]
    return job


async def wait_registered(c: httpx2.AsyncClient, name: str, count: int) -> list[Any]:
    while True:
        regs: list[Any] = (await c.get(f"/v1/service/{name}")).json()
        if len(regs) == count:
            return regs
        await trio.sleep(0.05)


async def test_a_jobs_services_are_registered_listed_and_gone_when_it_stops(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.get("/v1/services")).json() == []
            assert (await c.get("/v1/service/web-api")).json() == []
            assert (await c.post("/v1/jobs", json=service_job())).status_code == 200
            alloc = await wait_status(c, "web", "running")
            (group_reg,) = await wait_registered(c, "web-api", 1)
            (task_reg,) = await wait_registered(c, "web-task", 1)
            node = a.agent.node
            ip = node.attributes["unique.network.ip-address"]
            assert group_reg == {
                "ID": f"_nomad-task-{alloc['ID']}-group-g-web-api-8080",
                "ServiceName": "web-api", "Namespace": "default", "NodeID": node.id,
                "Datacenter": node.datacenter, "JobID": "web", "AllocID": alloc["ID"],
                "Tags": ["global", "v1"], "Address": ip, "Port": 8080,
                "CreateIndex": group_reg["CreateIndex"],
                "ModifyIndex": group_reg["CreateIndex"]}
            assert task_reg["ID"] == f"_nomad-task-{alloc['ID']}-t-web-task-9090"
            assert task_reg["Port"] == 9090
            listing = (await c.get("/v1/services")).json()
            assert listing == [{"Namespace": "default", "Services": [
                {"ServiceName": "web-api", "Tags": ["global", "v1"]},
                {"ServiceName": "web-task", "Tags": ["task"]}]}]
            assert (await c.get("/v1/services", params={"namespace": "*"})).json() == listing
            assert (await c.get("/v1/services", params={"namespace": "other"})).json() == []
            # ?tag= keeps registrations with every tag given
            assert len((await c.get("/v1/service/web-api",
                                    params={"tag": "v1"})).json()) == 1
            assert (await c.get("/v1/service/web-api",
                                params=[("tag", "v1"), ("tag", "v2")])).json() == []
            # ?choose=
            chosen = (await c.get("/v1/service/web-api",
                                  params={"choose": "1|" + alloc["ID"]})).json()
            assert [r["ID"] for r in chosen] == [group_reg["ID"]]
            # stopping the job deregisters everything
            assert (await c.delete("/v1/job/web")).status_code == 200
            await wait_registered(c, "web-api", 0)
            await wait_registered(c, "web-task", 0)
            assert (await c.get("/v1/services")).json() == []


async def test_service_errors_are_nomads(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            r = await c.get("/v1/service/web", params={"choose": "x|y"})
            assert (r.status_code, r.text) == (
                400, "failed to choose services: Parameter for choose must be in form "
                     "'<number>|<key>'")
            r = await c.get("/v1/service/web", params={"choose": "1|"})
            assert r.status_code == 400
            r = await c.delete("/v1/service/web/nope")
            assert (r.status_code, r.text) == (500, "service registration not found")
            r = await c.get("/v1/service/")
            assert (r.status_code, r.text) == (400, "missing service name")
            r = await c.delete("/v1/service/web/")
            assert (r.status_code, r.text) == (400, "missing service id")
            r = await c.get("/v1/service/web/x/y")
            assert (r.status_code, r.text) == (400, "invalid URI")
            assert (await c.put("/v1/service/web")).status_code == 405
            assert (await c.get("/v1/service/web/id")).status_code == 405
            r = await c.get("/v1/client/allocation/nope/checks")
            assert r.status_code == 404


async def test_delete_removes_one_registration_and_events_are_published(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            async with c.stream("GET", "/v1/event/stream",
                                params={"topic": "Service", "heartbeat": "0.2"}) as response:
                lines = response.aiter_lines()
                assert await lines.__anext__() == "{}"
                await c.post("/v1/jobs", json=service_job())
                (reg,) = await wait_registered(c, "web-api", 1)
                r = await c.delete(f"/v1/service/web-api/{reg['ID']}")
                assert r.status_code == 200
                assert int(r.headers["X-Nomad-Index"]) > reg["ModifyIndex"]
                assert (await c.get("/v1/service/web-api")).json() == []
                seen: list[tuple[str, str]] = []
                while ("ServiceDeregistration", reg["ID"]) not in seen:
                    line = await lines.__anext__()
                    if line == "{}":
                        continue
                    for e in json.loads(line)["Events"]:
                        assert e["Topic"] == "Service"
                        seen.append((e["Type"], e["Payload"]["Service"]["ID"]))
                assert ("ServiceRegistration", reg["ID"]) in seen


async def test_nomad_inits_example_shows_its_service_on_its_dynamic_port(
        tmp_path: Path) -> None:
    example = json.loads(
        (Path(__file__).parent.parent / "scripts/pynomad/example-init.json").read_bytes())
    # Its task's 10 s shutdown_delay would hold the agent's stop at the end of the test and
    # nothing here is about it (tests/test_services_hooks.py is): the rest is sent unchanged.
    (task,) = example["Job"]["TaskGroups"][0]["Tasks"]
    assert task["ShutdownDelay"] == 10_000_000_000
    task["ShutdownDelay"] = 0
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            r = await c.post("/v1/jobs", json=example)
            assert r.status_code == 200, r.text
            alloc = await wait_status(c, "example", "running")
            (reg,) = await wait_registered(c, "redis-cache", 1)
            full = (await c.get(f"/v1/allocation/{alloc['ID']}")).json()
            (port,) = full["AllocatedResources"]["Shared"]["Ports"]
            assert port["Label"] == "db"
            assert (reg["Address"], reg["Port"]) == (port["HostIP"], port["Value"])
            assert reg["ID"] == f"_nomad-task-{alloc['ID']}-group-cache-redis-cache-db"
            assert reg["Tags"] == ["global", "cache"]
            listing = (await c.get("/v1/services")).json()
            assert listing == [{"Namespace": "default", "Services": [
                {"ServiceName": "redis-cache", "Tags": ["cache", "global"]}]}]


async def test_an_agent_restart_keeps_one_registration_and_runs_the_checks_again(
        tmp_path: Path) -> None:
    job = service_job()
    job["Job"]["TaskGroups"][0]["Services"][0]["Checks"] = [
        {"Name": "alive", "Type": "script", "Command": "/bin/true", "TaskName": "t",
         "Interval": 1_000_000_000, "Timeout": 1_000_000_000}]
    with trio.fail_after(60):
        async with running_agent(tmp_path, dev_mode=False) as a:
            c = a.client
            await c.post("/v1/jobs", json=job)
            alloc = await wait_status(c, "web", "running")
            before = await wait_registered(c, "web-api", 1)
        async with running_agent(tmp_path, dev_mode=False) as a:
            c = a.client
            await wait_status(c, "web", "running")
            after = await wait_registered(c, "web-api", 1)
            assert after == before  # re-registering the same thing writes nothing
            assert len(await wait_registered(c, "web-task", 1)) == 1
            await wait_checks(c, alloc["ID"],
                              lambda results: [r["Status"] for r in results.values()]
                              == ["success"])
            await stop_job(c, "web")
            await wait_registered(c, "web-api", 0)

"""Nomad's daily verbs as a user runs them (a real `yurt` process against an agent on a real
socket): `service list|info|delete`, `alloc checks`, `agent-info`, `version`,
`server members|join|force-leave`, `deployment pause|resume|unblock`, `eval delete` and
`monitor`; their headings, columns and exit codes are Nomad's (command/*.go)."""

from __future__ import annotations

import inspect
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import mock_job, raw_job, running_agent, stop_job, wait_checks
from tests.agent_support import wait_status as wait_alloc_status
from tests.cli_proc_support import spawned, yurt
from yurt.runtime.lib.logmonitor import LOG_FANOUT

pytestmark = pytest.mark.slow


def service_job() -> dict[str, Any]:
    job = raw_job("web", "sleep 1000")
    group = job["Job"]["TaskGroups"][0]
    group["Services"] = [{"Name": "web-api", "PortLabel": "8080", "Tags": ["v1", "global"],
                          "Checks": [{"Name": "alive", "Type": "script",
                                      "Command": "/bin/true", "TaskName": "t",
                                      "Interval": 1_000_000_000, "Timeout": 1_000_000_000}]}]
    group["Tasks"][0]["Services"] = [{"Name": "web-task", "PortLabel": "9090",
                                      "Tags": ["task"]}]
    return job


async def until(check: Callable[[], Any]) -> None:
    """Poll `check` (sync or async) until it holds: the API and the fan-out have no event
    to wait on from here (bounded by the caller's `fail_after`)."""
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        await trio.sleep(0.02)


def columns(line: str) -> list[str]:
    """A header line's column names (Nomad's are separated by two spaces or more)."""
    return [c.strip() for c in line.strip().split("  ") if c.strip()]


async def test_service_list_info_delete_and_alloc_checks(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            out = await yurt(a.address, "service", "list")
            assert (out.returncode, out.stdout) == (0, b"No service registrations found\n")
            await a.client.post("/v1/jobs", json=service_job())
            alloc = await wait_alloc_status(a.client, "web", "running")
            await wait_checks(a.client, alloc["ID"], lambda results: [
                r["Status"] for r in results.values()] == ["success"])

            async def both_registered() -> bool:
                return len((await a.client.get("/v1/services")).json()[0]["Services"]) == 2

            await until(both_registered)

            out = await yurt(a.address, "service", "list")
            assert out.returncode == 0, out.stderr
            lines = out.stdout.decode().splitlines()
            assert columns(lines[0]) == ["Service Name", "Tags"]
            assert columns(lines[1]) == ["web-api", "[global,v1]"]  # tags sorted
            assert columns(lines[2]) == ["web-task", "[task]"]

            out = await yurt(a.address, "service", "info", "web-a")  # a unique prefix
            assert out.returncode == 0, out.stderr
            lines = out.stdout.decode().splitlines()
            assert columns(lines[0]) == ["Job ID", "Address", "Tags", "Node ID", "Alloc ID"]
            assert columns(lines[1])[0] == "web"
            assert columns(lines[1])[2] == "[v1,global]"
            assert columns(lines[1])[4] == alloc["ID"][:8]
            out = await yurt(a.address, "service", "info", "-verbose", "web-api")
            text = out.stdout.decode()
            assert "Service Name = web-api\n" in text
            assert f"Alloc ID     = {alloc['ID']}" in text
            out = await yurt(a.address, "service", "info", "web")  # two services begin so
            assert out.returncode == 2
            assert b"Prefix matched multiple services" in out.stderr
            assert b"web-task" in out.stderr
            out = await yurt(a.address, "service", "info", "nope")
            assert out.returncode == 1
            assert b'No service registrations with prefix "nope" found' in out.stderr
            out = await yurt(a.address, "service", "info", "-json", "web-api")
            (reg,) = json.loads(out.stdout)

            out = await yurt(a.address, "alloc", "checks", alloc["ID"][:8])
            assert out.returncode == 0, out.stderr
            text = out.stdout.decode()
            assert text.startswith("Status of 1 Nomad Service Checks\n\n")
            keys = [line.split()[0] for line in text.splitlines()[2:] if line]
            assert keys == ["ID", "Name", "Group", "Task", "Service", "Status", "Mode",
                            "Timestamp", "Output"]
            assert "Status     =  success\n" in text
            assert "Service    =  web-api\n" in text
            out = await yurt(a.address, "alloc", "checks", "-json", alloc["ID"])
            assert [c["Status"] for c in json.loads(out.stdout).values()] == ["success"]
            out = await yurt(a.address, "alloc", "checks", "ffffffff")
            assert out.returncode == 1

            out = await yurt(a.address, "service", "delete", "web-api", reg["ID"])
            assert (out.returncode, out.stdout) == (
                0, b"Successfully deleted service registration\n")
            assert (await a.client.get("/v1/service/web-api")).json() == []
            out = await yurt(a.address, "service", "delete", "web-api", "no-such-id")
            assert out.returncode == 1
            assert b"Error deleting service registration: service registration not found" \
                in out.stderr
            await stop_job(a.client, "web")


async def test_agent_info_version_and_server_members(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            out = await yurt(a.address, "agent-info")
            assert out.returncode == 0, out.stderr
            lines = out.stdout.decode().splitlines()
            sections = [line for line in lines if not line.startswith("  ")]
            assert sections == sorted(sections)
            assert {"client", "runtime"} <= set(sections)
            assert f"  node_id = {a.agent.node.id}" in lines
            out = await yurt(a.address, "agent-info", "-json")
            assert json.loads(out.stdout)["stats"]["client"]["node_id"] == a.agent.node.id
            out = await yurt(a.address, "agent-info", "-json", "-t", "{{.}}")
            assert out.returncode == 2

            out = await yurt(a.address, "version")
            assert out.returncode == 0
            assert out.stdout.decode().startswith("yurt v")
            assert b"Nomad HTTP API v1" in out.stdout

            out = await yurt(a.address, "server", "members")
            assert out.returncode == 0, out.stderr
            header, row = out.stdout.decode().splitlines()
            assert columns(header) == ["Name", "Address", "Port", "Status", "Leader",
                                       "Raft Version", "Build", "Datacenter", "Region"]
            assert columns(row)[0] == f"{a.agent.node.name}.global"
            assert columns(row)[3:5] == ["alive", "true"]  # the leader of its own region
            out = await yurt(a.address, "server", "members", "-verbose")
            assert columns(out.stdout.decode().splitlines()[0])[5] == "Protocol"
            assert columns(out.stdout.decode().splitlines()[0])[-1] == "Tags"
            out = await yurt(a.address, "server", "members", "-json")
            (member,) = json.loads(out.stdout)
            assert member["Tags"]["Leader"] == "true"

            out = await yurt(a.address, "server", "join", "127.0.0.1:4648")
            assert out.returncode == 1
            assert out.stderr.startswith(b"yurt: Error joining: ")
            out = await yurt(a.address, "server", "force-leave", "other.global")
            assert (out.returncode, out.stdout) == (0, b"")


async def test_server_still_runs_a_server_and_needs_etcd_only_then(tmp_path: Path) -> None:
    with trio.fail_after(30):
        out = await yurt("http://127.0.0.1:1", "server")
        assert out.returncode == 2
        assert b"Missing option '--etcd'" in out.stderr
        out = await yurt("http://127.0.0.1:1", "server", "--etcd", "not-a-url")
        assert out.returncode == 2
        assert b"is not a URL" in out.stderr
        out = await yurt("http://127.0.0.1:1", "server", "members")
        assert out.returncode == 1
        assert b"cannot reach the agent" in out.stderr


def rolled(env: str = "1") -> dict[str, Any]:
    doc = mock_job("web", 2)
    group = doc["Job"]["TaskGroups"][0]
    group["Update"] = {"MaxParallel": 1, "HealthCheck": "manual"}
    group["Tasks"][0]["Env"] = {"V": env}
    return doc


async def test_deployment_pause_resume_unblock(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            await a.client.post("/v1/jobs", json=rolled())
            (d,) = (await a.client.get("/v1/deployments")).json()

            async def status() -> str:
                return str((await a.client.get(f"/v1/deployment/{d['ID']}")).json()["Status"])

            out = await yurt(a.address, "deployment", "pause", d["ID"][:8])
            assert (out.returncode, out.stdout.decode()) == (
                0, f'Deployment "{d["ID"]}" paused\n')
            assert await status() == "paused"
            out = await yurt(a.address, "deployment", "resume", "-detach", d["ID"])
            assert out.returncode == 0, out.stderr
            first, *rest = out.stdout.decode().splitlines()
            assert first == f'Deployment "{d["ID"]}" resumed'
            assert all(line.startswith("Evaluation ID: ") for line in rest)
            assert await status() == "running"
            await yurt(a.address, "deployment", "pause", d["ID"])
            # Without -detach, `job run`'s monitor follows the evaluation, then the
            # deployment (command/deployment_resume.go): here until the test has marked
            # every allocation healthy (the group's health check is manual).
            async with trio.open_nursery() as nursery:
                done: list[subprocess.CompletedProcess[bytes]] = []

                async def resume() -> None:
                    done.append(await yurt(a.address, "deployment", "resume", d["ID"]))

                nursery.start_soon(resume)
                while not done:
                    allocs = (await a.client.get(f"/v1/deployment/allocations/{d['ID']}")).json()
                    fresh = [x["ID"] for x in allocs if not x.get("DeploymentStatus")]
                    if fresh and await status() == "running":  # resumed: not before
                        await a.client.post(f"/v1/deployment/allocation-health/{d['ID']}", json={
                            "DeploymentID": d["ID"], "HealthyAllocationIDs": fresh})
                    await trio.sleep(0.2)
            out = done[0]
            assert out.returncode == 0, out.stderr
            text = out.stdout.decode()
            assert "Evaluation ID" not in text
            assert 'Monitoring evaluation "' in text
            assert 'finished with status "complete"' in text
            assert f'Monitoring deployment "{d["ID"][:8]}"' in text
            assert await status() == "successful"
            out = await yurt(a.address, "deployment", "unblock", d["ID"])
            assert out.returncode == 1
            assert b"Error unblocking deployment: " in out.stderr
            out = await yurt(a.address, "deployment", "pause", "ffffffff")
            assert out.returncode == 1


async def test_eval_delete_needs_a_paused_broker_and_a_safe_eval(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            answer = (await a.client.post("/v1/jobs", json=mock_job("web"))).json()
            eval_id = answer["EvalID"]
            await wait_alloc_status(a.client, "web", "running")
            out = await yurt(a.address, "eval", "delete", eval_id[:8])
            assert out.returncode == 1
            assert b"Eval broker is not paused" in out.stderr
            assert b"-pause-eval-broker=true" in out.stdout
            r = await a.client.put("/v1/operator/scheduler/configuration",
                                   json={"PauseEvalBroker": True})
            assert r.status_code == 200, r.text
            out = await yurt(a.address, "eval", "delete", eval_id[:8])
            assert out.returncode == 1  # its allocation runs
            assert f"eval {eval_id} is not safe to delete".encode() in out.stderr
            r = await a.client.request("DELETE", "/v1/evaluations",
                                       json={"EvalIDs": [eval_id], "Filter": "x"})
            assert (r.status_code, r.text) == (400, "evals cannot be deleted by both ID "
                                                    "and filter")
            r = await a.client.request("DELETE", "/v1/evaluations", json={})
            assert (r.status_code, r.text) == (400, "evals must be deleted by either ID or "
                                                    "filter")
            # Paused, the stop's evaluation waits: the job is stopped, its allocation runs
            # on; the register's evaluation is safe to delete now (its job is stopped).
            stopping = (await a.client.delete("/v1/job/web")).json()["EvalID"]
            out = await yurt(a.address, "eval", "delete", eval_id)
            assert (out.returncode, out.stdout) == (0, b"Successfully deleted 1 evaluation\n")
            assert (await a.client.get(f"/v1/evaluation/{eval_id}")).status_code == 404
            assert (await a.client.get(f"/v1/evaluation/{stopping}")).json()["Status"] == \
                "pending"
            allocs = (await a.client.get("/v1/job/web/allocations")).json()
            assert [x["DesiredStatus"] for x in allocs] == ["run"]
            # Unpaused: the pending stop is processed, the allocation stops.
            r = await a.client.put("/v1/operator/scheduler/configuration",
                                   json={"PauseEvalBroker": False})
            assert r.status_code == 200, r.text
            await stop_job(a.client, "web")  # waits for it
            assert (await a.client.get(f"/v1/evaluation/{stopping}")).json()["Status"] == \
                "complete"
            r = await a.client.put("/v1/operator/scheduler/configuration",
                                   json={"PauseEvalBroker": True})
            out = await yurt(a.address, "eval", "delete")
            assert out.returncode == 2
            assert b"evaluation ID or filter flag required" in out.stderr
            # By filter: every safe evaluation it matches (the stopped job's are).
            left = [e["ID"] for e in (await a.client.get("/v1/evaluations")).json()]
            assert left
            out = await yurt(a.address, "eval", "delete", "-filter", "JobID == web", "-yes")
            assert out.returncode == 0, out.stderr
            assert out.stdout.decode().startswith(f"Successfully deleted {len(left)} evaluation")
            assert (await a.client.get("/v1/evaluations")).json() == []
            out = await yurt(a.address, "eval", "delete", "-filter", "JobID ==", "-yes")
            assert out.returncode == 2
            assert b"failed to read filter expression: 1:9 (8): no match found" in out.stderr


async def test_monitor_streams_the_agents_log_at_the_level_asked(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            out = await yurt(a.address, "monitor", "-log-level=loud")
            assert out.returncode == 2
            assert b"==> Error starting monitor: Unknown log level: loud" in out.stderr
            out = await yurt(a.address, "monitor", "-node-id", a.agent.node.id[:4],
                             "-server-id", "leader")
            assert out.returncode == 2
            assert b"Cannot target node and server simultaneously" in out.stderr
            before = LOG_FANOUT.subscribers
            async with spawned(a.address, "monitor", "-log-level=debug",
                               "-log-include-location") as proc:
                assert proc.stdout is not None
                # Subscribed: what is logged from now on reaches it.
                await until(lambda: LOG_FANOUT.subscribers > before)
                await a.client.post("/v1/jobs", json=mock_job("web"))
                seen = b""
                while b"job=web" not in seen or b"[DEBUG]" not in seen:
                    chunk = await proc.stdout.receive_some(65536)
                    assert chunk, "the monitor ended"
                    seen += chunk
                assert b".py:" in seen  # hclog's caller, file:line
                proc.send_signal(signal.SIGINT)
                assert await proc.wait() == 130
            await until(lambda: LOG_FANOUT.subscribers == before)  # the agent saw it leave


async def test_server_members_of_a_two_server_cluster(etcd_urls: list[str], etcd_prefix: bytes,
                                                      tmp_path: Path) -> None:
    from tests.cluster_support import cluster, get, wait_for

    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1")  # started with `yurt server --etcd ...`, as before
            await c.server("s2")

            async def both_and_a_leader() -> bool:
                found = await get(s1.address, "/v1/agent/members")
                return len(found["Members"]) == 2 and bool(
                    await get(s1.address, "/v1/status/leader"))

            await wait_for(both_and_a_leader)
            out = await yurt(s1.address, "server", "members")
            assert out.returncode == 0, out.stderr
            header, *rows = out.stdout.decode().splitlines()
            assert columns(header)[:5] == ["Name", "Address", "Port", "Status", "Leader"]
            assert sorted(columns(r)[0] for r in rows) == ["s1.global", "s2.global"]
            assert sorted(columns(r)[4] for r in rows) == ["false", "true"]  # one leads

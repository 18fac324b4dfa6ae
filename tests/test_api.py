"""The HTTP API over a real socket with a real HTTP client (layer 2): every endpoint, its
errors, the token, log streaming with follow, the event stream and the websocket."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from trio_websocket import open_websocket_url

from tests.agent_support import raw_job, running_agent, wait_status

pytestmark = pytest.mark.slow

TICKER = "i=0; while :; do i=$((i+1)); echo line $i; sleep 0.05; done"


async def test_jobs_register_read_list_parse_stop(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            r = await c.post("/v1/jobs", json=raw_job("web", TICKER))
            assert r.status_code == 200
            assert set(r.json()) >= {"EvalID", "JobModifyIndex", "Warnings"}
            alloc = await wait_status(c, "web", "running")
            assert alloc["Name"] == "web.g[0]"
            assert [j["ID"] for j in (await c.get("/v1/jobs")).json()] == ["web"]
            job = (await c.get("/v1/job/web")).json()
            assert (job["ID"], job["Type"], job["TaskGroups"][0]["Tasks"][0]["Driver"]) == (
                "web", "service", "raw_exec")
            # Registering the same job again changes nothing.
            again = await c.post("/v1/job/web", json=raw_job("web", TICKER))
            assert again.status_code == 200
            assert len((await c.get("/v1/job/web/allocations")).json()) == 1
            parsed = await c.post("/v1/jobs/parse", json={
                "JobHCL": 'job "p" {\n group "g" {\n task "t" {\n driver = "mock_driver"\n'
                          ' }\n }\n}\n'})
            assert parsed.json()["ID"] == "p"
            assert (await c.delete("/v1/job/web")).status_code == 200
            stopped = await wait_status(c, "web", "complete")
            assert stopped["DesiredStatus"] == "stop"
            assert (await c.get("/v1/jobs")).json()[0]["Stop"] is True


async def test_job_errors(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.get("/v1/job/nope")).status_code == 404
            assert (await c.delete("/v1/job/nope")).status_code == 404
            # Nomad's job_endpoint.go `Allocations`: no job, no allocations, not an error.
            nope = await c.get("/v1/job/nope/allocations")
            assert (nope.status_code, nope.json()) == (200, [])
            bad = raw_job("bad", "true")
            bad["Job"]["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = "soon"
            r = await c.post("/v1/jobs", json=bad)
            assert r.status_code == 400
            assert "job.bad.group.g.task.t.kill_timeout" in r.text
            assert (await c.post("/v1/jobs", content=b"{not json")).status_code == 400
            assert (await c.post("/v1/jobs", json={"NoJob": 1})).status_code == 400
            mismatch = await c.post("/v1/job/other", json=raw_job("web", "true"))
            assert mismatch.status_code == 400
            assert (await c.delete("/v1/allocations")).status_code == 405


async def test_allocations_restart_signal_stats_stop_gc(tmp_path: Path) -> None:
    trap = "trap 'echo got-usr1' USR1; " + TICKER
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("web", trap))
            alloc_id = (await wait_status(c, "web", "running"))["ID"]
            assert [x["ID"] for x in (await c.get("/v1/allocations")).json()] == [alloc_id]
            full = (await c.get(f"/v1/allocation/{alloc_id[:8]}")).json()  # prefix works
            assert full["ID"] == alloc_id
            assert full["TaskStates"]["t"]["State"] == "running"
            assert (await c.get("/v1/allocation/ffffffff")).status_code == 404

            base = f"/v1/client/allocation/{alloc_id}"
            both = await c.post(f"{base}/restart", json={"TaskName": "t", "AllTasks": True})
            assert both.status_code == 400
            assert both.text == "task name cannot be set when restarting all tasks"
            assert (await c.post(f"{base}/restart", json={"TaskName": "x"})).status_code == 404
            assert (await c.post(f"{base}/restart", json={"TaskName": "t"})).status_code == 200
            while True:  # until the task has started again
                state = (await c.get(f"/v1/allocation/{alloc_id}")).json()["TaskStates"]["t"]
                types = [e["Type"] for e in state["Events"]]
                if types.count("Started") == 2 and state["State"] == "running":
                    break
                await trio.sleep(0.05)
            assert types[-4:] == ["Restart Signaled", "Terminated", "Restarting", "Started"]
            logs = {"task": "t", "type": "stdout", "plain": "True"}  # Go's ParseBool spelling
            while True:  # until the restarted shell has set its trap (it ticks after that)
                text = (await c.get(f"/v1/client/fs/logs/{alloc_id}", params=logs)).text
                if text.count("line 1\n") >= 2:
                    break
                await trio.sleep(0.05)
            assert (await c.post(f"{base}/signal", json={"Task": "t",
                                                         "Signal": "SIGUSR1"})).status_code == 200
            while True:  # the trap ran: the signal reached the task
                if "got-usr1" in (await c.get(f"/v1/client/fs/logs/{alloc_id}",
                                              params=logs)).text:
                    break
                await trio.sleep(0.05)
            stats = (await c.get(f"{base}/stats")).json()
            assert stats["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["RSS"] > 0
            assert stats["ResourceUsage"]["MemoryStats"]["RSS"] > 0

            not_terminal = await c.get(f"{base}/gc")
            assert not_terminal.status_code == 400
            assert "not eligible for GC" in not_terminal.text
            assert (await c.post(f"/v1/allocation/{alloc_id}/stop")).status_code == 200
            await wait_status(c, "web", "complete")
            assert (await c.put(f"{base}/gc")).status_code == 200
            assert alloc_id not in a.agent.client.runners
            assert not (tmp_path / "alloc" / alloc_id).exists()
            assert (await c.get("/v1/client/gc")).status_code == 200


async def test_logs_plain_framed_offsets_follow_and_errors(tmp_path: Path) -> None:
    script = "echo first; echo second; sleep 1000"
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("logs", script))
            alloc_id = (await wait_status(c, "logs", "running"))["ID"]
            url = f"/v1/client/fs/logs/{alloc_id}"
            plain = {"task": "t", "type": "stdout", "plain": "true"}
            while True:  # until both lines are in the log file
                if (await c.get(url, params=plain)).text == "first\nsecond\n":
                    break
                await trio.sleep(0.05)
            tail = await c.get(url, params={**plain, "origin": "end", "offset": "7"})
            assert tail.text == "second\n"
            framed = await c.get(url, params={"task": "t", "type": "stdout"})
            frames = [json.loads(f) for f in framed.text.replace("}{", "}\n{").splitlines()]
            data = b"".join(base64.b64decode(f["Data"]) for f in frames if "Data" in f)
            assert data == b"first\nsecond\n"
            assert frames[0]["File"] == "alloc/logs/t.stdout.0"

            errors = {
                "missing task": ({"type": "stdout"}, 400),
                "bad type": ({"task": "t", "type": "stdlog"}, 400),
                "unknown task": ({"task": "x", "type": "stdout"}, 400),
                "bad bool": ({"task": "t", "type": "stdout", "follow": "maybe"}, 400),
                "bad origin": ({"task": "t", "type": "stdout", "origin": "middle"}, 400),
            }
            for params, status in errors.values():
                assert (await c.get(url, params=params)).status_code == status
            assert (await c.get("/v1/client/fs/logs/ffffffff", params=plain)).status_code == 404


async def test_log_follow_sees_new_lines(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("f", TICKER))
            alloc_id = (await wait_status(c, "f", "running"))["ID"]
            params = {"task": "t", "type": "stdout", "plain": "true", "follow": "true"}
            seen = b""
            async with c.stream("GET", f"/v1/client/fs/logs/{alloc_id}",
                                params=params) as response:
                async for chunk in response.aiter_bytes():
                    seen += chunk
                    if b"line 30\n" in seen:  # 1.5 s of output arrived while following
                        break
            assert seen.startswith(b"line 1\n")


async def test_nodes_agent_and_client_stats(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            nodes = (await c.get("/v1/nodes")).json()
            assert len(nodes) == 1
            assert nodes[0]["Drivers"]["raw_exec"]["Healthy"] is True
            node = (await c.get(f"/v1/node/{nodes[0]['ID']}")).json()
            assert node["NodeResources"]["Memory"]["MemoryMB"] > 0
            assert (await c.get("/v1/node/zzzz")).status_code == 404
            me = (await c.get("/v1/agent/self")).json()
            assert me["stats"]["client"]["node_id"] == nodes[0]["ID"]
            stats = (await c.get("/v1/client/stats")).json()
            assert stats["Memory"]["Total"] > 0
            assert stats["DiskStats"][0]["Size"] > 0


async def test_event_stream_and_websocket_see_task_events(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            ws_url = a.address.replace("http", "ws") + "/v1/event/ws?topic=Task"
            async with open_websocket_url(ws_url) as ws, c.stream(
                    "GET", "/v1/event/stream",
                    params={"topic": "Task", "heartbeat": "0.2"}) as response:
                lines = response.aiter_lines()
                assert await lines.__anext__() == "{}"  # heartbeat first
                await c.post("/v1/jobs", json=raw_job("ev", "sleep 1000"))
                seen: list[str] = []
                while "Started" not in seen:
                    line = await lines.__anext__()
                    if line == "{}":
                        continue
                    record = json.loads(line)
                    assert all(e["Topic"] == "Task" for e in record["Events"])
                    seen += [e["Payload"]["Event"]["Type"] for e in record["Events"]]
                assert seen[:3] == ["Received", "Task Setup", "Started"]
                ws_seen: list[str] = []
                while "Started" not in ws_seen:
                    record = json.loads(await ws.get_message())
                    ws_seen += [e["Payload"]["Event"]["Type"] for e in record["Events"]]
                assert ws_seen[:3] == ["Received", "Task Setup", "Started"]
            # index: replay what is kept from an index on
            async with c.stream("GET", "/v1/event/stream",
                                params={"index": "1", "topic": "Job"}) as response:
                lines = response.aiter_lines()
                await lines.__anext__()
                record = json.loads(await lines.__anext__())
                assert record["Events"][0]["Type"] == "JobRegistered"


async def test_token_is_required_when_configured(tmp_path: Path) -> None:
    import httpx2

    with trio.fail_after(30):
        async with running_agent(tmp_path, token="s3cret") as a:
            assert (await a.client.get("/v1/jobs")).status_code == 200
            async with httpx2.AsyncClient(base_url=a.address) as anonymous:
                r = await anonymous.get("/v1/jobs")
                assert (r.status_code, r.text) == (403, "Permission denied")
                wrong = await anonymous.get("/v1/jobs", headers={"X-Nomad-Token": "nope"})
                assert wrong.status_code == 403
                # Only the header counts: a query-string token ends up in logs and histories.
                query = await anonymous.get("/v1/jobs", params={"token": "s3cret"})
                assert query.status_code == 403


def test_job_json_from_the_api_is_nomads() -> None:
    from yurt.runtime.structs import Job

    body = raw_job("x", "true")
    job = msgspec.convert(body["Job"], Job)
    assert job.task_groups[0].tasks[0].driver == "raw_exec"


async def eventually_async(predicate: Any) -> None:
    """Poll a condition on agent state (bounded by the caller's fail_after)."""
    while True:
        if await predicate():
            return
        await trio.sleep(0.05)


async def test_nomad_headers_and_blocking_queries(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            first = await c.get("/v1/jobs")
            index = int(first.headers["X-Nomad-Index"])
            assert first.headers["X-Nomad-KnownLeader"] == "true"
            answers: list[Any] = []

            async def blocking_query() -> None:
                answers.append(await c.get("/v1/jobs", params={"index": str(index),
                                                               "wait": "10s"}))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(blocking_query)
                await trio.sleep(0.3)
                assert answers == []  # still waiting: nothing changed
                await c.post("/v1/jobs", json=raw_job("blk", "sleep 1000"))
            (answer,) = answers
            assert int(answer.headers["X-Nomad-Index"]) > index
            assert [j["ID"] for j in answer.json()] == ["blk"]
            timed_out = await c.get("/v1/jobs", params={"index": "999999", "wait": "0.2"})
            assert timed_out.status_code == 200


async def test_stream_parameters_are_validated_and_head_is_refused(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            for bad in ("0", "abc", "-1"):
                r = await c.get("/v1/event/stream", params={"heartbeat": bad})
                assert r.status_code == 400, bad
            assert (await c.head("/v1/event/stream")).status_code == 405
            await c.post("/v1/jobs", json=raw_job("idx", "sleep 1000"))
            async with c.stream("GET", "/v1/event/stream",
                                params={"index": "0", "topic": "Job"}) as response:
                lines = response.aiter_lines()
                assert await lines.__anext__() == "{}"
                record = json.loads(await lines.__anext__())  # replayed from the oldest
                assert record["Events"][0]["Type"] == "JobRegistered"


async def test_closed_websockets_leave_no_subscription_behind(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            url = a.address.replace("http", "ws") + "/v1/event/ws"
            before = len(a.agent.broker._subscriptions)
            for _ in range(3):
                async with open_websocket_url(url):
                    pass
            await a.client.post("/v1/jobs", json=raw_job("ws", "sleep 1000"))
            while True:  # until the server side noticed every close
                if len(a.agent.broker._subscriptions) == before:
                    break
                await trio.sleep(0.05)


async def test_websocket_needs_the_token_too(tmp_path: Path) -> None:
    from trio_websocket import ConnectionClosed, HandshakeError

    with trio.fail_after(30):
        async with running_agent(tmp_path, token="s3cret") as a:
            base = a.address.replace("http", "ws") + "/v1/event/ws"
            with pytest.raises((HandshakeError, ConnectionClosed)):
                async with open_websocket_url(base) as ws:
                    await ws.get_message()
            # The token in the query string is not looked at: it would end up in logs.
            with pytest.raises((HandshakeError, ConnectionClosed)):
                async with open_websocket_url(base + "?token=s3cret") as ws:
                    await ws.get_message()
            async with open_websocket_url(base + "?index=0", extra_headers=[
                    (b"X-Nomad-Token", b"s3cret")]) as ws:
                record = json.loads(await ws.get_message())
                assert record["Events"][0]["Topic"] == "Node"


async def test_the_server_copy_receives_the_clients_updates(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            await a.client.post("/v1/jobs", json=raw_job("synced", "sleep 1000"))
            alloc_id = (await wait_status(a.client, "synced", "running"))["ID"]

            async def synced() -> bool:
                await trio.lowlevel.checkpoint()
                return a.agent.server.allocs[alloc_id].client_status == "running"

            await eventually_async(synced)
            assert a.agent.server.allocs[alloc_id].task_states["t"].state == "running"


async def test_gc_never_reruns_a_collected_batch_allocation(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("once", "echo ran", job_type="batch"))
            alloc_id = (await wait_status(c, "once", "complete"))["ID"]
            # Collected at once, before the final update may have reached the server …
            assert (await c.put(f"/v1/client/allocation/{alloc_id}/gc")).status_code == 200
            assert (await c.put(f"/v1/client/allocation/{alloc_id}/gc")).status_code == 400
            # … and a server change in that window must not bring it back.
            await c.post("/v1/jobs", json=raw_job("other", "sleep 1000"))
            await wait_status(c, "other", "running")
            assert alloc_id not in a.agent.client.runners
            assert await a.agent.db.get_acknowledged_state(alloc_id) is None


async def test_purge_forgets_the_job(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("gone", "sleep 1000"))
            await wait_status(c, "gone", "running")
            assert (await c.delete("/v1/job/gone", params={"purge": "true"})).status_code == 200
            assert (await c.get("/v1/job/gone")).status_code == 404
            assert (await c.get("/v1/jobs")).json() == []


async def test_job_updates_keep_what_they_can(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            body = raw_job("upd", "sleep 1000")
            await c.post("/v1/jobs", json=body)
            first = (await wait_status(c, "upd", "running"))["ID"]
            body["Job"]["TaskGroups"][0]["Count"] = 2  # count only: not destructive
            await c.post("/v1/jobs", json=body)
            while True:  # until the added allocation runs too
                allocs = (await c.get("/v1/job/upd/allocations")).json()
                if len([x for x in allocs if x["ClientStatus"] == "running"]) == 2:
                    break
                await trio.sleep(0.05)
            kept = (await c.get(f"/v1/allocation/{first}")).json()
            assert kept["DesiredStatus"] == "run"
            assert "Killing" not in [e["Type"] for e in kept["TaskStates"]["t"]["Events"]]
            too_big = raw_job("upd", "sleep 1000")
            too_big["Job"]["TaskGroups"][0]["Count"] = 2
            too_big["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"] = {
                "MemoryMB": a.agent.node.node_resources.memory.memory_mb * 2}
            warning = (await c.post("/v1/jobs", json=too_big)).json()["Warnings"]
            assert "Resources exhausted: memory" in warning
            allocs = (await c.get("/v1/job/upd/allocations")).json()
            assert sorted(x["DesiredStatus"] for x in allocs) == ["run", "run"]  # kept

"""Hostile requests against a real agent (layer 2): every one is a 4xx with a message, answered
at once, and no task is touched by a request that is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from tests.agent_support import raw_job, running_agent, wait_status

pytestmark = pytest.mark.slow

DEEP_JSON = b'{"Job": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"


async def test_oversized_deep_and_wide_bodies_are_refused_quickly(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            job = raw_job("big", "sleep 1000")
            job["Job"]["TaskGroups"][0]["Count"] = 10**30
            many_keys = b"{" + b",".join(b'"k%d":0' % i for i in range(200_000)) + b"}"
            some_keys = b"{" + b",".join(b'"k%d":0' % i for i in range(100_000)) + b"}"
            deep_hcl = 'job "j" {\n' + 'group "g" {\n' * 2000 + "}\n" * 2001
            cases: list[tuple[str, str, dict[str, object], int]] = [
                ("POST", "/v1/jobs", {"json": job}, 400),
                ("POST", "/v1/jobs", {"content": many_keys}, 413),
                ("POST", "/v1/jobs", {"content": some_keys}, 400),
                ("POST", "/v1/jobs", {"content": b" " * (50 << 20)}, 413),
                ("POST", "/v1/jobs/parse", {"json": {"JobHCL": "#" * (200 << 10)}}, 413),
                ("POST", "/v1/jobs/parse", {"json": {"JobHCL": deep_hcl}}, 400),
                ("POST", "/v1/jobs/parse", {"json": {"JobHCL": '"%{ for x in y }"'}}, 400),
            ]
            for path in ("/v1/jobs", "/v1/jobs/parse", "/v1/job/x"):
                cases.append(("POST", path, {"content": DEEP_JSON}, 400))
            for method, path, kw, status in cases:
                started = time.monotonic()
                r = await c.request(method, path, **kw)  # type: ignore[arg-type]
                took = time.monotonic() - started
                assert (r.status_code, path) == (status, path), r.text[:300]
                assert r.text.strip(), path
                assert took < 1.0, (path, status, took)
            assert a.agent.server.jobs == {}


async def test_bad_signals_and_restart_bodies_leave_the_task_alone(tmp_path: Path) -> None:
    trap = "trap 'echo got-usr1' USR1; i=0; while :; do i=$((i+1)); echo line $i; sleep 0.05; done"
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("web", trap))
            alloc_id = (await wait_status(c, "web", "running"))["ID"]
            base = f"/v1/client/allocation/{alloc_id}"
            refused: list[tuple[str, object]] = [
                ("signal", {"Task": "t", "Signal": "SIGFOO"}),
                ("signal", {"Signal": "BOGUS"}),
                ("signal", {"Signal": 5}),
                ("signal", {"Signal": None}),
                ("signal", {"Signal": "SIGRTMIN"}),
                ("signal", {"Task": 7, "Signal": "SIGUSR1"}),
                ("restart", {"TaskName": 5}),
                ("restart", {"AllTasks": "yes"}),
                ("signal", [1, 2]),
            ]
            for verb, body in refused:
                r = await c.post(f"{base}/{verb}", json=body)
                assert r.status_code == 400, (verb, body, r.text)
                assert r.text.strip(), (verb, body)
                if verb == "signal" and isinstance(body, dict) and isinstance(
                        body.get("Signal"), str) and "Task" not in body:
                    assert r.text.startswith("invalid signal"), r.text  # clients match it
            for verb in ("signal", "restart"):
                deep = await c.post(f"{base}/{verb}", content=DEEP_JSON)
                assert deep.status_code == 400, deep.text
            # Untouched: still running, never restarted, and a real signal still reaches it.
            state = (await c.get(f"/v1/allocation/{alloc_id}")).json()["TaskStates"]["t"]
            assert (state["State"], state["Restarts"]) == ("running", 0)
            assert [e["Type"] for e in state["Events"]].count("Signaling") == 0
            ok = await c.post(f"{base}/signal", json={"Task": "t", "Signal": "usr1"})
            assert ok.status_code == 200, ok.text
            logs = {"task": "t", "type": "stdout", "plain": "true"}
            while True:  # the trap ran: the signal reached the task
                if "got-usr1" in (await c.get(f"/v1/client/fs/logs/{alloc_id}",
                                              params=logs)).text:
                    break
                await trio.sleep(0.05)
            state = (await c.get(f"/v1/allocation/{alloc_id}")).json()["TaskStates"]["t"]
            assert (state["State"], state["Restarts"]) == ("running", 0)

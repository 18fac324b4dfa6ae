"""/v1/job/<id>/periodic/force and /v1/job/<id>/dispatch over a real socket, with a real
raw_exec task reading its dispatched payload from local/."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from tests.agent_support import Running, raw_job, running_agent
from yurt.runtime.api import periodic as periodic_api
from yurt.runtime.server import serial
from yurt.runtime.server.local import Registration
from yurt.runtime.structs import Job

pytestmark = pytest.mark.slow


def template(job_id: str, script: str, **extra: Any) -> dict[str, Any]:
    body = raw_job(job_id, script, job_type="batch")
    body["Job"].update(extra)
    return body


async def wait_complete(a: Running, job_id: str) -> dict[str, Any]:
    """The job's first allocation once it is terminal, read over the API by allocation ID
    (a child's job ID holds a `/`), waking on every server change."""
    while True:
        changed = a.agent.server.changed
        allocs = a.agent.server.job_allocs(job_id)
        if allocs and allocs[0].client_status in ("complete", "failed"):
            r = await a.client.get(f"/v1/allocation/{allocs[0].id}")
            return r.json()  # type: ignore[no-any-return]
        await changed.wait()


async def test_periodic_parent_is_stored_not_placed_and_force_launches_a_child(
        tmp_path: Path) -> None:
    with trio.fail_after(40):
        async with running_agent(tmp_path) as a:
            c = a.client
            r = await c.put("/v1/jobs", json=template(
                "nightly", "echo ran", Periodic={"Spec": "0 0 1 1 *", "ProhibitOverlap": True}))
            assert r.status_code == 200, r.text
            assert r.json()["EvalID"] == ""
            parent = (await c.get("/v1/job/nightly")).json()
            assert (parent["Status"], parent["Periodic"]["Spec"]) == ("running", "0 0 1 1 *")
            assert (await c.get("/v1/job/nightly/allocations")).json() == []

            forced = await c.post("/v1/job/nightly/periodic/force")
            assert forced.status_code == 200, forced.text
            body = forced.json()
            assert set(body) == {"EvalID", "EvalCreateIndex", "Index"}
            assert body["EvalID"]
            assert body["Index"] == body["EvalCreateIndex"]
            # The child is placed before the answer, so the server may be past the eval's index.
            assert int(forced.headers["X-Nomad-Index"]) >= body["Index"]
            (child,) = [j for j in a.agent.server.jobs.values() if j.parent_id == "nightly"]
            assert child.id.startswith("nightly/periodic-")
            assert child.periodic is None
            assert child.name == child.id
            assert not child.dispatched
            alloc = await wait_complete(a, child.id)
            assert alloc["ClientStatus"] == "complete"
            # Still a template: the parent has no allocation of its own.
            assert a.agent.server.job_allocs("nightly") == []
            # Its summary counts its children, as Nomad's (placed: running, or dead once done).
            children = (await c.get("/v1/job/nightly/summary")).json()["Children"]
            assert (children["Pending"], children["Running"] + children["Dead"]) == (0, 1)
            # The child, its ID holding a `/`, over the API as Nomad's clients address it.
            quoted = child.id.replace("/", "%2F")
            for path in (child.id, quoted):
                got = await c.get(f"/v1/job/{path}")
                assert (got.status_code, got.json()["ID"]) == (200, child.id), got.text
                (listed,) = (await c.get(f"/v1/job/{path}/allocations")).json()
                assert listed["ID"] == alloc["ID"]
                summary = (await c.get(f"/v1/job/{path}/summary")).json()
                assert summary["JobID"] == child.id
            stubs = {j["ID"]: j for j in (await c.get("/v1/jobs")).json()}
            assert (stubs[child.id]["ParentID"], stubs["nightly"]["Periodic"]) == (
                "nightly", True)
            # A method a sub-resource does not take is still a 405, not a job lookup.
            assert (await c.delete(f"/v1/job/{quoted}/summary")).status_code == 405


async def test_periodic_force_errors(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.put("/v1/jobs", json=raw_job("plain", "sleep 60", job_type="batch"))
            await c.put("/v1/jobs", json=template(
                "off", "true", Periodic={"Spec": "@daily", "Enabled": False}))
            missing = await c.put("/v1/job/nope/periodic/force")
            assert (missing.status_code, missing.text) == (404, "job not found")
            plain = await c.put("/v1/job/plain/periodic/force")
            assert (plain.status_code, plain.text) == (400, "can't force launch non-periodic job")
            off = await c.put("/v1/job/off/periodic/force")
            assert off.status_code == 400
            assert off.text == ('force launch for job "off" failed: can\'t force run '
                                "non-tracked job")
            wrong = await c.get("/v1/job/off/periodic/force")
            assert wrong.status_code == 405


async def test_dispatch_writes_payload_to_local_and_merges_meta(tmp_path: Path) -> None:
    with trio.fail_after(40):
        async with running_agent(tmp_path) as a:
            c = a.client
            job = template("render", 'test "$(cat "$NOMAD_TASK_DIR/in/data.txt")" = "hello" '
                                     '&& test "$NOMAD_META_who" = "me"',
                           ParameterizedJob={"Payload": "required", "MetaRequired": ["who"],
                                             "MetaOptional": ["note"]},
                           Meta={"who": "parent", "keep": "yes"})
            job["Job"]["TaskGroups"][0]["Tasks"][0]["DispatchPayload"] = {"File": "in/data.txt"}
            assert (await c.put("/v1/jobs", json=job)).status_code == 200
            assert (await c.get("/v1/job/render/allocations")).json() == []

            r = await c.post("/v1/job/render/dispatch", json={
                "Payload": base64.b64encode(b"hello").decode(), "Meta": {"who": "me"}})
            assert r.status_code == 200, r.text
            out = r.json()
            assert set(out) == {"DispatchedJobID", "EvalID", "EvalCreateIndex",
                                "JobCreateIndex", "Index"}
            child_id = out["DispatchedJobID"]
            prefix, _, rest = child_id.partition("/dispatch-")
            unix, _, suffix = rest.partition("-")
            assert prefix == "render"
            assert unix.isdigit()
            assert len(suffix) == 8
            int(suffix, 16)
            assert out["EvalID"]
            assert out["JobCreateIndex"] == out["Index"] > 0
            child = a.agent.server.jobs[child_id]
            assert (child.parent_id, child.dispatched, child.payload) == ("render", True,
                                                                         b"hello")
            assert child.meta == {"who": "me", "keep": "yes"}
            alloc = await wait_complete(a, child_id)
            assert alloc["ClientStatus"] == "complete", alloc
            written = tmp_path / "alloc" / alloc["ID"] / "t" / "local" / "in" / "data.txt"
            assert written.read_bytes() == b"hello"

            # A retried dispatch with the same idempotency token is the same child.
            retry = {"Payload": base64.b64encode(b"hello").decode(), "Meta": {"who": "me"},
                     "IdempotencyToken": "once"}
            first = (await c.post("/v1/job/render/dispatch", json=retry)).json()
            second = (await c.post("/v1/job/render/dispatch", json=retry)).json()
            assert first["DispatchedJobID"] == second["DispatchedJobID"] != child_id
            assert second["JobCreateIndex"] == first["JobCreateIndex"]
            assert second["EvalID"] == ""
            children = [j for j in a.agent.server.jobs.values() if j.parent_id == "render"]
            assert len(children) == 2


async def test_dispatch_errors(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.put("/v1/jobs", json=raw_job("plain", "true", job_type="batch"))
            await c.put("/v1/jobs", json=template(
                "req", "true", ParameterizedJob={"Payload": "required",
                                                 "MetaRequired": ["a", "b"]}))
            await c.put("/v1/jobs", json=template(
                "forbid", "true", ParameterizedJob={"Payload": "forbidden"}))
            p64 = base64.b64encode(b"x").decode()

            async def dispatch(job_id: str, body: dict[str, Any]) -> tuple[int, str]:
                r = await c.put(f"/v1/job/{job_id}/dispatch", json=body)
                return r.status_code, r.text

            assert await dispatch("nope", {}) == (404, "parameterized job not found")
            assert await dispatch("plain", {}) == (
                400, 'Specified job "plain" is not a parameterized job')
            assert await dispatch("req", {"Meta": {"a": "1", "b": "2"}}) == (
                400, "Payload is not provided but required by parameterized job")
            assert await dispatch("forbid", {"Payload": p64}) == (
                400, "Payload provided but forbidden by parameterized job")
            big = base64.b64encode(b"x" * (16 * 1024 + 1)).decode()
            assert await dispatch("req", {"Payload": big, "Meta": {"a": "1", "b": "2"}}) == (
                400, "Payload exceeds maximum size; 16385 > 16384")
            assert await dispatch("req", {"Payload": p64, "Meta": {"a": "1", "z": "2",
                                                                   "y": "3"}}) == (
                400, "Dispatch request included unpermitted metadata keys: [y z]")
            assert await dispatch("req", {"Payload": p64, "Meta": {"a": "1"}}) == (
                400, "Dispatch did not provide required meta keys: [b]")
            assert await dispatch("req", {"Payload": "not base64!"}) == (
                400, '"Payload" must be base64 (standard alphabet, padded)')
            assert await dispatch("req", {"Payload": p64, "Meta": {"a": 1}}) == (
                400, '"Meta" must be an object of strings')
            assert await dispatch("req", {"JobID": "other"}) == (400, "Job ID does not match")
            assert await dispatch("req", {"IdPrefixTemplate": "a/b"}) == (
                400, '"IdPrefixTemplate" must be at most 64 characters, without "/" or white '
                     "space")
            assert await dispatch("req", {"Payload": p64, "Meta": {"a": "1", "b": "2"},
                                          "Priority": 101}) == (
                400, "dispatch job priority must be between [1, 100]")
            assert (await c.get("/v1/job/req/dispatch")).status_code == 405
            assert [j.id for j in a.agent.server.jobs.values() if j.parent_id] == []
            await c.delete("/v1/job/req")
            assert await dispatch("req", {"Payload": p64, "Meta": {"a": "1", "b": "2"}}) == (
                400, 'Specified job "req" is stopped')


async def test_the_agent_launches_periodic_children_on_schedule(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            # Every second (Nomad's 7-field form), never two children at once.
            r = await a.client.put("/v1/jobs", json=template(
                "tick", "sleep 1", Periodic={"Spec": "* * * * * * *", "ProhibitOverlap": True}))
            assert r.status_code == 200, r.text
            server = a.agent.server
            while len([j for j in server.jobs.values() if j.parent_id == "tick"]) < 2:
                await server.changed.wait()
            first, second = sorted(j.id for j in server.jobs.values() if j.parent_id == "tick")
            assert first.startswith("tick/periodic-")
            assert second.startswith("tick/periodic-")
            # The second launched only once the first was done.
            done = [x.modify_time for x in server.job_allocs(first) if x.is_terminal()]
            assert done
            assert max(done) <= server.jobs[second].submit_time


async def test_periodic_parent_and_children_survive_an_agent_restart(tmp_path: Path) -> None:
    with trio.fail_after(40):
        async with running_agent(tmp_path) as a:
            await a.client.put("/v1/jobs", json=template(
                "yearly", "true", Periodic={"Spec": "@yearly"}))
            assert (await a.client.put("/v1/job/yearly/periodic/force")).status_code == 200
            before = sorted(j.id for j in a.agent.server.jobs.values())
        async with running_agent(tmp_path) as a:
            # The dispatcher's first look is over once the agent is up: nothing new.
            after = a.agent.server.jobs
            assert sorted(after) == before
            assert after["yearly"].periodic is not None
            assert after["yearly"].status == "running"
            (child,) = [j for j in after.values() if j.parent_id == "yearly"]
            assert child.id.startswith("yearly/periodic-")
            assert a.agent.server.job_allocs("yearly") == []


async def test_a_periodic_parameterized_job_dispatches_periodic_children(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            server = a.agent.server
            await a.client.put("/v1/jobs", json=template(
                "both", "true", Periodic={"Spec": "@yearly"}, ParameterizedJob={}))
            # Parameterized wins: the parent itself is never launched on its schedule.
            off = await a.client.put("/v1/job/both/periodic/force")
            assert off.status_code == 400
            r = await a.client.put("/v1/job/both/dispatch", json={})
            assert r.status_code == 200, r.text
            out = r.json()
            assert (out["EvalID"], out["EvalCreateIndex"]) == ("", 0)  # periodic: no eval
            child_id = out["DispatchedJobID"]
            assert server.job_allocs(child_id) == []  # a periodic template itself
            # Its own periodic launches can be forced, by the child's ID (which holds a "/").
            forced = await a.client.put(f"/v1/job/{child_id}/periodic/force")
            assert forced.status_code == 200, forced.text
            (grandchild,) = [j for j in server.jobs.values() if j.parent_id == child_id]
            assert grandchild.id.startswith(f"{child_id}/periodic-")
            assert grandchild.dispatched  # copied from its dispatched parent, as in Nomad


async def test_concurrent_dispatches_with_one_idempotency_token_make_one_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            server = a.agent.server
            body = template("p", "sleep 100", ParameterizedJob={"Payload": "optional"})
            assert (await c.post("/v1/jobs", json=body)).status_code == 200
            tokens = ("tok", "tok", "tok", "tok", "other")
            # The first registration is held until every request is past its token lookup
            # (registering too) or waiting to make it: the race, made certain.
            register, registering = server.register_job, 0

            def waiting() -> int:
                locks = serial._LOCKS.get(server, {})
                return sum(lock.statistics().tasks_waiting for lock in locks.values())

            async def held_register(job: Job) -> Registration:
                nonlocal registering
                registering += 1
                first = registering == 1
                # Polled: the lock's waiters announce nothing (bounded by the fail_after).
                while first:
                    if registering + waiting() >= len(tokens):
                        break
                    await trio.sleep(0.01)
                return await register(job)

            monkeypatch.setattr(server, "register_job", held_register)
            answers: list[tuple[int, str]] = []

            async def dispatch(token: str) -> None:
                r = await c.post("/v1/job/p/dispatch", json={"IdempotencyToken": token})
                answers.append((r.status_code, r.json()["DispatchedJobID"]))

            async with trio.open_nursery() as nursery:
                for token in tokens:
                    nursery.start_soon(dispatch, token)
            assert [s for s, _ in answers] == [200] * len(tokens)
            children = sorted(j.id for j in server.jobs.values() if j.parent_id == "p")
            assert len(children) == 2
            assert sorted({child for _, child in answers}) == children


async def test_a_second_force_in_the_same_second_names_no_evaluation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with trio.fail_after(40):
        async with running_agent(tmp_path) as a:
            c = a.client
            r = await c.put("/v1/jobs", json=template(
                "nightly", "sleep 100", Periodic={"Spec": "0 0 1 1 *"}))
            assert r.status_code == 200, r.text
            second = int(time.time())
            # Both forces in one second: the child's ID (`<id>/periodic-<unix>`) is the same.
            monkeypatch.setattr(periodic_api, "time", SimpleNamespace(time=lambda: second))
            first = (await c.post("/v1/job/nightly/periodic/force")).json()
            again = await c.post("/v1/job/nightly/periodic/force")
            assert again.status_code == 200
            assert first["EvalID"]
            assert first["EvalCreateIndex"] > 0
            assert again.json() == {"EvalID": "", "EvalCreateIndex": 0,
                                    "Index": again.json()["Index"]}
            assert again.json()["Index"] >= first["Index"]
            children = [j.id for j in a.agent.server.jobs.values() if j.parent_id == "nightly"]
            assert children == [f"nightly/periodic-{second}"]

"""/v1/vars and /v1/var/<path> over a real socket: shapes, check-and-set, errors, at rest."""

from __future__ import annotations

import stat
from pathlib import Path

import trio

from tests.agent_support import running_agent


async def test_a_variable_is_written_read_and_listed_without_its_items(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            put = await c.put("/v1/var/app/db", json={"Items": {"user": "u", "pass": "p"}})
            assert put.status_code == 200
            written = put.json()
            assert written["Namespace"] == "default"
            assert written["Path"] == "app/db"
            assert written["Items"] == {"user": "u", "pass": "p"}
            assert written["CreateIndex"] == written["ModifyIndex"] > 0
            assert written["CreateTime"] == written["ModifyTime"] > 0
            # The index is the server's one counter: the header has reached it.
            assert int(put.headers["X-Nomad-Index"]) >= written["ModifyIndex"]

            got = await c.get("/v1/var/app/db")
            assert got.status_code == 200
            assert got.json() == written

            listed = (await c.get("/v1/vars")).json()
            assert listed == [{k: v for k, v in written.items() if k != "Items"}]
            assert (await c.get("/v1/vars", params={"prefix": "app/"})).json() == listed
            assert (await c.get("/v1/vars", params={"prefix": "other"})).json() == []

            # A job registered after the variable takes a later index of the same counter.
            job = await c.put("/v1/jobs", json={"Job": {
                "ID": "j", "Type": "batch", "TaskGroups": [{"Name": "g", "Tasks": [
                    {"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1s"}}]}]}})
            assert job.json()["JobModifyIndex"] > written["ModifyIndex"]


async def test_variables_are_scoped_by_namespace(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            await c.put("/v1/var/x", json={"Items": {"k": "default"}})
            in_body = await c.put("/v1/var/x", json={"Namespace": "a", "Items": {"k": "a"}})
            assert in_body.json()["Namespace"] == "a"
            in_query = await c.put("/v1/var/y", params={"namespace": "b"},
                                   json={"Items": {"k": "b"}})
            assert in_query.json()["Namespace"] == "b"
            assert (await c.get("/v1/var/x")).json()["Items"] == {"k": "default"}
            assert (await c.get("/v1/var/x", params={"namespace": "a"})).json()["Items"] == \
                {"k": "a"}
            assert (await c.get("/v1/var/y")).status_code == 404
            every = (await c.get("/v1/vars", params={"namespace": "*"})).json()
            assert [(v["Namespace"], v["Path"]) for v in every] == [
                ("a", "x"), ("b", "y"), ("default", "x")]
            assert [v["Path"] for v in (await c.get("/v1/vars", params={
                "namespace": "b"})).json()] == ["y"]
            star = await c.put("/v1/var/z", params={"namespace": "*"},
                               json={"Items": {"k": "v"}})
            assert star.status_code == 400


async def test_check_and_set_conflicts_answer_409_with_what_is_stored(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            first = await c.put("/v1/var/p", params={"cas": "0"}, json={"Items": {"v": "1"}})
            assert first.status_code == 200
            stored = first.json()

            again = await c.put("/v1/var/p", params={"cas": "0"}, json={"Items": {"v": "2"}})
            assert again.status_code == 409
            assert again.json() == stored
            stale = await c.put("/v1/var/p", params={"cas": str(stored["ModifyIndex"] - 1)},
                                json={"Items": {"v": "2"}})
            assert stale.status_code == 409
            assert stale.json()["Items"] == {"v": "1"}

            ok = await c.put("/v1/var/p", params={"cas": str(stored["ModifyIndex"])},
                             json={"Items": {"v": "2"}})
            assert ok.status_code == 200
            assert ok.json()["ModifyIndex"] > stored["ModifyIndex"]
            assert ok.json()["CreateIndex"] == stored["CreateIndex"]

            missing = await c.put("/v1/var/q", params={"cas": "7"}, json={"Items": {"v": "1"}})
            assert missing.status_code == 409
            assert missing.json() == {"Namespace": "default", "Path": "q", "CreateIndex": 0,
                                      "ModifyIndex": 0, "CreateTime": 0, "ModifyTime": 0,
                                      "Items": None}

            wrong = await c.delete("/v1/var/p", params={"cas": str(stored["ModifyIndex"])})
            assert wrong.status_code == 409
            assert wrong.json()["Items"] == {"v": "2"}
            gone = await c.delete("/v1/var/p", params={"cas": str(ok.json()["ModifyIndex"])})
            assert gone.status_code == 204
            assert (await c.get("/v1/var/p")).status_code == 404
            assert (await c.delete("/v1/var/p")).status_code == 204  # nothing there: fine


async def test_bad_requests_answer_nomads_errors(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            missing = await c.get("/v1/var/nothing/here")
            assert (missing.status_code, missing.text) == (404, "variable not found")
            for path, says in [("a.b", 'invalid path "a.b"'),
                               ("nomad", '"nomad" is a reserved top-level directory'),
                               ("nomad/x", 'only paths at "nomad/jobs"'),
                               ("x" * 129, "invalid path")]:
                bad = await c.put(f"/v1/var/{path}", json={"Items": {"k": "v"}})
                assert bad.status_code == 400, path
                assert says in bad.text
            assert (await c.put("/v1/var/nomad/jobs/web", json={"Items": {"k": "v"}})
                    ).status_code == 200
            no_items = await c.put("/v1/var/a", json={"Items": {}})
            assert (no_items.status_code, no_items.text) == (
                400, "variable missing required Items object")
            not_strings = await c.put("/v1/var/a", json={"Items": {"k": 1}})
            assert not_strings.status_code == 400
            big = await c.put("/v1/var/a", json={"Items": {"k": "v" * 65536}})
            assert (big.status_code, big.text) == (
                400, "variables are limited to 64KiB in total size")
            bad_cas = await c.put("/v1/var/a", params={"cas": "-1"}, json={"Items": {"k": "v"}})
            assert bad_cas.status_code == 400
            assert bad_cas.text.startswith("can not parse cas")
            assert (await c.get("/v1/var/")).status_code == 400
            assert (await c.patch("/v1/var/a", json={})).status_code == 405
            assert (await c.post("/v1/vars", json={})).status_code == 405
            not_json = await c.put("/v1/var/a", content=b"{")
            assert not_json.status_code == 400
            # Only the valid write was stored.
            assert [v["Path"] for v in (await c.get("/v1/vars")).json()] == ["nomad/jobs/web"]


async def test_variables_need_the_token_when_the_agent_has_one(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path, token="s3cret") as agent:
            assert (await agent.client.put("/v1/var/a", json={"Items": {"k": "v"}})
                    ).status_code == 200
            agent.client.headers.pop("X-Nomad-Token")
            for method, path in [("GET", "/v1/vars"), ("GET", "/v1/var/a"),
                                 ("PUT", "/v1/var/a"), ("DELETE", "/v1/var/a")]:
                denied = await agent.client.request(method, path, json={"Items": {"k": "x"}})
                assert denied.status_code == 403, (method, path)
            agent.client.headers["X-Nomad-Token"] = "s3cret"
            assert (await agent.client.get("/v1/var/a")).json()["Items"] == {"k": "v"}


async def test_items_are_never_on_disk_in_clear_and_survive_a_restart(tmp_path: Path) -> None:
    secret = "correct-horse-battery-staple"
    with trio.fail_after(60):
        async with running_agent(tmp_path) as agent:
            for n in range(3):  # indexes past what the server's own state file records
                await agent.client.put(f"/v1/var/before/{n}", json={"Items": {"k": "v"}})
            written = (await agent.client.put("/v1/var/app/db", json={
                "Items": {"password": secret}})).json()
            assert written["ModifyIndex"] > 3
        server_dir = tmp_path / "server"
        for name in ("keyring", "objects.db"):
            assert stat.S_IMODE((server_dir / name).stat().st_mode) == 0o600, name
        assert stat.S_IMODE(server_dir.stat().st_mode) == 0o700
        for path in server_dir.iterdir():
            raw = path.read_bytes()
            assert secret.encode() not in raw, path.name
            assert b"password" not in raw or path.name == "keyring", path.name
        assert b"app/db" in (server_dir / "objects.db").read_bytes()  # the metadata is there

        async with running_agent(tmp_path) as again:
            got = await again.client.get("/v1/var/app/db")
            assert got.json() == written
            # The restarted server never hands out an index a variable already has.
            assert int(got.headers["X-Nomad-Index"]) >= written["ModifyIndex"]
            later = (await again.client.put("/v1/var/other", json={"Items": {"k": "v"}})).json()
            assert later["CreateIndex"] > written["ModifyIndex"]


async def test_a_blocking_list_wakes_when_a_variable_is_written(tmp_path: Path) -> None:
    with trio.fail_after(20):  # far less than the query's own wait: only a wake-up passes
        async with running_agent(tmp_path) as agent:
            await agent.client.put("/v1/var/before", json={"Items": {"k": "v"}})
            first = await agent.client.get("/v1/vars")
            index = int(first.headers["X-Nomad-Index"])
            answered: list[list[dict[str, object]]] = []

            async def block() -> None:
                got = await agent.client.get("/v1/vars", params={"index": str(index),
                                                                 "wait": "5m"})
                answered.append(got.json())

            changed = agent.agent.server.changed
            waiting = changed.statistics().tasks_waiting
            async with trio.open_nursery() as nursery:
                nursery.start_soon(block)
                # Until the query waits on the server's change event (as the agent does).
                while True:
                    if changed.statistics().tasks_waiting > waiting:
                        break
                    await trio.sleep(0.01)
                await agent.client.put("/v1/var/woken", json={"Items": {"k": "v"}})
            assert [v["Path"] for v in answered[0]] == ["before", "woken"]


async def test_python_nomad_reads_and_writes_variables(tmp_path: Path) -> None:
    import nomad
    from nomad.api import exceptions

    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            port = int(agent.address.rsplit(":", 1)[1])
            client = nomad.Nomad(host="127.0.0.1", port=port, timeout=10)

            def drive() -> None:
                client.variable.create_variable("example/first", {"Items": {"user": "test"}})
                client.variable.create_variable("example/second", {"Items": {"u": "t"}},
                                                namespace="default", cas=0)
                assert "example/first" in client.variables
                assert client.variable.get_variable("example/first")["Items"] == {
                    "user": "test"}
                assert "no_exist" not in client.variable
                made = client.variable.create_variable("with_cas", {"Items": {"a": "b"}})
                try:
                    client.variable.delete_variable("with_cas", cas=made["ModifyIndex"] + 1)
                except exceptions.VariableConflict:
                    pass
                else:
                    raise AssertionError("a stale cas delete must conflict")
                client.variable.delete_variable("with_cas", cas=made["ModifyIndex"])
                assert len(client.variables.get_variables()) == 2
                client.namespace.create_namespace({"Name": "api", "Description": "d"})
                assert client.namespace.get_namespace("api")["Description"] == "d"
                client.namespace.delete_namespace("api")

            await trio.to_thread.run_sync(drive)


async def test_a_variable_may_be_written_in_a_namespace_that_does_not_exist(
        tmp_path: Path) -> None:
    """As Nomad's (community edition) Variables.Apply: no namespace check on a write."""
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            assert (await c.get("/v1/namespace/nope")).status_code == 404
            r = await c.put("/v1/var/x?namespace=nope", json={"Items": {"k": "v"}})
            assert r.status_code == 200
            assert r.json()["Namespace"] == "nope"
            read = await c.get("/v1/var/x?namespace=nope")
            assert read.json()["Items"] == {"k": "v"}
            assert (await c.get("/v1/var/x")).status_code == 404

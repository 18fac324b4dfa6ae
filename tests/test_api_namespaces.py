"""/v1/namespaces, /v1/namespace[/<name>] and jobs scoped by `?namespace=`, over a socket."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.agent_support import mock_job, running_agent


def _in(namespace: str, job: dict[str, object]) -> dict[str, object]:
    body = job["Job"]
    assert isinstance(body, dict)
    body["Namespace"] = namespace
    return job


async def test_default_always_exists_and_namespaces_are_created_and_updated(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            listed = (await c.get("/v1/namespaces")).json()
            assert [n["Name"] for n in listed] == ["default"]
            default = (await c.get("/v1/namespace/default")).json()
            assert default["Description"] == "Default shared namespace"
            assert default["NodePoolConfiguration"]["Default"] == "default"

            made = await c.put("/v1/namespace/team-a", json={
                "Name": "team-a", "Description": "A", "Meta": {"owner": "a"},
                "Quota": "ignored"})
            assert made.status_code == 200
            got = (await c.get("/v1/namespace/team-a")).json()
            assert (got["Name"], got["Description"], got["Meta"]) == ("team-a", "A",
                                                                       {"owner": "a"})
            assert got["CreateIndex"] == got["ModifyIndex"] > 0
            assert int(made.headers["X-Nomad-Index"]) >= got["ModifyIndex"]

            # python-nomad and Nomad's Go client create with PUT/POST /v1/namespace.
            assert (await c.post("/v1/namespace", json={"Name": "b"})).status_code == 200
            await c.post("/v1/namespace/team-a", json={"Name": "team-a", "Description": "A2"})
            updated = (await c.get("/v1/namespace/team-a")).json()
            assert updated["Description"] == "A2"
            assert updated["CreateIndex"] == got["CreateIndex"]
            assert updated["ModifyIndex"] > got["ModifyIndex"]
            assert [n["Name"] for n in (await c.get("/v1/namespaces")).json()] == [
                "b", "default", "team-a"]
            assert [n["Name"] for n in (await c.get("/v1/namespaces", params={
                "prefix": "te"})).json()] == ["team-a"]


async def test_namespace_errors(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            missing = await c.get("/v1/namespace/nope")
            assert (missing.status_code, missing.text) == (404, "Namespace not found")
            mismatch = await c.put("/v1/namespace/a", json={"Name": "b"})
            assert (mismatch.status_code, mismatch.text) == (
                400, "Namespace name does not match request path")
            invalid = await c.put("/v1/namespace/a_b", json={"Name": "a_b"})
            assert invalid.status_code == 400
            assert invalid.text.startswith('Invalid namespace "a_b": 1 error occurred:')
            bad_meta = await c.put("/v1/namespace/a", json={"Name": "a", "Meta": {"k": 1}})
            assert bad_meta.status_code == 400
            no_default = await c.delete("/v1/namespace/default")
            assert (no_default.status_code, no_default.text) == (
                400, "can not delete default namespace")
            assert (await c.delete("/v1/namespace/nope")).status_code == 404
            assert (await c.patch("/v1/namespace/a", json={})).status_code == 405
            assert (await c.put("/v1/namespaces", json={})).status_code == 405
            assert [n["Name"] for n in (await c.get("/v1/namespaces")).json()] == ["default"]


async def test_a_namespace_with_live_jobs_or_variables_is_not_deleted(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            await c.put("/v1/namespace/a", json={"Name": "a"})
            await c.put("/v1/var/x", params={"namespace": "a"}, json={"Items": {"k": "v"}})
            assert (await c.put("/v1/jobs", json=_in("a", mock_job("web")))).status_code == 200
            refused = await c.delete("/v1/namespace/a")
            assert refused.status_code == 400
            assert refused.text == (
                '3 errors occurred:\n'
                '\t* namespace "a" has non-terminal jobs in regions: [global]\n'
                '\t* namespace "a" has non-terminal allocations in regions: [global]\n'
                '\t* namespace "a" has variables associated with it in regions: [global]\n\n')
            await c.delete("/v1/var/x", params={"namespace": "a"})
            await c.delete("/v1/job/web", params={"namespace": "a", "purge": "true"})
            deleted = await c.delete("/v1/namespace/a")
            assert deleted.status_code == 200
            assert (await c.get("/v1/namespace/a")).status_code == 404


async def test_jobs_are_scoped_by_namespace(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as agent:
            c = agent.client
            nowhere = await c.put("/v1/jobs", json=_in("a", mock_job("web")))
            assert (nowhere.status_code, nowhere.text) == (
                400, 'job "web" is in nonexistent namespace "a"')
            await c.put("/v1/namespace/a", json={"Name": "a"})
            assert (await c.put("/v1/jobs", json=_in("a", mock_job("web")))).status_code == 200
            # A job without a Namespace takes `?namespace=`, as with Nomad's agent.
            assert (await c.put("/v1/jobs", params={"namespace": "a"},
                                json=mock_job("api"))).status_code == 200
            assert (await c.put("/v1/jobs", json=mock_job("db"))).status_code == 200

            assert (await c.get("/v1/job/web")).status_code == 404
            assert (await c.get("/v1/job/web/allocations")).json() == []  # another's
            assert (await c.get("/v1/job/web/evaluations")).json() == []
            assert (await c.delete("/v1/job/web")).status_code == 404
            job = (await c.get("/v1/job/web", params={"namespace": "a"})).json()
            assert job["Namespace"] == "a"
            assert (await c.get("/v1/job/api", params={"namespace": "a"})).status_code == 200

            def ids(jobs: list[dict[str, str]]) -> list[str]:
                return [j["ID"] for j in jobs]

            assert ids((await c.get("/v1/jobs")).json()) == ["db"]
            assert ids((await c.get("/v1/jobs", params={"namespace": "a"})).json()) == [
                "api", "web"]
            # by namespace, then ID (nomad/job_endpoint.go `List`: "<namespace>.<id>" order)
            assert ids((await c.get("/v1/jobs", params={"namespace": "*"})).json()) == [
                "api", "web", "db"]
            allocs = (await c.get("/v1/allocations")).json()
            assert {a["JobID"] for a in allocs} == {"db"}
            every = (await c.get("/v1/allocations", params={"namespace": "*"})).json()
            assert {a["JobID"] for a in every} == {"api", "db", "web"}
            in_a = (await c.get("/v1/job/web/allocations", params={"namespace": "a"})).json()
            assert [a["Namespace"] for a in in_a] == ["a"]

            # The server keys jobs by ID: one ID cannot live in two namespaces at once.
            twice = await c.put("/v1/jobs", json=mock_job("web"))
            assert (twice.status_code, twice.text) == (
                400, 'job "web" already exists in namespace "a"')

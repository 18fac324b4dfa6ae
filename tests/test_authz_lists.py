"""Lists across namespaces show what the token may read (Nomad's `allowedNSes` filters): with
`?namespace=*`, a token that may read only namespace `a` sees `a`'s jobs, allocations,
evaluations, deployments, search matches and events, and nothing of `default` or of the node.

Layer 2: an in-process agent on a real socket (tests/authz_support.py), the real clock,
bounded by `trio.fail_after`. Every filtered answer is compared with the management token's,
which sees both namespaces: a filter that is not there fails, and so does a fixture that
has nothing to filter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import trio

from tests.authz_support import AclAgent, acl_agent, rolled_out

#: Jobs in `default` and in `a`: a fuzzy search for "lst" finds both.
IN_DEFAULT, IN_A = "lst-d", "lst-a"
READ_A = 'namespace "a" { policy = "read" }'


async def _running(admin: httpx2.AsyncClient, job_id: str, namespace: str) -> None:
    while True:  # bounded by the caller
        allocs = (await admin.get(f"/v1/job/{job_id}/allocations",
                                  params={"namespace": namespace})).json()
        if allocs and allocs[0]["ClientStatus"] == "running":
            return
        await trio.sleep(0.05)


async def _two_namespaces(at: AclAgent) -> int:
    """A running job in `default`, then one in `a`, then an evaluation of the second: its
    index, past every event of both jobs' registers."""
    admin = at.admin
    assert (await admin.put("/v1/namespace/a", json={"Name": "a"})).status_code == 200
    for job_id, namespace in ((IN_DEFAULT, "default"), (IN_A, "a")):
        registered = await admin.post("/v1/jobs", json=rolled_out(job_id, namespace))
        assert registered.status_code == 200, registered.text
        await _running(admin, job_id, namespace)
    evaluated = await admin.post(f"/v1/job/{IN_A}/evaluate", params={"namespace": "a"},
                                 json={})
    assert evaluated.status_code == 200, evaluated.text
    return int(evaluated.json()["EvalCreateIndex"])


async def _get(at: AclAgent, secret: str, path: str, **params: str) -> Any:
    answer = await at.admin.get(path, params=params, headers={"X-Nomad-Token": secret})
    assert answer.status_code == 200, (path, answer.status_code, answer.text)
    return answer.json()


def _namespaces(objects: list[dict[str, Any]]) -> set[str]:
    return {o["Namespace"] for o in objects}


async def test_all_namespaces_lists_only_what_the_token_may_read(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            await _two_namespaces(at)
            reader = at.resolver.token(READ_A)
            admin = at.resolver.management()
            for path in ("/v1/jobs", "/v1/allocations", "/v1/evaluations",
                         "/v1/deployments"):
                every = await _get(at, admin, path, namespace="*")
                assert _namespaces(every) == {"default", "a"}, (path, every)
                seen = await _get(at, reader, path, namespace="*")
                assert _namespaces(seen) == {"a"}, (path, seen)
                assert seen == [o for o in every if o["Namespace"] == "a"], path
                # Its own namespace named, or none (`default`): a list of `a`, or refused.
                assert await _get(at, reader, path, namespace="a") == seen
                refused = await at.admin.get(path, headers={"X-Nomad-Token": reader})
                assert (refused.status_code, refused.text) == (403, "Permission denied")


async def test_a_job_list_takes_list_jobs_not_read_job(tmp_path: Path) -> None:
    # nomad/job_endpoint.go `List` checks list-jobs; `Alloc.List` read-job.
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            await _two_namespaces(at)
            read_job = at.resolver.token('namespace "a" { capabilities = ["read-job"] }')
            headers = {"X-Nomad-Token": read_job}
            jobs = await at.admin.get("/v1/jobs", params={"namespace": "*"}, headers=headers)
            assert jobs.status_code == 403
            allocs = await _get(at, read_job, "/v1/allocations", namespace="*")
            assert _namespaces(allocs) == {"a"}


async def _search(at: AclAgent, secret: str, path: str, body: dict[str, str]) -> Any:
    answer = await at.admin.post(path, params={"namespace": "*"}, json=body,
                                 headers={"X-Nomad-Token": secret})
    assert answer.status_code == 200, answer.text
    return answer.json()["Matches"]


async def test_a_search_of_all_namespaces_finds_only_what_the_token_may_read(
        tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            await _two_namespaces(at)
            reader = at.resolver.token(READ_A)
            admin = at.resolver.management()
            prefix = {"Prefix": "", "Context": "all"}
            every = await _search(at, admin, "/v1/search", prefix)
            seen = await _search(at, reader, "/v1/search", prefix)
            assert sorted(every["jobs"]) == [IN_A, IN_DEFAULT]
            assert seen["jobs"] == [IN_A]
            a_allocs = {a["ID"] for a in await _get(at, admin, "/v1/allocations",
                                                    namespace="a")}
            assert set(every["allocs"]) > set(seen["allocs"]) == a_allocs
            a_evals = {e["ID"] for e in await _get(at, admin, "/v1/evaluations", namespace="a")}
            assert set(every["evals"]) > set(seen["evals"]) == a_evals
            # Contexts the token may not read are left out, not answered empty.
            assert every["nodes"]
            assert "nodes" not in seen
            fuzzy = {"Text": "lst", "Context": "jobs"}
            every_fuzzy = await _search(at, admin, "/v1/search/fuzzy", fuzzy)
            seen_fuzzy = await _search(at, reader, "/v1/search/fuzzy", fuzzy)
            assert sorted(m["ID"] for m in every_fuzzy["jobs"]) == [IN_A, IN_DEFAULT]
            assert [m["ID"] for m in seen_fuzzy["jobs"]] == [IN_A]
            # A context named that the token may not read, in a namespace: refused.
            refused = await at.admin.post("/v1/search", json={"Prefix": "", "Context": "nodes"},
                                          params={"namespace": "a"},
                                          headers={"X-Nomad-Token": reader})
            assert refused.status_code == 403


async def _events(at: AclAgent, secret: str, until: int, namespace: str = "*",
                  topics: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every event the stream shows `secret`, from the oldest kept, until one of index
    `until` or later (records come in index order: all before it have been seen)."""
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"namespace": namespace, "topic": list(topics)}
    async with at.admin.stream("GET", "/v1/event/stream", params=params,
                               headers={"X-Nomad-Token": secret}) as stream:
        assert stream.status_code == 200
        async for line in stream.aiter_lines():
            record = json.loads(line) if line.strip() else {}
            seen += record.get("Events", [])
            if record.get("Index", 0) >= until:
                return seen
    raise AssertionError("the stream ended")


async def test_the_event_stream_shows_only_what_the_token_may_read(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            last = await _two_namespaces(at)
            every = await _events(at, at.resolver.management(), last)
            read_a = at.resolver.token(READ_A)
            # Nomad's subscription rule (nomad/event_endpoint.go `validateNsOp`): every topic
            # is management's alone, and a namespace topic needs read-job in every namespace
            # asked for.
            for params in ({"namespace": "a"}, {"namespace": "*", "topic": "Job"},
                           {"namespace": "a", "topic": "Node"}):
                refused = await at.admin.get("/v1/event/stream", params=params,
                                             headers={"X-Nomad-Token": read_a})
                assert refused.status_code == 403, params
            job_topics = ("Job", "Allocation", "Evaluation")
            seen = await _events(at, read_a, last, "a", job_topics)
            assert {(e["Topic"], e["Namespace"]) for e in every} >= {
                ("Job", "default"), ("Job", "a"), ("Allocation", "default"),
                ("Allocation", "a")}
            assert any(e["Topic"] == "Node" for e in every)
            assert {e["Topic"] for e in seen} >= {"Job", "Allocation", "Evaluation"}
            assert all(e["Topic"] != "Node" and e["Namespace"] == "a" for e in seen), seen
            # A token with node:read besides sees the node's events too.
            node_reader = at.resolver.token(READ_A + '\nnode { policy = "read" }')
            with_node = await _events(at, node_reader, last, "a", (*job_topics, "Node"))
            assert any(e["Topic"] == "Node" for e in with_node)
            assert {e["Namespace"] for e in with_node if e["Topic"] != "Node"} == {"a"}

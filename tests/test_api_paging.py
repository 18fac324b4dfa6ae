"""`?filter=`, `?per_page=`, `?next_token=` and `?reverse=` on the list endpoints
(runtime/api/paging.py), over a real socket (layer 2: an in-process agent, the real clock,
bounded by `trio.fail_after`).

Pages walked with their next tokens concatenate to the whole list, in its order, with no
duplicate; tokens have Nomad's forms; filters keep what they match and refuse with Nomad's 400
texts; ACL filtering happens before pagination, so a reader's pages hold only what it may
read and a page is never short or padded with what it may not.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import mock_job, running_agent, wait_status
from tests.authz_support import acl_agent, rolled_out

pytestmark = pytest.mark.slow

JOBS = ("pa", "pb", "pc", "pd", "pe")


async def _pages(client: httpx2.AsyncClient, path: str, per_page: int,
                 **params: str) -> tuple[list[Any], list[str]]:
    """Every page of `path`, walked with the next tokens: the items and the tokens seen."""
    items: list[Any] = []
    tokens: list[str] = []
    token = ""
    for _ in range(100):
        query = {**params, "per_page": str(per_page), **({"next_token": token} if token else {})}
        answer = await client.get(path, params=query)
        assert answer.status_code == 200, (path, answer.text)
        page = answer.json()
        assert len(page) <= per_page
        items += page
        token = answer.headers.get("X-Nomad-NextToken", "")
        if not token:
            return items, tokens
        assert len(page) == per_page  # only a full page has a successor
        tokens.append(token)
    raise AssertionError("the pages never ended")


def _ids(items: list[dict[str, Any]], key: str = "ID") -> list[str]:
    return [str(i[key]) for i in items]


async def _registered(client: httpx2.AsyncClient) -> None:
    for job_id in JOBS:
        answer = await client.post("/v1/jobs", json=mock_job(job_id))
        assert answer.status_code == 200, answer.text
    for job_id in JOBS:
        await wait_status(client, job_id, "running")


async def test_pages_concatenate_to_the_whole_list_with_nomads_tokens(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            await _registered(c)
            for path, key in (("/v1/jobs", "ID"), ("/v1/evaluations", "ID"),
                              ("/v1/allocations", "ID")):
                whole = (await c.get(path)).json()
                assert len(whole) >= len(JOBS), path
                assert "X-Nomad-NextToken" not in (await c.get(path)).headers
                for per_page in (1, 2, 3):
                    items, tokens = await _pages(c, path, per_page)
                    assert _ids(items, key) == _ids(whole, key), (path, per_page)
                    assert len(set(_ids(items, key))) == len(items)
                    assert len(tokens) == (len(whole) - 1) // per_page
                    # each token names the first item of the page it opens
                    for n, token in enumerate(tokens, start=1):
                        first = items[n * per_page]
                        if path == "/v1/jobs":
                            assert token == f"default.{first['ID']}"
                        else:
                            assert token == f"{first['CreateIndex']}.{first['ID']}"
            jobs = _ids((await c.get("/v1/jobs")).json())
            assert jobs == sorted(jobs)
            evals = (await c.get("/v1/evaluations")).json()
            assert [(e["CreateIndex"], e["ID"]) for e in evals] == sorted(
                (e["CreateIndex"], e["ID"]) for e in evals)
            # ?reverse=true walks the other way, and so do its pages
            backwards = (await c.get("/v1/evaluations", params={"reverse": "true"})).json()
            assert _ids(backwards) == _ids(evals)[::-1]
            items, _ = await _pages(c, "/v1/evaluations", 2, reverse="true")
            assert _ids(items) == _ids(evals)[::-1]
            # a prefix lists by ID, with ID tokens
            prefix = evals[0]["ID"][:1]
            by_prefix = (await c.get("/v1/evaluations", params={"prefix": prefix})).json()
            answer = await c.get("/v1/evaluations", params={"prefix": prefix, "per_page": "1"})
            if len(by_prefix) > 1:
                assert answer.headers["X-Nomad-NextToken"] == sorted(_ids(by_prefix))[1]
            # a token past the end: an empty page; a token between items starts after it
            answer = await c.get("/v1/jobs", params={"next_token": "default.zzz"})
            assert answer.json() == []
            answer = await c.get("/v1/jobs", params={"next_token": "default.pbb"})
            assert _ids(answer.json()) == ["pc", "pd", "pe"]


async def test_a_filter_keeps_what_it_matches_and_pages_what_it_kept(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            await _registered(c)
            wanted = 'ID matches "^p[bde]$" and Type == service'
            answer = await c.get("/v1/jobs", params={"filter": wanted})
            assert _ids(answer.json()) == ["pb", "pd", "pe"]
            items, tokens = await _pages(c, "/v1/jobs", 2, filter=wanted)
            assert (_ids(items), tokens) == (["pb", "pd", "pe"], ["default.pe"])
            # the filter sees the whole object (the job's groups), not only the stub
            answer = await c.get("/v1/jobs",
                                 params={"filter": 'TaskGroups.0.Tasks.0.Driver == mock_driver'
                                                   ' and ID == pc'})
            assert _ids(answer.json()) == ["pc"]
            allocs = (await c.get("/v1/allocations",
                                  params={"filter": 'JobID == pa and ClientStatus == running'}
                                  )).json()
            assert [x["JobID"] for x in allocs] == ["pa"]
            evals = (await c.get("/v1/evaluations",
                                 params={"filter": 'JobID != pa and TriggeredBy == '
                                                   '"job-register"'})).json()
            assert sorted({e["JobID"] for e in evals}) == ["pb", "pc", "pd", "pe"]
            # Nomad's 400s: a filter that does not parse, one that does not fit the objects
            answer = await c.get("/v1/jobs", params={"filter": "ID =="})
            assert (answer.status_code, answer.text) == (
                400, "failed to create result paginator: failed to read filter expression: "
                     "1:6 (5): no match found, expected: \"-\", \"0\", \"\\\"\", \"`\", "
                     "[ \\t\\r\\n], [1-9] or [a-zA-Z]")
            answer = await c.get("/v1/evaluations", params={"filter": "Nope == 1"})
            assert (answer.status_code, answer.text) == (
                400, "failed to read result page: error finding value in datum: /Nope at "
                     'part 0: couldn\'t find key: struct field with name "Nope"')
            answer = await c.get("/v1/evaluations", params={"filter": "JobID == pa",
                                                            "job": "pa"})
            assert (answer.status_code, answer.text) == (
                400, "Filter expression cannot be used with other filter parameters")
            answer = await c.get("/v1/jobs", params={"per_page": "two"})
            assert (answer.status_code, answer.text) == (
                400, "Expect a number for `per_page` query string parameter")


async def test_variables_pools_and_nodes_page_by_their_own_tokens(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            for path in ("app/a", "app/b", "app/c", "db/x"):
                answer = await c.put(f"/v1/var/{path}", json={"Items": {"k": path}})
                assert answer.status_code == 200, answer.text
            items, tokens = await _pages(c, "/v1/vars", 1)
            assert _ids(items, "Path") == ["app/a", "app/b", "app/c", "db/x"]
            assert tokens == ["default.app/b", "default.app/c", "default.db/x"]
            answer = await c.get("/v1/vars", params={"filter": 'Path matches "^app/[bc]$"'})
            assert _ids(answer.json(), "Path") == ["app/b", "app/c"]
            for name in ("p1", "p2", "p3"):
                made = await c.put("/v1/node/pools", json={"Name": name})
                assert made.status_code == 200, made.text
            whole = _ids((await c.get("/v1/node/pools")).json(), "Name")
            items, tokens = await _pages(c, "/v1/node/pools", 2)
            assert _ids(items, "Name") == whole == sorted(whole)
            assert set(tokens) <= set(whole)
            answer = await c.get("/v1/node/pools", params={"filter": 'Name matches "^p"'})
            assert _ids(answer.json(), "Name") == ["p1", "p2", "p3"]
            node_id = a.agent.node.id
            answer = await c.get("/v1/nodes", params={"filter": f'ID == "{node_id}"'})
            assert _ids(answer.json()) == [node_id]
            answer = await c.get("/v1/nodes", params={"filter": 'Status != ready'})
            assert answer.json() == []
            answer = await c.get("/v1/node/pool/default/nodes",
                                 params={"filter": "Attributes is not empty"})
            assert _ids(answer.json()) == [node_id]  # the whole node, not its stub
            for job_id in ("ja", "jb"):
                assert (await c.post("/v1/jobs", json=mock_job(job_id))).status_code == 200
            items, tokens = await _pages(c, "/v1/node/pool/default/jobs", 1)
            assert (_ids(items), tokens) == (["ja", "jb"], ["default.jb"])


READ_A = 'namespace "a" { policy = "read" }'


async def test_acl_filtering_comes_before_pagination(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            admin = at.admin
            assert (await admin.put("/v1/namespace/a", json={"Name": "a"})).status_code == 200
            # interleaved, so that a's objects are not one run of the unfiltered order
            for job_id, namespace in (("d1", "default"), ("a1", "a"), ("d2", "default"),
                                      ("a2", "a"), ("d3", "default"), ("a3", "a")):
                answer = await admin.post("/v1/jobs", json=rolled_out(job_id, namespace))
                assert answer.status_code == 200, answer.text
            reader = httpx2.AsyncClient(base_url=at.address, timeout=20,
                                        headers={"X-Nomad-Token": at.resolver.token(READ_A)})
            async with reader:
                for path in ("/v1/jobs", "/v1/evaluations", "/v1/allocations",
                             "/v1/deployments"):
                    every = (await admin.get(path, params={"namespace": "*"})).json()
                    mine = [o for o in every if o["Namespace"] == "a"]
                    assert len(mine) == 3, (path, every)
                    assert len(every) == 6, (path, every)
                    items, tokens = await _pages(reader, path, 1, namespace="*")
                    assert _ids(items) == _ids(mine), path
                    assert len(tokens) == 2  # never a page for what the reader cannot see
                    hidden = {o["ID"] for o in every if o["Namespace"] != "a"}
                    assert not any(re.search(i, t) for i in hidden for t in tokens)
                    # a filter naming the hidden objects finds nothing
                    answer = await reader.get(path, params={"namespace": "*",
                                                            "filter": 'Namespace == default'})
                    assert answer.json() == []


async def test_acl_tokens_page_by_create_index_and_filter_their_stubs(tmp_path: Path) -> None:
    from tests.test_api_acl import acl_agent as bootstrappable
    from tests.test_api_acl import as_token, bootstrap

    with trio.fail_after(60):
        async with bootstrappable(tmp_path) as a:
            c = a.client
            root = as_token((await bootstrap(c))["SecretID"])
            for name in ("t1", "t2", "t3"):
                made = await c.post("/v1/acl/token", headers=root, json={
                    "Name": name, "Type": "client", "Policies": ["p"]})
                assert made.status_code == 200, made.text
            c.headers.update(root)
            whole = (await c.get("/v1/acl/tokens")).json()
            assert [t["Name"] for t in whole][1:] == ["t1", "t2", "t3"]
            items, tokens = await _pages(c, "/v1/acl/tokens", 2)
            assert _ids(items, "AccessorID") == _ids(whole, "AccessorID")
            assert tokens == [f"{whole[2]['CreateIndex']}.{whole[2]['AccessorID']}"]
            backwards = (await c.get("/v1/acl/tokens", params={"reverse": "true"})).json()
            assert _ids(backwards, "AccessorID") == _ids(whole, "AccessorID")[::-1]
            answer = await c.get("/v1/acl/tokens", params={"filter": 'Name matches "^t[13]"'})
            assert [t["Name"] for t in answer.json()] == ["t1", "t3"]
            # the filter sees the stub: no secret to probe
            answer = await c.get("/v1/acl/tokens", params={"filter": 'SecretID == x'})
            assert answer.status_code == 400
            assert "SecretID" in answer.text

"""Node pools beyond the pool endpoints: a namespace's `NodePoolConfiguration` on registered
jobs (layer 0: server/namespaces.py's rules; layer 2: a real agent, and `yurt` as a process),
`yurt job status`'s `Node Pool`, stored pools in `/v1/search` and `/v1/search/fuzzy` with the
node_pool read filter, and the `NodePool` event topic (management only).

Layer 2 runs an in-process agent on a real socket with the real clock, each test bounded by
`trio.fail_after`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import msgspec
import trio

from tests.agent_support import mock_job, running_agent
from tests.authz_support import acl_agent
from tests.cli_proc_support import yurt
from yurt.runtime.api.authz import PERMISSION_DENIED
from yurt.runtime.server.namespaces import (
    Namespace,
    NodePoolConfiguration,
    job_node_pool,
    node_pool_refusal,
    validate,
)


def _ns(default: str = "default", allowed: list[str] | None = None,
        denied: list[str] | None = None) -> Namespace:
    return Namespace(name="prod", node_pool_configuration=NodePoolConfiguration(
        default=default, allowed=allowed, denied=denied))


def _job(job_id: str, namespace: str = "default", pool: str | None = None
         ) -> dict[str, Any]:
    doc = mock_job(job_id)
    doc["Job"]["Namespace"] = namespace
    if pool is not None:
        doc["Job"]["NodePool"] = pool
    return doc


# ------------------------------------------------------------------------- layer 0


def test_a_job_without_a_pool_takes_the_namespaces_default() -> None:
    assert job_node_pool(_ns("gpu"), "") == "gpu"
    assert job_node_pool(_ns("gpu"), "cpu") == "cpu"  # one it names is kept
    assert job_node_pool(_ns(""), "") == "default"


def test_allowed_and_denied_globs_refuse_pools_but_never_the_default() -> None:
    allowed = _ns("gpu", allowed=["prod-*", "all"])
    assert node_pool_refusal(allowed, "j", "prod-eu") is None
    assert node_pool_refusal(allowed, "j", "all") is None
    assert node_pool_refusal(allowed, "j", "gpu") is None  # the default is always allowed
    assert node_pool_refusal(allowed, "j", "prod") == (
        'job "j" is in node pool "prod", which namespace "prod" does not allow')
    assert node_pool_refusal(_ns("gpu", allowed=[]), "j", "default") is not None
    denied = _ns(denied=["dev*"])
    assert node_pool_refusal(denied, "j", "dev-1") is not None
    assert node_pool_refusal(denied, "j", "prod") is None
    assert node_pool_refusal(_ns(denied=["a.c"]), "j", "abc") is None  # `.` is literal
    assert node_pool_refusal(_ns(), "j", "anything") is None


def test_a_namespace_may_not_set_both_allowed_and_denied() -> None:
    why = validate(_ns(allowed=["a"], denied=["b"]))
    assert why is not None
    assert "only one of Allowed and Denied may be set" in why
    assert validate(_ns(allowed=["a"])) is None


# ------------------------------------------------------------------------- layer 2


async def test_registered_jobs_take_and_obey_the_namespaces_pools(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path / "data") as a:
            c = a.client
            assert (await c.put("/v1/node/pools", json={"Name": "gpu"})).status_code == 200
            ns = {"Name": "prod", "NodePoolConfiguration": {"Default": "gpu",
                                                            "Allowed": ["gp*"]}}
            assert (await c.put("/v1/namespace/prod", json=ns)).status_code == 200

            # None named: the namespace's default; in `default`, Nomad's `default`.
            assert (await c.put("/v1/jobs", json=_job("p1", "prod"))).status_code == 200
            got = (await c.get("/v1/job/p1", params={"namespace": "prod"})).json()
            assert got["NodePool"] == "gpu"
            assert (await c.put("/v1/jobs", json=_job("d1"))).status_code == 200
            assert (await c.get("/v1/job/d1")).json()["NodePool"] == "default"
            listed = (await c.get("/v1/node/pool/gpu/jobs", params={"namespace": "*"})).json()
            assert [j["ID"] for j in listed] == ["p1"]

            refused = await c.put("/v1/jobs", json=_job("p2", "prod", "default"))
            assert (refused.status_code, refused.text) == (
                400, 'job "p2" is in node pool "default", which namespace "prod" does not '
                     "allow")
            missing = await c.put("/v1/jobs", json=_job("p3", "prod", "gpx"))
            assert (missing.status_code, missing.text) == (
                400, 'job "p3" is in nonexistent node pool "gpx"')

            # A plan sees the job as a register would: the pool filled in, no change.
            planned = await c.post("/v1/job/p1/plan", params={"namespace": "prod"},
                                   json={**_job("p1", "prod"), "Diff": True})
            assert planned.status_code == 200, planned.text
            assert planned.json()["Diff"]["Type"] == "None"
            refused_plan = await c.post("/v1/job/p2/plan", params={"namespace": "prod"},
                                        json=_job("p2", "prod", "default"))
            assert refused_plan.status_code == 400


JOBFILE = """
job "web" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
"""


async def test_yurt_job_run_and_status_show_the_namespaces_pool(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path / "data") as a:
            c = a.client
            assert (await c.put("/v1/node/pools", json={"Name": "gpu"})).status_code == 200
            ns = {"Name": "default", "NodePoolConfiguration": {"Default": "gpu"}}
            assert (await c.put("/v1/namespace/default", json=ns)).status_code == 200
            path = tmp_path / "web.nomad.hcl"
            path.write_text(JOBFILE)
            # No node of pool gpu: the run cannot place, yet the job is registered there.
            ran = await yurt(a.address, "job", "run", "-detach", str(path))
            assert ran.returncode == 0, ran.stderr
            assert (await c.get("/v1/job/web")).json()["NodePool"] == "gpu"
            status = await yurt(a.address, "job", "status", "web")
            assert status.returncode == 0, status.stderr
            text = status.stdout.decode()
            assert "\nNode Pool     = gpu\n" in text, text
            assert text.startswith("ID            = web\n")


async def _search(client: httpx2.AsyncClient, secret: str, path: str,
                  body: dict[str, str]) -> httpx2.Response:
    return await client.post(path, json=body, headers={"X-Nomad-Token": secret})


async def test_search_finds_stored_pools_the_token_may_read(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            admin = at.admin
            for name in ("gpu-a", "gpu-b"):
                assert (await admin.put("/v1/node/pools", json={"Name": name})).status_code \
                    == 200
            found = (await admin.post("/v1/search", json={"Prefix": "gpu",
                                                          "Context": "node_pools"})).json()
            assert found["Matches"]["node_pools"] == ["gpu-a", "gpu-b"]
            every = (await admin.post("/v1/search", json={"Prefix": "",
                                                          "Context": "all"})).json()
            assert every["Matches"]["node_pools"] == ["all", "default", "gpu-a", "gpu-b"]
            fuzzy = (await admin.post("/v1/search/fuzzy", json={
                "Text": "pu-", "Context": "node_pools"})).json()
            assert fuzzy["Matches"]["node_pools"] == [{"ID": "gpu-a", "Scope": ["gpu-a"]},
                                                      {"ID": "gpu-b", "Scope": ["gpu-b"]}]

            reader = at.resolver.token('node_pool "gpu-b" { policy = "read" }')
            narrow = await _search(admin, reader, "/v1/search",
                                   {"Prefix": "gpu", "Context": "node_pools"})
            assert narrow.status_code == 200, narrow.text
            assert narrow.json()["Matches"]["node_pools"] == ["gpu-b"]
            narrow_fuzzy = await _search(admin, reader, "/v1/search/fuzzy",
                                         {"Text": "gpu", "Context": "node_pools"})
            assert [m["ID"] for m in narrow_fuzzy.json()["Matches"]["node_pools"]] == [
                "gpu-b"]
            nobody = at.resolver.token('namespace "default" { policy = "read" }')
            refused = await _search(admin, nobody, "/v1/search",
                                    {"Prefix": "gpu", "Context": "node_pools"})
            assert refused.status_code == 403


async def _events(client: httpx2.AsyncClient, count: int, secret: str = ""
                  ) -> list[dict[str, Any]]:
    """The first `count` NodePool events from the start of the stream."""
    headers = {"X-Nomad-Token": secret} if secret else {}
    events: list[dict[str, Any]] = []
    async with client.stream("GET", "/v1/event/stream", headers=headers,
                             params={"index": "0", "topic": "NodePool"}) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line != "{}":
                events.extend(msgspec.json.decode(line)["Events"])
            if len(events) >= count:
                return events
    raise AssertionError(f"the stream ended after {events}")


async def test_pool_changes_are_events_only_management_may_follow(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with acl_agent(tmp_path / "data") as at:
            admin = at.admin
            made = await admin.put("/v1/node/pools", json={"Name": "gpu", "Description": "x"})
            assert made.status_code == 200
            assert (await admin.delete("/v1/node/pool/gpu")).status_code == 200
            refused = await admin.delete("/v1/node/pool/gpu")  # gone: no event
            assert refused.status_code == 404
            upserted, deleted = await _events(admin, 2)
            assert (upserted["Topic"], upserted["Type"], upserted["Key"]) == (
                "NodePool", "NodePoolUpserted", "gpu")
            assert upserted["Payload"]["NodePool"]["Description"] == "x"
            assert upserted["Index"] == upserted["Payload"]["NodePool"]["ModifyIndex"] > 0
            assert (deleted["Type"], deleted["Key"]) == ("NodePoolDeleted", "gpu")
            assert deleted["Payload"]["NodePool"]["Name"] == "gpu"

            reader = at.resolver.token('node_pool "*" { policy = "write" }\n'
                                       'node { policy = "read" }')
            answer = await admin.get("/v1/event/stream", params={"topic": "NodePool"},
                                     headers={"X-Nomad-Token": reader})
            assert answer.status_code == 403
            assert answer.text == PERMISSION_DENIED

"""/v1/node/pools and /v1/node/pool/<name>[/jobs|/nodes] over a socket (layer 2, a real
agent), the agent config's `node_pool` (layer 0), and the pool table's rules (layer 0):
Nomad's built-in `all` and `default`, upserts, refusals and deletes, a pool's jobs and nodes,
and jobs refused for a pool that does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.agent_support import mock_job, running_agent
from yurt.runtime.agent.config import ConfigError, load_config
from yurt.runtime.server.nodepools import NodePool, delete_refusal, upsert_refusal


def _pooled(job_id: str, pool: str) -> dict[str, object]:
    job = mock_job(job_id)
    body = job["Job"]
    assert isinstance(body, dict)
    body["NodePool"] = pool
    return job


# ------------------------------------------------------------------------- layer 0


def test_upsert_refusals_are_nomads() -> None:
    assert upsert_refusal(NodePool(name="gpu")) is None
    assert upsert_refusal(NodePool(name="all")) == 'modifying node pool "all" is not allowed'
    assert upsert_refusal(NodePool(name="default")) == (
        'modifying node pool "default" is not allowed')
    bad = upsert_refusal(NodePool(name="a b", description="x" * 257))
    assert bad == ('invalid node pool "a b": 2 errors occurred:\n'
                   '\t* invalid name "a b", must match regex ^[a-zA-Z0-9-_]{1,128}$\n'
                   "\t* description longer than 256\n\n")


def test_delete_refusals_are_nomads() -> None:
    assert delete_refusal("gpu", live_jobs=False, nodes=False, exists=True) is None
    assert delete_refusal("gpu", live_jobs=True, nodes=True, exists=True) == (
        "2 errors occurred:\n"
        '\t* node pool "gpu" has non-terminal jobs in regions: [global]\n'
        '\t* node pool "gpu" has nodes in regions: [global]\n\n')
    assert delete_refusal("all", live_jobs=False, nodes=False, exists=True) == (
        'deleting node pool "all" is not allowed')
    assert delete_refusal("nope", live_jobs=False, nodes=False, exists=False) == (
        "node pool nope not found")


def test_agent_config_takes_a_node_pool_but_never_all(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('node_pool = "gpu"\n')
    assert load_config(path).node_pool == "gpu"
    path.write_text("")
    assert load_config(path).node_pool == "default"
    path.write_text('node_pool = "all"\n')
    with pytest.raises(ConfigError, match='not allowed to register in node pool "all"'):
        load_config(path)
    path.write_text('node_pool = "a b"\n')
    with pytest.raises(ConfigError, match='Invalid node pool: invalid name "a b"'):
        load_config(path)


# ------------------------------------------------------------------------- layer 2


async def test_pools_are_listed_created_read_and_deleted(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            listed = (await c.get("/v1/node/pools")).json()
            assert [(p["Name"], p["Description"]) for p in listed] == [
                ("all", "Node pool with all nodes in the cluster."),
                ("default", "Default node pool.")]
            made = await c.put("/v1/node/pools", json={
                "Name": "gpu", "Description": "GPUs", "Meta": {"team": "ml"}})
            assert made.status_code == 200, made.text
            got = (await c.get("/v1/node/pool/gpu")).json()
            assert (got["Name"], got["Description"], got["Meta"]) == ("gpu", "GPUs",
                                                                      {"team": "ml"})
            assert got["CreateIndex"] == got["ModifyIndex"] > 0
            again = await c.post("/v1/node/pool/gpu", json={"Name": "gpu",
                                                            "Description": "more"})
            assert again.status_code == 200
            updated = (await c.get("/v1/node/pool/gpu")).json()
            assert updated["CreateIndex"] == got["CreateIndex"]
            assert updated["ModifyIndex"] > got["ModifyIndex"]
            assert [p["Name"] for p in (await c.get("/v1/node/pools?prefix=g")).json()] == [
                "gpu"]

            mismatch = await c.put("/v1/node/pool/gpu", json={"Name": "cpu"})
            assert (mismatch.status_code, mismatch.text) == (
                400, "Node pool name does not match request path")
            builtin = await c.put("/v1/node/pools", json={"Name": "all"})
            assert (builtin.status_code, builtin.text) == (
                400, 'modifying node pool "all" is not allowed')
            missing = await c.get("/v1/node/pool/nope")
            assert (missing.status_code, missing.text) == (404, "node pool not found")

            in_use = await c.delete("/v1/node/pool/default")
            assert in_use.status_code == 400
            assert 'node pool "default" has nodes in regions: [global]' in in_use.text
            assert (await c.delete("/v1/node/pool/gpu")).status_code == 200
            assert (await c.get("/v1/node/pool/gpu")).status_code == 404


async def test_a_pools_jobs_and_nodes_and_registration_into_a_missing_pool(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            refused = await c.put("/v1/jobs", json=_pooled("far", "gpu"))
            assert (refused.status_code, refused.text) == (
                400, 'job "far" is in nonexistent node pool "gpu"')
            assert (await c.put("/v1/node/pools", json={"Name": "gpu"})).status_code == 200
            assert (await c.put("/v1/jobs", json=_pooled("far", "gpu"))).status_code == 200
            assert (await c.put("/v1/jobs", json=mock_job("near"))).status_code == 200

            jobs = (await c.get("/v1/node/pool/gpu/jobs")).json()
            assert [(j["ID"], j["NodePool"]) for j in jobs] == [("far", "gpu")]
            assert [j["ID"] for j in (await c.get("/v1/node/pool/default/jobs")).json()] == [
                "near"]
            node_id = a.agent.node.id
            assert [n["ID"] for n in (await c.get("/v1/node/pool/default/nodes")).json()] == [
                node_id]
            assert [n["ID"] for n in (await c.get("/v1/node/pool/all/nodes")).json()] == [
                node_id]
            assert (await c.get("/v1/node/pool/gpu/nodes")).json() == []
            prefixed = await c.get("/v1/node/pool/gpu/nodes?prefix=a")
            assert (prefixed.status_code, prefixed.text) == (400, "prefix argument not allowed")

            # The gpu job has no node to go to: nothing evaluated, the pool named.
            evals = (await c.get("/v1/job/far/evaluations")).json()
            while not any(e.get("FailedTGAllocs") for e in evals):
                await trio.sleep(0.05)
                evals = (await c.get("/v1/job/far/evaluations")).json()
            metric = next(e for e in evals if e.get("FailedTGAllocs"))["FailedTGAllocs"]["g"]
            assert (metric["NodesEvaluated"], metric["NodesInPool"], metric["NodePool"]) == (
                0, 0, "gpu")

            busy = await c.delete("/v1/node/pool/gpu")
            assert (busy.status_code, busy.text) == (
                400, '1 error occurred:\n\t* node pool "gpu" has non-terminal jobs in '
                     'regions: [global]\n\n')

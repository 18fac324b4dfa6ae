"""Node endpoints over a real socket (layer 2): the list and node shapes with Nomad's field and
attribute names, a node's allocations, eligibility and drain (honoured by placement, kept
across an agent restart), purge, and their errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.agent_support import mock_job, running_agent
from yurt.runtime.cli.evalfmt import evaluation_failures

pytestmark = pytest.mark.slow


async def _node_id(c: httpx2.AsyncClient) -> str:
    nodes = (await c.get("/v1/nodes")).json()
    assert len(nodes) == 1
    return str(nodes[0]["ID"])


def stub_version(a: Any) -> str:
    return str(a.agent.node.attributes["nomad.version"])


async def _job_allocs(c: httpx2.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    return list((await c.get(f"/v1/job/{job_id}/allocations")).json())


async def test_node_list_stub_and_node_carry_nomads_fields(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            stub = (await c.get("/v1/nodes")).json()[0]
            assert stub["Address"] == "127.0.0.1"
            assert stub["SchedulingEligibility"] == "eligible"
            assert stub["Drain"] is False
            assert stub["Version"] == stub_version(a)
            assert "NodeResources" not in stub
            assert "Attributes" not in stub
            with_res = (await c.get("/v1/nodes", params={"resources": "true",
                                                         "os": "1"})).json()[0]
            assert with_res["NodeResources"]["Cpu"]["CpuShares"] > 0
            assert with_res["ReservedResources"]["Memory"]["MemoryMB"] == 0
            assert set(with_res["Attributes"]) == {"os.name"}
            assert (await c.get("/v1/nodes", params={"prefix": "zz"})).json() == []
            assert (await c.get("/v1/nodes", params={"prefix": stub["ID"][:4]})).json()
            node = (await c.get(f"/v1/node/{stub['ID'][:6]}")).json()
            assert node["HTTPAddr"] == a.address.removeprefix("http://")
            assert node["StatusUpdatedAt"] > 0
            attrs = node["Attributes"]
            for name in ("cpu.arch", "cpu.numcores", "cpu.totalcompute", "kernel.name",
                         "kernel.version", "os.name", "unique.hostname",
                         "unique.network.ip-address", "nomad.version", "memory.totalbytes",
                         "driver.raw_exec"):
                assert attrs.get(name), name
            assert attrs["os.name"] == with_res["Attributes"]["os.name"]
            assert int(attrs["memory.totalbytes"]) == (
                node["NodeResources"]["Memory"]["MemoryMB"] * 1024 * 1024)
            assert [e["Message"] for e in node["Events"]] == ["Node registered"]
            assert node["Events"][0]["Subsystem"] == "Cluster"
            assert node["DrainStrategy"] is None
            # Errors.
            assert (await c.get("/v1/node/zzzz")).status_code == 404
            bad = await c.get("/v1/nodes", params={"resources": "maybe"})
            assert bad.status_code == 400
            assert (await c.delete("/v1/nodes")).status_code == 405


async def test_node_allocations(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            node_id = await _node_id(c)
            assert (await c.get(f"/v1/node/{node_id}/allocations")).json() == []
            assert (await c.post("/v1/jobs", json=mock_job("m", count=2))).status_code == 200
            allocs = (await c.get(f"/v1/node/{node_id}/allocations")).json()
            assert sorted(x["Name"] for x in allocs) == ["m.g[0]", "m.g[1]"]
            assert all(x["NodeID"] == node_id and "Job" in x for x in allocs)
            # Nomad's Node.GetAllocs: an unknown node has no allocations (no 404).
            assert (await c.get("/v1/node/other/allocations")).json() == []
            assert (await c.post(f"/v1/node/{node_id}/allocations")).status_code == 405


async def test_eligibility_is_honoured_by_placement_and_survives_a_restart(
        tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            node_id = await _node_id(c)
            r = await c.put(f"/v1/node/{node_id}/eligibility",
                            json={"Eligibility": "ineligible"})
            assert r.status_code == 200
            body = r.json()
            assert body["NodeModifyIndex"] == int(r.headers["X-Nomad-Index"])
            assert set(body) >= {"NodeModifyIndex", "EvalIDs", "EvalCreateIndex"}
            stub = (await c.get("/v1/nodes")).json()[0]
            assert stub["SchedulingEligibility"] == "ineligible"
            assert stub["ModifyIndex"] == body["NodeModifyIndex"]
            node = (await c.get(f"/v1/node/{node_id}")).json()
            assert node["Events"][-1]["Message"] == "Node marked as ineligible for scheduling"
            assert node["Events"][-1]["CreateIndex"] == body["NodeModifyIndex"]
            # Published on the event stream, as Nomad's Node topic.
            sub = a.agent.broker.subscribe(from_index=0)
            while True:
                record = await sub.receive()
                if [(e.topic, e.type) for e in record.events] == [("Node", "NodeEligibility")]:
                    break
            sub.close()
            # Numbered with the change it reports, as every event.
            assert record.index == record.events[0].index == body["NodeModifyIndex"]
            # An ineligible node gets no new allocations: nothing was even a candidate.
            registered = await c.post("/v1/jobs", json=mock_job("m"))
            assert registered.status_code == 200
            assert await _job_allocs(c, "m") == []
            ev = (await c.get(f"/v1/evaluation/{registered.json()['EvalID']}")).json()
            metric = ev["FailedTGAllocs"]["g"]
            assert (metric["NodesEvaluated"], metric["NodesAvailable"]) == (0, {"dc1": 0})
            assert not metric["DimensionExhausted"]
            assert "* No nodes were eligible for evaluation" in evaluation_failures(ev)
            # Errors: Nomad's messages, as 400; unknown node 404; GET 405.
            bad = await c.put(f"/v1/node/{node_id}/eligibility", json={"Eligibility": "x"})
            assert bad.status_code == 400
            assert "invalid scheduling eligibility" in bad.text
            assert (await c.put(f"/v1/node/{node_id}/eligibility",
                                content=b"{nope")).status_code == 400
            assert (await c.put(f"/v1/node/{node_id}/eligibility",
                                json={"Eligibility": 3})).status_code == 400
            assert (await c.put("/v1/node/zzzz/eligibility",
                                json={"Eligibility": "eligible"})).status_code == 404
            assert (await c.get(f"/v1/node/{node_id}/eligibility")).status_code == 405
        async with running_agent(tmp_path) as a:
            c = a.client
            stub = (await c.get("/v1/nodes")).json()[0]
            assert stub["SchedulingEligibility"] == "ineligible"
            r = await c.post(f"/v1/node/{node_id}/eligibility",
                             json={"Eligibility": "eligible", "NodeID": node_id})
            assert r.status_code == 200
            assert r.json()["NodeModifyIndex"] > stub["ModifyIndex"]
            # Eligible again: the blocked evaluation is retried, without a new register.
            index = int(r.headers["X-Nomad-Index"])
            while True:  # blocking queries: each answers on the next change
                got = await c.get("/v1/job/m/allocations", params={"index": index})
                if len(got.json()) == 1:
                    break
                index = int(got.headers["X-Nomad-Index"])
            # Evaluating the node: a node-update evaluation of each job on it (Nomad's).
            evaluated = await c.post(f"/v1/node/{node_id}/evaluate")
            assert evaluated.status_code == 200
            (eval_id,) = evaluated.json()["EvalIDs"]
            ev = (await c.get(f"/v1/evaluation/{eval_id}")).json()
            assert (ev["JobID"], ev["TriggeredBy"], ev["Status"]) == ("m", "node-update",
                                                                      "complete")
            assert len(await _job_allocs(c, "m")) == 1  # nothing placed twice
            assert (await c.post("/v1/node/zzzz/evaluate")).status_code == 404
            assert (await c.get(f"/v1/node/{node_id}/evaluate")).status_code == 405


async def _wait_running(c: httpx2.AsyncClient, job_id: str) -> None:
    """Until every allocation of the job runs (bounded by the caller's fail_after)."""
    while True:
        allocs = await _job_allocs(c, job_id)
        if allocs and all(x["ClientStatus"] == "running" for x in allocs):
            return
        await trio.sleep(0.05)


async def _wait_node(c: httpx2.AsyncClient, node_id: str, done: Any) -> dict[str, Any]:
    """The node once `done(node)` holds (bounded by the caller's fail_after)."""
    while True:
        node: dict[str, Any] = (await c.get(f"/v1/node/{node_id}")).json()
        if done(node):
            return node
        await trio.sleep(0.05)


async def test_drain_stops_allocations_and_completes(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            node_id = await _node_id(c)
            assert (await c.post("/v1/jobs", json=mock_job("m", count=3))).status_code == 200
            await _wait_running(c, "m")
            r = await c.post(f"/v1/node/{node_id}/drain",
                             json={"DrainSpec": {"Deadline": 3600 * 10**9,
                                                 "IgnoreSystemJobs": False},
                                   "Meta": {"reason": "test"}})
            assert r.status_code == 200
            assert r.json()["NodeModifyIndex"] > 0
            node = await _wait_node(c, node_id, lambda n: n["DrainStrategy"] is None)
            assert node["Drain"] is False
            assert node["SchedulingEligibility"] == "ineligible"
            messages = [e["Message"] for e in node["Events"]]
            assert messages[-2:] == ["Node drain strategy set", "Node drain complete"]
            assert node["LastDrain"]["Status"] == "complete"
            assert node["LastDrain"]["Meta"] == {"reason": "test"}
            allocs = await _job_allocs(c, "m")
            assert all(x["DesiredStatus"] == "stop" for x in allocs)
            assert all(x["ClientStatus"] == "complete" for x in allocs)
            # Disable with MarkEligible: the node takes allocations again.
            r = await c.put(f"/v1/node/{node_id}/drain",
                            json={"DrainSpec": None, "MarkEligible": True})
            assert r.status_code == 200
            stub = (await c.get("/v1/nodes")).json()[0]
            assert (stub["SchedulingEligibility"], stub["Drain"]) == ("eligible", False)


async def test_drain_strategy_is_kept_across_a_restart_and_errors(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            c = a.client
            node_id = await _node_id(c)
            assert (await c.post("/v1/jobs", json={"Job": {
                "ID": "b", "Type": "batch", "TaskGroups": [{"Name": "g", "Tasks": [{
                    "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"},
                    "Resources": {"CPU": 1, "MemoryMB": 10}}]}]}})).status_code == 200
            # A batch allocation is left to finish until the deadline: the drain stays.
            r = await c.put(f"/v1/node/{node_id}/drain",
                            json={"DrainSpec": {"Deadline": 3600 * 10**9}})
            assert r.status_code == 200
            node = (await c.get(f"/v1/node/{node_id}")).json()
            strategy = node["DrainStrategy"]
            assert strategy["Deadline"] == 3600 * 10**9
            assert strategy["ForceDeadline"] > strategy["StartedAt"]
            assert node["Drain"] is True
            assert node["SchedulingEligibility"] == "ineligible"
            # Eligible while draining: Nomad refuses.
            bad = await c.put(f"/v1/node/{node_id}/eligibility",
                              json={"Eligibility": "eligible"})
            assert bad.status_code == 400
            assert "draining" in bad.text
            for body in ({"DrainSpec": 5}, {"DrainSpec": {"Deadline": "1h"}},
                         {"MarkEligible": "yes"}, {"Meta": {"a": 1}}):
                assert (await c.put(f"/v1/node/{node_id}/drain", json=body)
                        ).status_code == 400, body
            assert (await c.put("/v1/node/zzzz/drain", json={})).status_code == 404
            assert (await c.get(f"/v1/node/{node_id}/drain")).status_code == 405
        async with running_agent(tmp_path) as a:
            c = a.client
            node = (await c.get(f"/v1/node/{node_id}")).json()
            assert node["DrainStrategy"] == strategy
            assert node["Drain"] is True
            # Forced now (a negative deadline): the batch allocation stops, the drain ends.
            r = await c.put(f"/v1/node/{node_id}/drain", json={"DrainSpec": {"Deadline": -1}})
            assert r.status_code == 200
            node = await _wait_node(c, node_id, lambda n: n["DrainStrategy"] is None)
            assert node["Events"][-1]["Message"] == "Node drain complete"
            assert node["Events"][-1]["Details"] == {"deadline_reached": "true"}
            assert all(x["DesiredStatus"] == "stop" for x in await _job_allocs(c, "b"))


async def test_purge(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            node_id = await _node_id(c)
            await c.put(f"/v1/node/{node_id}/eligibility", json={"Eligibility": "ineligible"})
            r = await c.post(f"/v1/node/{node_id}/purge")
            assert r.status_code == 200
            assert set(r.json()) >= {"EvalIDs", "EvalCreateIndex", "NodeModifyIndex"}
            # Registered again at once, as a fresh client: eligible, one event.
            node = (await c.get(f"/v1/node/{node_id}")).json()
            assert node["SchedulingEligibility"] == "eligible"
            assert [e["Message"] for e in node["Events"]] == ["Node registered"]
            assert node["CreateIndex"] == r.json()["NodeModifyIndex"]
            assert (await c.post("/v1/node/zzzz/purge")).status_code == 404
            assert (await c.get(f"/v1/node/{node_id}/purge")).status_code == 405


async def test_evaluate_skips_periodic_and_parameterized_parents(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            node_id = a.agent.node.id
            periodic = mock_job("cron")
            periodic["Job"].update(Type="batch", Periodic={"Spec": "0 0 1 1 *"})
            parameterized = mock_job("param")
            parameterized["Job"].update(Type="batch", ParameterizedJob={"Payload": "optional"})
            for body in (periodic, parameterized):
                assert (await c.post("/v1/jobs", json=body)).status_code == 200
            before = {j: (await c.get(f"/v1/job/{j}")).json()["ModifyIndex"]
                      for j in ("cron", "param")}
            r = await c.post(f"/v1/node/{node_id}/evaluate")
            assert r.status_code == 200
            assert r.json()["EvalIDs"] is None
            assert r.json()["EvalCreateIndex"] == 0
            after = {j: (await c.get(f"/v1/job/{j}")).json()["ModifyIndex"]
                     for j in ("cron", "param")}
            assert after == before
            assert a.agent.server.job_allocs("cron") == []
            assert a.agent.server.job_allocs("param") == []

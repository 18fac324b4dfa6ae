"""Two `yurt server` processes over one real etcd: every server answers for the whole
cluster, concurrent writes through both lose nothing, and when the leader is SIGKILLed the
other server schedules the next job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.cluster_support import cluster, get, wait_for

pytestmark = pytest.mark.slow


def mock_job(job_id: str, meta: dict[str, str] | None = None, count: int = 1) -> dict[str, Any]:
    return {"Job": {"ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"],
                    "Meta": meta or {},
                    "TaskGroups": [{"Name": "g", "Count": count, "Tasks": [{
                        "Name": "t", "Driver": "mock_driver",
                        "Config": {"run_for": "1h"},
                        "Resources": {"CPU": 10, "MemoryMB": 10}}]}]}}


async def test_two_servers_race_100_updates_of_one_job(etcd_urls: list[str],
                                                       etcd_prefix: bytes,
                                                       tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1")
            s2 = await c.server("s2")
            answers: list[dict[str, Any]] = []

            async def update(i: int) -> None:
                address = (s1, s2)[i % 2].address
                async with httpx2.AsyncClient(base_url=address, timeout=30) as client:
                    r = await client.put("/v1/jobs", json=mock_job("race", {"n": str(i)}))
                    r.raise_for_status()
                    answers.append(r.json())

            async with trio.open_nursery() as nursery:
                for i in range(100):
                    nursery.start_soon(update, i)
            assert len(answers) == 100
            # Each update is one new version: none overwrote another decided on the same
            # state (that would repeat a version and lose an update).
            modify_indexes = [a["JobModifyIndex"] for a in answers]
            assert len(set(modify_indexes)) == 100
            for server in (s1, s2):
                # A server's view follows etcd's watch: a blocking query waits for it to
                # reach the last update (as a Nomad follower's reads do).
                job = await get(server.address, "/v1/job/race",
                                index=str(max(modify_indexes) - 1))
                assert job["Version"] == 99
                assert job["JobModifyIndex"] == max(modify_indexes)
            versions = await get(s2.address, "/v1/job/race/versions")
            numbers = [v["Version"] for v in versions["Versions"]]
            assert len(numbers) == len(set(numbers))


def node_body(node_id: str) -> dict[str, Any]:
    return {"Node": {"ID": node_id, "Name": node_id, "Datacenter": "dc1",
                     "Attributes": {"unique.network.ip-address": "127.0.0.1"},
                     "Drivers": {"mock_driver": {"Detected": True, "Healthy": True}},
                     "NodeResources": {"Cpu": {"CpuShares": 4000},
                                       "Memory": {"MemoryMB": 4096}}},
            "SecretID": f"secret-{node_id}"}


async def test_leader_sigkill_the_other_server_places_the_next_job(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1", "--leader-ttl", "2")
            s2 = await c.server("s2", "--leader-ttl", "2")

            async def leader() -> str:
                return str(await get(s2.address, "/v1/status/leader"))

            first = await wait_for(leader)
            assert first in (s1.address, s2.address)
            for server in (s1, s2):  # every server answers who leads
                assert await get(server.address, "/v1/status/leader") == first
            async with httpx2.AsyncClient(base_url=s1.address, timeout=30) as client:
                r = await client.put("/v1/internal/node/register", json=node_body("n1"))
                assert r.status_code == 200, r.text
                r = await client.put("/v1/jobs", json=mock_job("before"))
                r.raise_for_status()

            async def placed(address: str, job_id: str) -> list[Any]:
                allocs = await get(address, f"/v1/job/{job_id}/allocations")
                return [a for a in allocs if a["NodeID"] == "n1"]

            await wait_for(lambda: placed(s2.address, "before"))
            dead, alive = (s1, s2) if first == s1.address else (s2, s1)
            dead.kill()
            killed_at = trio.current_time()

            async def new_leader() -> bool:
                return bool(await get(alive.address, "/v1/status/leader") == alive.address)

            await wait_for(new_leader)
            async with httpx2.AsyncClient(base_url=alive.address, timeout=30) as client:
                # The node keeps heartbeating, to the server that is left.
                r = await client.put("/v1/internal/node/n1/heartbeat", json={},
                                     headers={"X-Yurt-Node-Secret": "secret-n1"})
                assert r.status_code == 200, r.text
                r = await client.put("/v1/jobs", json=mock_job("after"))
                r.raise_for_status()
            await wait_for(lambda: placed(alive.address, "after"))
            # Taken over when the dead leader's lease (2 s) lapsed, not at some later timeout:
            # the lease plus a scheduling pass, with room for etcd's fsyncs on a loaded host.
            assert trio.current_time() - killed_at < 2 + 8
            peers = await get(alive.address, "/v1/status/peers")
            assert dead.address not in peers or len(peers) == 2  # its entry lapses with it


async def test_a_node_cannot_read_or_update_another_nodes_allocations(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1", "--leader-ttl", "2")
            async with httpx2.AsyncClient(base_url=s1.address, timeout=30) as client:
                for node_id in ("n1", "n2"):
                    r = await client.put("/v1/internal/node/register", json=node_body(node_id))
                    assert r.status_code == 200, r.text
                r = await client.put("/v1/jobs", json=mock_job("web", count=4))
                r.raise_for_status()

                async def allocs_of(node_id: str) -> dict[str, int]:
                    r = await client.get(f"/v1/internal/node/{node_id}/allocs",
                                         headers={"X-Yurt-Node-Secret": f"secret-{node_id}"})
                    assert r.status_code == 200, r.text
                    found: dict[str, int] = r.json()["Allocs"]
                    return found

                await wait_for(lambda: _both(allocs_of))
                mine, theirs = list(await allocs_of("n1")), list(await allocs_of("n2"))
                n1 = {"X-Yurt-Node-Secret": "secret-n1"}
                ok = await client.post("/v1/internal/allocs", headers=n1,
                                       json={"AllocIDs": mine, "NodeID": "n1"})
                assert ok.status_code == 200
                assert {a["ID"] for a in ok.json()["Allocs"]} == set(mine)
                # n1's secret, n2's allocation: refused, whichever node it claims to be.
                for body in ({"AllocIDs": theirs, "NodeID": "n1"},
                             {"AllocIDs": theirs, "NodeID": "n2"},
                             {"AllocIDs": theirs}):
                    r = await client.post("/v1/internal/allocs", headers=n1, json=body)
                    assert r.status_code == 403, (body, r.text)
                r = await client.get("/v1/internal/node/n2/allocs", headers=n1)
                assert r.status_code == 403
                update = {"Allocs": [{"ID": theirs[0], "NodeID": "n2",
                                      "ClientStatus": "failed"}]}
                r = await client.post("/v1/internal/node/n1/allocs/update", headers=n1,
                                      json=update)
                assert r.status_code == 403
                r = await client.post("/v1/internal/node/n2/allocs/update", headers=n1,
                                      json=update)
                assert r.status_code == 403
                # Nothing of n2's changed.
                alloc = (await client.get(f"/v1/allocation/{theirs[0]}")).json()
                assert alloc["ClientStatus"] == "pending"
                # No secret, or a made-up node: refused too.
                r = await client.get("/v1/internal/node/n1/allocs")
                assert r.status_code == 403


async def _both(allocs_of: Any) -> bool:
    return bool(await allocs_of("n1")) and bool(await allocs_of("n2"))


async def test_with_etcd_gone_writes_answer_503_and_reads_still_answer(
        tmp_path: Path) -> None:
    from yurt.runtime.server.cluster.etcd.process import start_etcd

    etcd = start_etcd(tmp_path / "etcd", name="gone")
    try:
        with trio.fail_after(60):
            async with cluster(etcd.urls, b"/yurt/", tmp_path) as c:
                s1 = await c.server("s1")
                async with httpx2.AsyncClient(base_url=s1.address, timeout=30) as client:
                    r = await client.put("/v1/jobs", json=mock_job("before"))
                    assert r.status_code == 200, r.text
                    etcd.stop_member(etcd.members[0])
                    r = await client.put("/v1/jobs", json=mock_job("during"))
                    assert r.status_code == 503, r.text
                    assert "service unavailable: no etcd member answered" in r.text
                    r = await client.get("/v1/job/before")  # the view still answers
                    assert r.status_code == 200
                    assert s1.process.poll() is None  # and the server runs on
                assert b"503: no etcd member answered" in s1.log.read_bytes()
    finally:
        etcd.stop()


@pytest.mark.parametrize(("addr", "why"), [
    ("10.0.0.1:4646/v3/kv/put?x=", "is not host:port"),
    ("user@10.0.0.1:4646", "is not host:port"),
    ("10.0.0.1", "is not host:port"),
    ("0.0.0.0:4646", "names every interface"),
])
def test_a_node_address_is_exactly_host_and_port(addr: str, why: str) -> None:
    from yurt.runtime.api.noderpc import parse_http_addr

    with pytest.raises(ValueError, match=why):
        parse_http_addr(addr)


def test_a_node_address_parses() -> None:
    from yurt.runtime.api.noderpc import parse_http_addr

    assert parse_http_addr("10.0.0.1:4646") == ("10.0.0.1", 4646)
    assert parse_http_addr("[::1]:4646") == ("::1", 4646)
    assert parse_http_addr("node-7.example:80") == ("node-7.example", 80)


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"Node": {"ID": "n1"}}',
                                 b'{"Node": 3, "SecretID": "s"}', b'{"SecretID": "s"}'])
def test_a_bad_register_body_is_refused_with_its_reason(raw: bytes) -> None:
    from yurt.runtime.api.noderpc import decode_register

    with pytest.raises(ValueError, match=r"^bad register body: "):
        decode_register(raw)


def test_node_rpc_bodies_decode_in_one_pass() -> None:
    from yurt.runtime.api.noderpc import decode_register, decode_update

    node, secret = decode_register(b'{"Node": {"ID": "n1", "Name": "a"}, "SecretID": "s"}')
    assert (node.id, node.name, secret) == ("n1", "a", "s")
    assert [a.id for a in decode_update(b'{"Allocs": [{"ID": "a1"}, {"ID": "a2"}]}')] == [
        "a1", "a2"]
    assert decode_update(b"") == decode_update(b'{"Allocs": null}') == []
    for raw in (b"[]", b'{"Allocs": {}}', b'{"Allocs": [3]}', b"{"):
        with pytest.raises(ValueError, match=r"^bad update body: "):
            decode_update(raw)


async def test_a_forward_never_loops_and_a_bad_node_address_is_refused(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1")
            here = s1.address.removeprefix("http://")
            async with httpx2.AsyncClient(base_url=s1.address, timeout=30) as client:
                bad = node_body("n0")
                bad["Node"]["HTTPAddr"] = "10.0.0.1:2379/v3/kv/put?x="
                r = await client.put("/v1/internal/node/register", json=bad)
                assert r.status_code == 400
                assert "is not host:port" in r.text
                # A node whose address leads back to the server itself.
                body = node_body("n1")
                body["Node"]["HTTPAddr"] = here
                r = await client.put("/v1/internal/node/register", json=body)
                assert r.status_code == 200, r.text
                r = await client.put("/v1/jobs", json=mock_job("web"))
                r.raise_for_status()

                async def placed() -> list[Any]:
                    found: list[Any] = await get(s1.address, "/v1/job/web/allocations")
                    return found

                (alloc,) = await wait_for(placed)
                r = await client.get(f"/v1/client/allocation/{alloc['ID']}/stats")
                assert r.status_code == 508
                assert "reached a server again" in r.text


async def test_a_variable_written_through_one_server_is_read_through_the_other(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1")
            s2 = await c.server("s2")
            async with httpx2.AsyncClient(timeout=30) as client:
                r = await client.put(f"{s1.address}/v1/var/app/config",
                                     json={"Items": {"mode": "blue"}})
                assert r.status_code == 200, r.text
                r = await client.get(f"{s2.address}/v1/var/app/config")
                assert r.status_code == 200, r.text
                assert r.json()["Items"] == {"mode": "blue"}
                r = await client.get(f"{s2.address}/v1/vars")
                assert [v["Path"] for v in r.json()] == ["app/config"]


async def test_a_server_answers_at_a_name_given_with_allowed_host_and_no_other(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    # Nodes may reach a server by a DNS alias that is neither its host name nor its
    # --advertise host: `--allowed-host` names it, and every other name stays refused.
    with trio.fail_after(60):
        async with cluster(etcd_urls, etcd_prefix, tmp_path) as c:
            s1 = await c.server("s1", "--allowed-host", "yurt-alias.localhost")
            port = s1.address.rsplit(":", 1)[1]
            async with httpx2.AsyncClient(base_url=s1.address, timeout=30) as client:
                r = await client.get("/v1/jobs",
                                     headers={"Host": f"yurt-alias.localhost:{port}"})
                assert r.status_code == 200, r.text
                r = await client.get("/v1/jobs", headers={"Host": f"evil.localhost:{port}"})
                assert r.status_code == 403
                assert "--allowed-host evil.localhost" in r.text

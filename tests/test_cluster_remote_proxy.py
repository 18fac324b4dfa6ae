"""`ServerProxy` (runtime/agent/proxy.py): a client-only agent forwards the servers' routes
(layer 2: the proxy and a fake server on loopback ports, the real clock)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import trio

from tests.cluster_remote_fake import FakeNodeRPC, free_port, serve_app, serve_fake
from tests.runtime_support import eventually
from yurt.runtime.agent.proxy import ServerProxy
from yurt.runtime.client.remote import RemoteServer
from yurt.runtime.structs import Node


@asynccontextmanager
async def proxied(fake: FakeNodeRPC, *, first_refuses: bool = True, max_body: int = 1000
                  ) -> AsyncIterator[tuple[httpx2.AsyncClient, RemoteServer, str]]:
    """A proxy in front of [a refused port,] the fake; a client for the proxy."""
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_fake, fake)
        servers = [f"http://127.0.0.1:{free_port()}", url] if first_refuses else [url]
        remote = RemoteServer(Node(id=str(uuid.uuid4())), servers, "secret")
        proxy = ServerProxy(remote, max_body=max_body)
        proxy_url = await nursery.start(serve_app, proxy)
        async with httpx2.AsyncClient(base_url=proxy_url, timeout=10) as client:
            yield client, remote, url
        await proxy.aclose()
        await remote.aclose()
        nursery.cancel_scope.cancel()


async def test_a_request_is_forwarded_to_the_first_server_that_answers() -> None:
    fake = FakeNodeRPC()
    with trio.fail_after(20):
        async with proxied(fake) as (client, remote, url):
            got = await client.get("/v1/jobs", params={"prefix": "we b"},
                                   headers={"X-Nomad-Token": "tok"})
            assert got.status_code == 200
            assert got.json()[0]["ID"] == "from-the-server"
            assert got.headers["X-Nomad-Index"] == str(fake.index)
            assert remote.current_server == url  # failed over, and stays there
            put = await client.put("/v1/jobs", content=b'{"Job": {"ID": "x"}}')
            assert put.json()[0]["Got"] == '{"Job": {"ID": "x"}}'
    assert fake.public[0] == ("GET", "/v1/jobs", "prefix=we+b", b"", "tok")
    assert fake.public[1][:2] == ("PUT", "/v1/jobs")


async def test_a_blocking_query_waits_on_the_server() -> None:
    fake = FakeNodeRPC()
    with trio.fail_after(20):
        async with proxied(fake, first_refuses=False) as (client, _, _):
            index = fake.index
            answer: list[httpx2.Response] = []
            async with trio.open_nursery() as nursery:
                async def ask() -> None:
                    answer.append(await client.get("/v1/jobs", params={
                        "index": str(index), "wait": "10s"}))
                nursery.start_soon(ask)
                await eventually(lambda: bool(fake.public))  # the query reached the server
                assert not answer
                fake.bump()
    assert answer[0].headers["X-Nomad-Index"] == str(index + 1)


async def test_a_body_over_the_limit_is_refused() -> None:
    fake = FakeNodeRPC()
    with trio.fail_after(20):
        async with proxied(fake, max_body=10) as (client, _, _):
            got = await client.put("/v1/jobs", content=b"x" * 11)
            assert got.status_code == 413
    assert fake.public == []


async def test_no_server_answering_is_a_502_naming_them() -> None:
    refused = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    remote = RemoteServer(Node(id="n"), refused, "secret")
    proxy = ServerProxy(remote, max_body=1000)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            proxy_url = await nursery.start(serve_app, proxy)
            async with httpx2.AsyncClient(base_url=proxy_url, timeout=10) as client:
                got = await client.get("/v1/jobs")
            nursery.cancel_scope.cancel()
    await proxy.aclose()
    await remote.aclose()
    assert got.status_code == 502
    error = got.json()["error"]
    assert error.startswith("no server answered")
    assert all(url in error for url in refused)

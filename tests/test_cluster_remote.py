"""`RemoteServer` (runtime/client/remote.py) against a fake node RPC on a loopback port
(layer 2: real sockets, the real clock, every wait bounded by `fail_after`)."""

from __future__ import annotations

import random
import stat
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import final

import msgspec
import pytest
import trio
from starlette.types import Receive, Scope, Send

from tests.cluster_remote_fake import FakeNodeRPC, free_port, serve_app, serve_fake
from tests.runtime_support import eventually
from yurt.runtime.client.allocsync import AllocSyncer
from yurt.runtime.client.remote import (
    NoServerError,
    RemoteServer,
    backoff_delay,
    load_or_create_secret,
)
from yurt.runtime.structs import Allocation, Node
from yurt.store.memory import MemoryStateDB


def a_node() -> Node:
    return Node(id=str(uuid.uuid4()), name="n1", status="ready")


@asynccontextmanager
async def running(remote: RemoteServer) -> AsyncIterator[RemoteServer]:
    async with trio.open_nursery() as nursery:
        await nursery.start(remote.run)
        yield remote
        nursery.cancel_scope.cancel()


def fast(node: Node, servers: list[str], secret: str = "s3cret") -> RemoteServer:
    """A remote server with short waits, so the tests see many rounds in little time."""
    return RemoteServer(node, servers, secret, wait=2.0, request_timeout=2.0,
                        backoff_base=0.05, backoff_cap=0.2, rng=random.Random(1))


async def test_register_persists_the_secret(tmp_path: Path) -> None:
    fake = FakeNodeRPC()
    node = a_node()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            secret = load_or_create_secret(tmp_path)
            async with running(fast(node, [url], secret)) as remote:
                await remote.registered.wait()
            nursery.cancel_scope.cancel()
    assert fake.secrets == {node.id: secret}
    assert fake.nodes[node.id].name == "n1"
    path = tmp_path / "node-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_secret(tmp_path) == secret  # a restarted agent is the same node
    uuid.UUID(secret)


def test_secret_file_readable_by_others_is_narrowed(tmp_path: Path) -> None:
    secret = load_or_create_secret(tmp_path)
    (tmp_path / "node-secret").chmod(0o644)
    assert load_or_create_secret(tmp_path) == secret
    assert stat.S_IMODE((tmp_path / "node-secret").stat().st_mode) == 0o600


async def test_only_changed_allocations_are_fetched() -> None:
    fake = FakeNodeRPC()
    node = a_node()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            async with running(fast(node, [url])) as remote:
                fake.place(Allocation(id="a1", node_id=node.id, job_id="j"))
                fake.place(Allocation(id="a2", node_id=node.id, job_id="j"))
                fake.place(Allocation(id="other", node_id="someone-else", job_id="j"))
                await eventually(lambda: set(remote.allocs) == {"a1", "a2"})
                fetches = list(fake.get_allocs)
                assert sorted(i for ids in fetches for i in ids) == ["a1", "a2"]
                # The server changes a2: only a2 is fetched.
                fake.place(msgspec.structs.replace(fake.allocs["a2"], desired_status="stop"))
                await eventually(lambda: remote.allocs["a2"].desired_status == "stop")
                assert fake.get_allocs[len(fetches):] == [["a2"]]
                # A client update moves the index but no AllocModifyIndex: nothing fetched.
                calls = len(fake.get_allocs)
                index = remote.visible_index
                await remote.update_allocs([Allocation(id="a1", node_id=node.id,
                                                       client_status="running")])
                await eventually(lambda: remote.visible_index > index)
                assert len(fake.get_allocs) == calls
                # Gone from the server: gone from the node's allocations.
                del fake.allocs["a1"]
                fake.bump()
                await eventually(lambda: set(remote.allocs) == {"a2"})
                assert [a.id for a in remote.allocs_for_node()] == ["a2"]
                assert len(fake.get_allocs) == calls
            nursery.cancel_scope.cancel()


async def test_updates_are_one_post_per_batch() -> None:
    fake = FakeNodeRPC()
    node = a_node()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            async with running(fast(node, [url])) as remote:
                for i in range(3):
                    fake.place(Allocation(id=f"a{i}", node_id=node.id, job_id="j"))
                await eventually(lambda: len(remote.allocs) == 3)
                batch = [Allocation(id=f"a{i}", node_id=node.id, client_status="running")
                         for i in range(3)]
                await remote.update_allocs(batch)
                await remote.update_allocs(batch[:1])
            nursery.cancel_scope.cancel()
    assert [[u.id for u in b] for b in fake.batches] == [["a0", "a1", "a2"], ["a0"]]
    assert remote.update_posts == 2


async def test_fails_over_to_the_next_server_when_the_first_refuses() -> None:
    fake = FakeNodeRPC()
    node = a_node()
    refused = f"http://127.0.0.1:{free_port()}"
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            fake.servers = [url]
            async with running(fast(node, [refused, url])) as remote:
                await remote.registered.wait()
                fake.place(Allocation(id="a1", node_id=node.id, job_id="j"))
                await eventually(lambda: "a1" in remote.allocs)
                assert remote.current_server == url
                # The reply's servers first, the seeds kept behind them.
                assert remote.servers == [url, refused]
            nursery.cancel_scope.cancel()
    assert fake.registers == 1


async def _not_a_server(scope: Scope, receive: Receive, send: Send) -> None:
    """Another service on a server's address: 200 and a page of HTML to everything."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/html")]})
    await send({"type": "http.response.body", "body": b"<html>welcome</html>"})


async def test_an_answer_that_is_not_the_node_rpc_fails_over() -> None:
    fake = FakeNodeRPC()
    node = a_node()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            other = await nursery.start(serve_app, _not_a_server)
            url = await nursery.start(serve_fake, fake)
            async with running(fast(node, [other, url])) as remote:
                fake.place(Allocation(id="a1", node_id=node.id, job_id="j"))
                await eventually(lambda: "a1" in remote.allocs)
                assert remote.current_server == url
            nursery.cancel_scope.cancel()


@final
class NoStagger(random.Random):
    """Draws 0: a failed send is retried after exactly `RETRY_AFTER`. The random stagger
    spreads many nodes' retries apart; with one node it only made the wait 5 to 10 s."""

    def random(self) -> float:
        return 0.0


async def test_no_update_is_lost_while_no_server_answers() -> None:
    """The servers go away with updates pending, more arrive meanwhile; once a server is
    back, the latest state of every allocation arrives, and nothing the client ran was
    stopped."""
    fake = FakeNodeRPC()
    node = a_node()
    port = free_port()
    with trio.fail_after(45):
        async with trio.open_nursery() as nursery:
            server_scope = trio.CancelScope()
            stopped = trio.Event()

            async def serve(*, task_status: trio.TaskStatus[str]) -> None:
                with server_scope:
                    await serve_fake(fake, port, task_status=task_status)
                stopped.set()  # hypercorn has closed its listener: connections are refused

            url = await nursery.start(serve)
            remote = fast(node, [url])
            syncer = AllocSyncer(remote.update_allocs, MemoryStateDB(), unix_clock=lambda: 1,
                                 rng=NoStagger())
            await nursery.start(syncer.run)
            async with running(remote):
                for i in range(3):
                    fake.place(Allocation(id=f"a{i}", node_id=node.id, job_id="j"))
                await eventually(lambda: len(remote.allocs) == 3)
                syncer.servers_contacted.set()
                server_scope.cancel()  # the server dies
                await stopped.wait()
                calls = syncer.calls
                for i in range(3):
                    syncer.add(Allocation(id=f"a{i}", node_id=node.id, client_status="running"))
                await eventually(lambda: syncer.calls > calls)  # tried, and failed
                assert syncer.sent == 0
                syncer.add(Allocation(id="a0", node_id=node.id, client_status="complete"))
                # Nothing the client holds went away with the server.
                assert sorted(a.id for a in remote.allocs_for_node()) == ["a0", "a1", "a2"]
                server_scope = trio.CancelScope()
                await nursery.start(serve)  # back, on the same address
                await eventually(lambda: syncer.sent >= 3)
                nursery.cancel_scope.cancel()
    latest = {i: fake.updates_for(i)[-1].client_status for i in ("a0", "a1", "a2")}
    assert latest == {"a0": "complete", "a1": "running", "a2": "running"}


async def test_update_raises_when_no_server_answers() -> None:
    node = a_node()
    remote = fast(node, [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"])
    with trio.fail_after(10), pytest.raises(NoServerError, match=r"127\.0\.0\.1"):
        await remote.update_allocs([Allocation(id="a1", node_id=node.id)])
    await remote.aclose()


async def test_heartbeat_404_registers_again() -> None:
    fake = FakeNodeRPC(ttl=0.2)  # a heartbeat every 0.1 s
    node = a_node()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            async with running(fast(node, [url])) as remote:
                await eventually(lambda: fake.heartbeats >= 2)
                assert fake.registers == 1
                fake.forget_nodes()
                await eventually(lambda: fake.registers == 2)
                assert fake.heartbeat_404 >= 1
                await eventually(lambda: remote.registrations == 2)  # its answer arrived too
                await eventually(lambda: fake.heartbeats >= 4)  # and beats on
            nursery.cancel_scope.cancel()


async def test_a_node_change_registers_the_node_again() -> None:
    fake = FakeNodeRPC(ttl=60.0)  # no heartbeat would come in the test's time
    node = a_node()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            async with running(fast(node, [url])) as remote:
                await remote.registered.wait()
                node.attributes["driver.mock_driver"] = "1"
                remote.node_updated()
                await eventually(lambda: fake.registers == 2)
            nursery.cancel_scope.cancel()
    assert fake.nodes[node.id].attributes["driver.mock_driver"] == "1"


async def test_a_wrong_secret_is_refused_and_retried() -> None:
    fake = FakeNodeRPC()
    node = a_node()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            fake.secrets[node.id] = "the real one"
            async with running(fast(node, [url], secret="an impostor")) as remote:
                await eventually(lambda: fake.register_refused >= 3)  # retried, refused
                assert not remote.registered.is_set()
            nursery.cancel_scope.cancel()
    assert fake.registers == 0


async def test_a_cluster_token_is_sent_with_the_registration_only() -> None:
    fake = FakeNodeRPC(token="cluster-token")
    node = a_node()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(serve_fake, fake)
            async with running(fast(node, [url])) as remote:  # no token: refused, retried
                await eventually(lambda: fake.register_refused >= 2)
                assert not remote.registered.is_set()
            remote = RemoteServer(node, [url], "s3cret", token="cluster-token", wait=2.0)
            async with running(remote):
                await remote.registered.wait()
            nursery.cancel_scope.cancel()
    assert fake.registers == 1


@pytest.mark.parametrize(("rounds", "draw", "expected"), [
    (1, 0.0, 0.25), (1, 0.999999, 0.5), (2, 0.0, 0.5), (3, 0.0, 1.0), (10, 0.0, 15.0),
    (200, 0.0, 15.0)])
def test_backoff_doubles_up_to_the_cap_with_jitter(rounds: int, draw: float,
                                                   expected: float) -> None:
    assert backoff_delay(rounds, draw, base=0.5, cap=30.0) == pytest.approx(expected,
                                                                             rel=1e-5)

"""`RemoteServer` against the real node RPC (runtime/api/noderpc.py over a leading
`ClusterServer` and the in-memory etcd), on a loopback port with the real clock (layer 2):
the two sides agree on paths, field names, the secret and the blocking query: a node
registers, heartbeats, pulls (nothing yet), sends its changes, and a stranger's secret is
refused. (Placing allocations on a registered node waits for the multi-node scheduler;
tests/test_cluster_remote.py covers the pull and the updates against a fake.)"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import trio
from starlette.applications import Starlette
from starlette.routing import Route

from tests.cluster_remote_fake import serve_app
from tests.runtime_support import eventually
from yurt.runtime.api.noderpc import routes
from yurt.runtime.client.fingerprint import fingerprint_node
from yurt.runtime.client.remote import NodeRPCError, RemoteServer
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.cluster.etcd.memkv import MemoryKV
from yurt.runtime.server.cluster.server import ClusterServer, HeartbeatConfig
from yurt.runtime.server.state.etcd import ClusterStore
from yurt.runtime.structs import DriverInfo

PREFIX = b"/yurt/"


@dataclass
class _Config:
    token: str = ""


@dataclass
class _Proc:
    """What the node RPC's handlers read of a `ServerProcess`."""

    server: ClusterServer
    server_config: _Config
    url: str = ""

    def server_urls(self) -> list[str]:
        return [self.url]


async def test_a_node_follows_the_real_node_rpc(tmp_path: Path) -> None:
    kv = MemoryKV().client()
    server = ClusterServer(EventBroker(), ClusterStore(kv, PREFIX), kv, PREFIX,
                           heartbeat=HeartbeatConfig(min_ttl=1.0, grace=5.0))
    await server.load()
    node = fingerprint_node(tmp_path, name="n1")
    node.drivers["mock_driver"] = DriverInfo(detected=True, healthy=True)
    node.attributes["driver.mock_driver"] = "1"
    proc = _Proc(server, _Config())
    app = Starlette(routes=[Route(f.path, f.endpoint, methods=list(f.methods))
                            for f in routes(cast(Any, proc))])
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.follow)
            nursery.start_soon(server.lead)  # as the elected leader does
            proc.url = url = await nursery.start(serve_app, app)
            remote = RemoteServer(node, [url], str(uuid.uuid4()))  # the default 5 min wait
            await nursery.start(remote.run)
            await remote.registered.wait()
            assert server.cluster_nodes[node.id].status == "ready"
            assert remote.servers == [url]
            assert remote.heartbeat_ttl >= 1.0

            await remote.pulled.wait()  # the blocking query answered: nothing placed yet
            assert remote.allocs_for_node() == []
            assert remote.alloc_fetches == 0
            await eventually(lambda: remote.heartbeats >= 2)  # TTL ≥ 1 s: beats every TTL

            # A node change reaches the cluster through a registration.
            node.meta["rack"] = "r9"
            remote.node_updated()
            await eventually(lambda: server.cluster_nodes[node.id].meta.get("rack") == "r9")

            stranger = RemoteServer(node, [url], "not-the-secret", wait=2.0)
            with pytest.raises(NodeRPCError) as refused:
                await stranger.update_allocs([])
            assert refused.value.status == 403
            await stranger.aclose()
            nursery.cancel_scope.cancel()

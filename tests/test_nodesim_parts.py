"""The node simulator's parts without servers: the profile file, the made-up nodes, the call
counting and the naive sync (layers 0 and 1)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

from yurt.runtime.client.allocrunner.simulated import AllocProfile
from yurt.runtime.server.scheduler.feasible import resolve_target
from yurt.runtime.sim.nodesim import (
    CountingTransport,
    NaiveSyncer,
    call_kind,
    latency_summary,
    make_node,
    node_identity,
    nonzero,
)
from yurt.runtime.sim.nodesim_profile import (
    DeviceProfile,
    NodeProfile,
    ProfileError,
    load_profile,
)
from yurt.runtime.structs import Allocation


def test_a_profile_file_sets_nodes_and_allocations(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("""
[node]
datacenter = "east"
node_class = "big"
cpu = 16000
memory_mb = 65536
meta = { rack = "r1" }
[[node.devices]]
vendor = "nvidia"
type = "gpu"
name = "T4"
count = 2
[alloc]
start_delay = 0.5
run_time = [10, 20]
failure_probability = 0.25
""")
    profile = load_profile(path)
    assert profile.node == NodeProfile(
        datacenter="east", node_class="big", cpu=16000, memory_mb=65536,
        devices=(DeviceProfile("nvidia", "gpu", "T4", 2),), meta={"rack": "r1"})
    assert profile.alloc == AllocProfile(start_delay=(0.5, 0.5), run_time=(10.0, 20.0),
                                         failure_probability=0.25)


@pytest.mark.parametrize(("text", "message"), [
    ("[node]\ncpu = 0\n", "node.cpu: expected an integer >= 1, got 0"),
    ("[node]\nmemroy_mb = 1\n", "node.memroy_mb: unknown field"),
    ("[alloc]\nrun_time = [5, 1]\n", "alloc.run_time: expected seconds, or [low, high]"),
    ("[alloc]\nfailure_probability = 2\n", "alloc.failure_probability: expected a number in "
                                            "[0, 1], got 2"),
    ("[[node.devices]]\nvendor = \"x\"\n", "node.devices[0].type: required (a string)"),
    ("node = 3\n", "node: expected a table ([node]), got 3"),
    ("[node\n", "not valid TOML"),
])
def test_a_bad_profile_names_file_field_and_expectation(tmp_path: Path, text: str,
                                                        message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match="^" + str(path).replace(".", r"\.")) as info:
        load_profile(path)
    assert message in str(info.value)


def test_nodes_are_the_same_for_the_same_seed_and_place_any_driver() -> None:
    assert node_identity(1, 5) == node_identity(1, 5)
    assert node_identity(1, 5) != node_identity(2, 5)
    assert node_identity(1, 5) != node_identity(1, 6)
    node_id, secret = node_identity(1, 5)
    assert node_id != secret
    profile = NodeProfile(devices=(DeviceProfile("nvidia", "gpu", "T4", 2),))
    node = make_node(1, 5, profile, name_prefix="n")
    assert (node.id, node.name) == (node_id, "n5")
    assert make_node(1, 5, profile).computed_class == node.computed_class
    for driver in ("raw_exec", "mock_driver"):
        assert node.drivers[driver].detected
        assert node.drivers[driver].healthy
        assert resolve_target(f"${{attr.driver.{driver}}}", node) == ("true", True)
    assert resolve_target("${attr.kernel.name}", node) == ("linux", True)
    assert [len(d.instances) for d in node.node_resources.devices] == [2]


def test_calls_are_told_apart_by_method_and_path() -> None:
    base = "http://s:4646/v1/internal"
    assert call_kind("PUT", f"{base}/node/register") == "register"
    assert call_kind("PUT", f"{base}/node/x/heartbeat") == "heartbeat"
    assert call_kind("GET", f"{base}/node/x/allocs") == "alloc_pull"
    assert call_kind("POST", f"{base}/allocs") == "alloc_fetch"
    assert call_kind("POST", f"{base}/node/x/allocs/update") == "update"
    assert call_kind("GET", "http://s:4646/v1/nodes") == "other"


async def test_the_counting_transport_counts_answers_failures_and_bytes() -> None:
    async def inner(method: str, url: str, *, content: bytes | None,
                    params: dict[str, str] | None, headers: dict[str, str]
                    ) -> tuple[int, bytes]:
        await trio.lowlevel.checkpoint()
        if "slow" in url:
            await trio.sleep_forever()
        if "heartbeat" in url:
            raise OSError("refused")
        return (404 if "register" in url else 200), b"12345"

    counting = CountingTransport(inner)
    await counting("GET", "http://s/v1/internal/node/x/allocs", content=None, params=None,
                   headers={})
    await counting("PUT", "http://s/v1/internal/node/register", content=b"abc", params=None,
                   headers={})
    with pytest.raises(OSError, match="refused"):
        await counting("PUT", "http://s/v1/internal/node/x/heartbeat", content=b"z",
                       params=None, headers={})
    assert nonzero(counting.calls) == {"alloc_pull": 1, "register": 1, "heartbeat": 1}
    assert nonzero(counting.answered) == {"alloc_pull": 1, "register": 1}
    assert nonzero(counting.refused) == {"register": 1}
    assert nonzero(counting.unreachable) == {"heartbeat": 1}
    assert nonzero(counting.unanswered()) == {}
    with trio.move_on_after(0.05):  # given up at a deadline: sent, never answered
        await counting("PUT", "http://s/v1/internal/node/x/slow/allocs/update", content=b"",
                       params=None, headers={})
    assert nonzero(counting.unanswered()) == {"update": 1}
    async with trio.open_nursery() as nursery:  # cut short by a stop, before its deadline

        async def call() -> None:
            with trio.move_on_after(10):
                await counting("GET", "http://s/slow", content=None, params=None, headers={})

        nursery.start_soon(call)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert nonzero(counting.unanswered()) == {"update": 1}
    assert nonzero(counting.stopped) == {"other": 1}
    assert (counting.bytes_sent, counting.bytes_received) == (4, 10)


async def test_the_naive_syncer_sends_every_update_alone_and_in_order(
        autojump_clock: trio.testing.MockClock) -> None:
    sent: list[list[str]] = []
    fail = [True]
    all_sent = trio.Event()

    async def send(batch: list[Allocation]) -> None:
        await trio.sleep(0.01)
        if fail[0]:
            fail[0] = False
            raise OSError("no server")
        sent.append([f"{a.id}:{a.client_status}" for a in batch])
        if len(sent) == 3:
            all_sent.set()

    syncer = NaiveSyncer(send, rng=random.Random(1))
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        for status in ("pending", "running", "complete"):
            syncer.add(Allocation(id="a", client_status=status))
        await trio.sleep(1)
        assert sent == []  # not before the servers were contacted
        syncer.servers_contacted.set()
        await all_sent.wait()
        nursery.cancel_scope.cancel()
    # The first send failed and was retried: nothing lost, nothing merged.
    assert sent == [["a:pending"], ["a:running"], ["a:complete"]]
    assert (syncer.calls, syncer.sent) == (4, 3)


def test_latency_percentiles_are_nearest_rank() -> None:
    assert latency_summary([]) == {"count": 0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    summary = latency_summary([i / 1000 for i in range(1, 101)])
    assert summary == {"count": 100, "p50": 50.0, "p95": 95.0, "max": 100.0}

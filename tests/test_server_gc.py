"""The embedded server's placement and updates, and the garbage collector (layer 1)."""

from __future__ import annotations

from pathlib import Path

import trio
from trio.testing import MockClock

from runtime.eventstream import EventBroker
from runtime.gc import AllocGarbageCollector, GCConfig
from runtime.jobspec import parse_job
from runtime.server.local import LocalServer
from runtime.server.store import ServerStore
from runtime.structs import Node, NodeCpuResources, NodeMemoryResources, NodeResources

JOB = '''job "%s" {
  group "g" {
    count = %d
    task "t" {
      driver = "mock_driver"
      config { run_for = "%s" }
      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}'''


def server(cpu: int = 2000, memory: int = 1024) -> LocalServer:
    node = Node(id="n1", name="n1", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=cpu), memory=NodeMemoryResources(memory_mb=memory)))
    return LocalServer(node, EventBroker())


async def test_placement_stops_where_cpu_or_memory_run_out(autojump_clock: MockClock) -> None:
    s = server(cpu=4000, memory=1024)
    result = await s.register_job(parse_job(JOB % ("a", 3, "1h")))
    assert [a.name for a in result.placed] == ["a.g[0]", "a.g[1]", "a.g[2]"]
    assert result.failed == {}
    more = await s.register_job(parse_job(JOB % ("b", 2, "1h")))
    assert [a.name for a in more.placed] == ["b.g[0]"]  # what fits is placed
    assert "Resources exhausted: memory" in more.failed["g"]
    assert "0 of 1024 MB free" in more.failed["g"]
    cpu_bound = await server(cpu=600).register_job(parse_job(JOB % ("c", 2, "1h")))
    assert len(cpu_bound.placed) == 1
    assert cpu_bound.failed["g"].startswith("Resources exhausted: cpu")


async def test_job_update_replaces_allocations_and_unchanged_is_a_no_op(
        autojump_clock: MockClock) -> None:
    s = server()
    first = await s.register_job(parse_job(JOB % ("a", 2, "1h")))
    same = await s.register_job(parse_job(JOB % ("a", 2, "1h")))
    assert same.unchanged
    assert len(s.allocs) == 2
    update = await s.register_job(parse_job(JOB % ("a", 1, "2h")))
    assert s.jobs["a"].version == 1
    (new,) = update.placed
    old = {a.name: a for a in first.placed}
    assert new.previous_allocation == old["a.g[0]"].id
    assert sorted(a.id for a in update.stopped) == sorted(a.id for a in first.placed)
    assert all(s.allocs[a.id].desired_status == "stop" for a in first.placed)
    assert s.allocs[old["a.g[0]"].id].next_allocation == new.id
    assert s.allocs[old["a.g[1]"].id].desired_description == (
        "alloc not needed due to job update")


async def test_server_state_survives_a_restart(tmp_path: Path) -> None:
    with trio.fail_after(10):
        store = await ServerStore.open(tmp_path)
        s = server()
        s.store = store
        await s.register_job(parse_job(JOB % ("a", 2, "1h")))
        await s.stop_job("a")
        await store.aclose()
        again = server()
        again.store = await ServerStore.open(tmp_path)
        await again.load()
        await again.store.aclose()
    assert again.jobs["a"].stop
    assert sorted(a.desired_status for a in again.allocs.values()) == ["stop", "stop"]
    assert again.index == s.index


class FakeUsage:
    def __init__(self) -> None:
        self.disk = 10.0
        self.inodes = 10.0

    async def __call__(self, path: Path) -> tuple[float, float]:
        await trio.lowlevel.checkpoint()
        return self.disk, self.inodes


async def test_gc_collects_oldest_first_only_while_over_a_threshold(
        autojump_clock: MockClock) -> None:
    destroyed: list[str] = []
    live = {"a", "b", "c", "d"}

    async def destroy(alloc_id: str) -> None:
        await trio.sleep(1)
        destroyed.append(alloc_id)
        live.discard(alloc_id)

    usage = FakeUsage()
    gc = AllocGarbageCollector(destroy, lambda: len(live), Path("/"),
                               GCConfig(interval=60, max_allocs=3), usage=usage)
    async with trio.open_nursery() as nursery:
        await nursery.start(gc.run)
        for alloc_id in ("c", "a", "b"):
            gc.mark(alloc_id)
            await trio.sleep(0.1)
        await trio.sleep(5)
        assert destroyed == ["c"]  # 4 live > 3: one, the oldest, is enough
        usage.disk = 95.0
        gc.mark("d")
        await trio.sleep(5)
        assert destroyed == ["c", "a", "b", "d"]  # disk over 80%: everything terminal goes
        nursery.cancel_scope.cancel()


async def test_forced_collections_respect_parallelism(autojump_clock: MockClock) -> None:
    running = peak = 0

    async def destroy(alloc_id: str) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await trio.sleep(1)
        running -= 1

    gc = AllocGarbageCollector(destroy, lambda: 0, Path("/"), GCConfig(parallel=2),
                               usage=FakeUsage())
    for alloc_id in "abcde":
        gc.mark(alloc_id)
    assert not await gc.collect("zzz")
    assert await gc.collect("a")
    start = trio.current_time()
    assert await gc.collect_all() == 4
    assert peak == 2
    assert trio.current_time() - start == 2  # 4 destroys, 2 at a time, 1 s each
    assert gc.queued == []


PRIORITY_JOB = '''job "%s" {
  priority = %d
  group "g" {
    count = %d
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 100
        memory = 256
      }
    }
  }
}'''


async def test_preemption_evicts_lowest_priority_first_and_as_few_as_possible(
        autojump_clock: MockClock) -> None:
    s = server(cpu=10_000, memory=1024)
    low = await s.register_job(parse_job(PRIORITY_JOB % ("low", 20, 2)))
    mid = await s.register_job(parse_job(PRIORITY_JOB % ("mid", 40, 1)))
    assert len(low.placed) == 2
    assert len(mid.placed) == 1  # 256 MB left
    close = await s.register_job(parse_job(PRIORITY_JOB % ("close", 45, 2)))
    first, second = close.placed
    assert first.preempted_allocations == []  # it fit in the 256 MB left
    (victim,) = second.preempted_allocations  # one eviction is enough …
    assert s.allocs[victim].job_id == "low"  # … and only priority ≤ 35 may be evicted
    assert s.allocs[mid.placed[0].id].desired_status == "run"
    high = await s.register_job(parse_job(PRIORITY_JOB % ("high", 80, 1)))
    (placed,) = high.placed
    evicted = [s.allocs[i] for i in placed.preempted_allocations]
    assert [a.job_id for a in evicted] == ["low"]  # lowest priority first
    assert evicted[0].desired_status == "evict"
    assert evicted[0].preempted_by_allocation == placed.id
    assert "Preempted by allocation" in evicted[0].desired_description
    assert all(a.is_terminal() for a in s.allocs.values() if a.job_id == "low")


async def test_no_preemption_within_ten_priority_points(autojump_clock: MockClock) -> None:
    s = server(cpu=10_000, memory=512)
    await s.register_job(parse_job(PRIORITY_JOB % ("a", 50, 2)))
    nope = await s.register_job(parse_job(PRIORITY_JOB % ("b", 59, 1)))
    assert nope.placed == []
    assert "Resources exhausted: memory" in nope.failed["g"]

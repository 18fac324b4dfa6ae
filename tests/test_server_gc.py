"""The embedded server's placement and updates, and the garbage collector (layer 1)."""

from __future__ import annotations

from pathlib import Path

import trio
from trio.testing import MockClock

from yurt.runtime.client.gc import AllocGarbageCollector, GCConfig
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.state.sqlite import ServerStore
from yurt.runtime.structs import Node, NodeCpuResources, NodeMemoryResources, NodeResources

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


async def test_the_collector_forgets_what_it_destroyed(autojump_clock: MockClock) -> None:
    async def destroy(alloc_id: str) -> None:
        await trio.sleep(1)

    gc = AllocGarbageCollector(destroy, lambda: 0, Path("/"), usage=FakeUsage())
    for n in range(100):
        gc.mark(f"a{n}")
    assert gc.tracked == 100
    assert await gc.collect_all() == 100
    assert gc.tracked == 0  # nothing kept for ever, however many allocations come and go


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


def two_groups(a_cpu: int, b_cpu: int, *, a_gpus: int = 0, b_gpus: int = 0,
               b_run_for: str = "1h", priority: int = 50, job_id: str = "two") -> str:
    def group(name: str, cpu: int, gpus: int, run_for: str) -> str:
        device = f'device "nvidia/gpu" {{\n count = {gpus}\n }}' if gpus else ""
        return f'''group "{name}" {{
    task "t" {{
      driver = "mock_driver"
      config {{ run_for = "{run_for}" }}
      resources {{
        cpu    = {cpu}
        memory = 10
        {device}
      }}
    }}
  }}'''
    return (f'job "{job_id}" {{\n priority = {priority}\n'
            + group("a", a_cpu, a_gpus, "1h") + group("b", b_cpu, b_gpus, b_run_for) + "}")


def gpu_server(cpu: int, gpus: int) -> LocalServer:
    from yurt.runtime.structs import NodeDeviceInstance, NodeDeviceResource

    s = server(cpu=cpu, memory=10_000)
    s.node.node_resources.devices = [NodeDeviceResource(
        vendor="nvidia", type="gpu", name="T4",
        instances=[NodeDeviceInstance(id=f"GPU-{i}") for i in range(gpus)])]
    return s


def live_usage(s: LocalServer) -> tuple[int, list[str]]:
    live = [a for a in s.allocs.values() if not a.is_terminal()]
    cpu = sum(t.resources.cpu for a in live for t in
              a.job.lookup_group(a.task_group).tasks)  # type: ignore[union-attr]
    ids = [i for a in live for r in a.task_resources.values() for d in r.devices
           for i in d.device_ids]
    return cpu, ids


async def test_an_update_that_half_fits_never_overcommits(autojump_clock: MockClock) -> None:
    s = gpu_server(cpu=1000, gpus=0)
    await s.register_job(parse_job(two_groups(500, 500)))
    update = await s.register_job(parse_job(two_groups(600, 500, b_run_for="2h")))
    cpu, _ = live_usage(s)
    assert cpu <= 1000
    assert update.failed  # something could not be replaced …
    assert len([a for a in s.allocs.values() if not a.is_terminal()]) == 2  # … and still runs


async def test_an_update_that_half_fits_never_shares_a_device(autojump_clock: MockClock) -> None:
    s = gpu_server(cpu=10_000, gpus=2)
    await s.register_job(parse_job(two_groups(100, 100, a_gpus=1, b_gpus=1)))
    await s.register_job(parse_job(two_groups(100, 100, a_gpus=2, b_gpus=1,
                                              b_run_for="2h")))
    _, ids = live_usage(s)
    assert len(ids) == len(set(ids))  # no instance held twice


async def test_preemption_evicts_only_what_helps(autojump_clock: MockClock) -> None:
    s = gpu_server(cpu=10_000, gpus=1)
    cpu_only = await s.register_job(parse_job(PRIORITY_JOB.replace(
        "memory = 256", "memory = 10") % ("cpuonly", 10, 1)))
    holder = await s.register_job(parse_job(two_groups(100, 100, a_gpus=1, job_id="holder",
                                                      priority=20)))
    wants = await s.register_job(parse_job(two_groups(100, 100, a_gpus=1, job_id="wants",
                                                     priority=50)))
    evicted = {i for a in wants.placed for i in a.preempted_allocations}
    holder_gpu = next(a.id for a in holder.placed if a.task_group == "a")
    assert evicted == {holder_gpu}
    assert s.allocs[cpu_only.placed[0].id].desired_status == "run"


async def test_forced_collection_waits_for_the_servers_acknowledgement(
        autojump_clock: MockClock) -> None:
    acked: set[str] = set()
    destroyed: list[str] = []

    async def destroy(alloc_id: str) -> None:
        await trio.lowlevel.checkpoint()
        destroyed.append(alloc_id)

    gc = AllocGarbageCollector(destroy, lambda: 0, Path("/"), usage=FakeUsage(),
                               ready=lambda a: a in acked)
    gc.mark("a")
    gc.mark("b")
    async with trio.open_nursery() as nursery:
        async def acknowledge() -> None:
            await trio.sleep(0.2)
            acked.add("a")
            gc.wake()

        nursery.start_soon(acknowledge)
        start = trio.current_time()
        assert await gc.collect("a")
        assert trio.current_time() - start == 0.2
    assert not await gc.collect("b")  # never acknowledged: given up after a bound
    assert await gc.collect_all() == 0
    assert destroyed == ["a"]
    assert gc.queued == ["b"]

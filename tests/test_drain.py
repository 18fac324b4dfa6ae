"""Node drain: the pure planner (layer 0) and a whole drain with a deadline under a mock clock
(layer 1: the embedded server, the client with mock tasks, the drainer, `autojump_clock`)."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import msgspec
import pytest
import trio
from trio.testing import MockClock

from tests.runtime_support import seconds, unix_clock
from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client.allocsync import AllocSyncer
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.nodestate import NodeControl
from yurt.runtime.server.scheduler.drain import node_refusal, plan_drain, start_strategy
from yurt.runtime.structs import (
    Allocation,
    Job,
    MigrateStrategy,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
    TaskGroup,
)
from yurt.store import MemoryStateDB

S = 1_000_000_000
NOW = 1_700_000_000 * S


def _allocs(job_type: str, count: int, max_parallel: int | None = None) -> list[Allocation]:
    group = TaskGroup(name="g", count=count,
                      migrate=MigrateStrategy(max_parallel=max_parallel)
                      if max_parallel else None)
    job = Job(id=f"j-{job_type}", type=job_type, task_groups=[group])
    return [Allocation(id=f"{job_type}-{i}", name=f"j.g[{i}]", job_id=job.id, job=job,
                       task_group="g", client_status="running", create_index=i)
            for i in range(count)]


def _stop(alloc: Allocation, client_status: str = "running") -> Allocation:
    return msgspec.structs.replace(alloc, desired_status="stop", client_status=client_status)


# --------------------------------------------------------------------------- the planner


def test_waves_of_max_parallel_per_group() -> None:
    strategy = start_strategy(0, False, NOW, None)
    allocs = _allocs("service", 5, max_parallel=2)
    plan = plan_drain(strategy, allocs, NOW)
    assert [a.id for a in plan.stop] == ["service-0", "service-1"]
    assert not plan.complete
    assert plan.wake_at is None
    # While the first wave is still stopping, nothing more goes.
    stopping = [_stop(a) for a in allocs[:2]] + allocs[2:]
    assert plan_drain(strategy, stopping, NOW).stop == []
    # One of them is dead: room for one more.
    one_dead = [_stop(allocs[0], "complete"), _stop(allocs[1]), *allocs[2:]]
    assert [a.id for a in plan_drain(strategy, one_dead, NOW).stop] == ["service-2"]


def test_default_max_parallel_is_one_and_batch_waits_for_the_deadline() -> None:
    strategy = start_strategy(60 * S, False, NOW, None)
    allocs = _allocs("service", 3) + _allocs("batch", 2)
    plan = plan_drain(strategy, allocs, NOW)
    assert [a.id for a in plan.stop] == ["service-0"]
    assert plan.wake_at == NOW + 60 * S
    # Services done, batch still running: not complete before the deadline...
    done = [_stop(a, "complete") for a in allocs[:3]] + allocs[3:]
    plan = plan_drain(strategy, done, NOW + 59 * S)
    assert (plan.stop, plan.complete) == ([], False)
    # ...at it, what is left is stopped and the drain is over.
    plan = plan_drain(strategy, done, NOW + 60 * S)
    assert [a.id for a in plan.stop] == ["batch-0", "batch-1"]
    assert plan.complete
    assert plan.deadlined


def test_system_allocations_go_last_unless_ignored() -> None:
    allocs = _allocs("service", 1) + _allocs("system", 1)
    strategy = start_strategy(0, False, NOW, None)
    assert [a.id for a in plan_drain(strategy, allocs, NOW).stop] == ["service-0"]
    done = [_stop(allocs[0], "complete"), allocs[1]]
    plan = plan_drain(strategy, done, NOW)
    assert [a.id for a in plan.stop] == ["system-0"]
    assert plan.complete
    ignoring = start_strategy(0, True, NOW, None)
    plan = plan_drain(ignoring, done, NOW)
    assert plan.stop == []
    assert plan.complete
    forced = start_strategy(-1, True, NOW, None)
    assert [a.id for a in plan_drain(forced, allocs, NOW).stop] == ["service-0"]


def test_strategy_times_and_node_refusal() -> None:
    first = start_strategy(90 * S, False, NOW, None)
    assert first.force_deadline.timestamp() == (NOW + 90 * S) / S
    assert first.started_at.timestamp() == NOW / S
    update = start_strategy(0, False, NOW + 5 * S, first)
    assert update.started_at == first.started_at  # an update keeps when the drain began
    node = Node(id="n")
    assert node_refusal(node) == ""
    node.scheduling_eligibility = "ineligible"
    assert "ineligible" in node_refusal(node)
    node.scheduling_eligibility, node.drain_strategy = "eligible", first
    assert "draining" in node_refusal(node)


# --------------------------------------------------------------------------- a whole drain

JOB = """
job "web" {
  group "g" {
    count = 5
    task "t" {
      driver = "mock_driver"
      kill_timeout = "40s"
      config {
        run_for    = "24h"
        kill_after = "30s"
      }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
"""


def _job(job_id: str = "web") -> Job:
    """JOB with `migrate { max_parallel = 2 }`, set on the struct (the jobspec does not read
    `migrate` yet)."""
    job = parse_job(JOB.replace('"web"', f'"{job_id}"'))
    job.task_groups[0].migrate = MigrateStrategy(max_parallel=2)
    return job


async def test_drain_with_a_deadline_under_a_mock_clock(autojump_clock: MockClock) -> None:
    """Five allocations, max_parallel 2, tasks that take 30 s to stop, a 45 s deadline: the
    first wave of two stops at 0 s and is dead at 30 s; the second wave of two starts then;
    at 45 s the deadline force-stops the fifth and the drain completes, the node
    ineligible."""
    broker = EventBroker()
    node = Node(id="n1", name="n1", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=4096)))
    server = LocalServer(node, broker)
    control = NodeControl(server, None, unix_clock=unix_clock)
    await control.load()
    db = MemoryStateDB()
    syncer = AllocSyncer(server.update_allocs, db, unix_clock=unix_clock,
                         rng=random.Random(1))
    syncer.servers_contacted.set()
    client = Client(AllocRunnerConfig(state_db=db, drivers={"mock_driver": MockDriver(
        unix_clock)}, unix_clock=unix_clock), broker, on_alloc_update=syncer.add)
    stop_times: dict[str, float] = {}  # alloc name → when its stop was asked (s)
    dead_times: dict[str, float] = {}  # alloc name → when the server saw it complete

    async def watch_server() -> None:  # the agent's loop: server changes → client
        while True:
            changed = server.changed
            client.sync_allocs(server.allocs_for_node())
            for alloc in server.allocs.values():
                if alloc.desired_status == "stop":
                    stop_times.setdefault(alloc.name, seconds(unix_clock()))
                if alloc.client_status == "complete":
                    dead_times.setdefault(alloc.name, seconds(unix_clock()))
            await changed.wait()

    async with trio.open_nursery() as nursery:
        for service in (client.run, syncer.run):
            await nursery.start(service)
        nursery.start_soon(watch_server)
        await nursery.start(control.run)
        assert len((await server.register_job(_job())).placed) == 5
        await trio.sleep(10)
        assert all(r.alloc_state().client_status == "running" for r in client.runners.values())
        start = seconds(unix_clock())
        await control.set_drain(45 * S)
        assert node.drain
        assert node.scheduling_eligibility == "ineligible"
        # A job registered while draining gets nothing placed.
        blocked = await server.register_job(_job("other"))
        assert blocked.placed == []
        assert "draining" in blocked.failed["g"]
        with trio.fail_after(120):
            while node.drain_strategy is not None:
                await server.changed.wait()
        end = seconds(unix_clock())
        await trio.sleep(40)  # the force-stopped tasks finish dying
        nursery.cancel_scope.cancel()

    rel = {name: round(t - start) for name, t in stop_times.items()}
    assert sorted(rel.values()) == [0, 0, 30, 30, 45], rel
    first_wave = [n for n, t in rel.items() if t == 0]
    assert all(round(dead_times[n] - start) == 30 for n in first_wave), dead_times
    assert round(end - start) == 45
    assert not node.drain
    assert node.scheduling_eligibility == "ineligible"
    assert node.events[-1].message == "Node drain complete"
    assert node.events[-1].details == {"deadline_reached": "true"}
    assert all(a.client_status == "complete" for a in server.allocs.values()
               if a.job_id == "web")
    # Each stop is evaluated as Nomad's drainer's is, named for the drain.
    drains = [e for e in server.evals.values() if e.job_id == "web"
              and e.triggered_by not in ("job-register", "alloc-failure", "queued-allocs")]
    assert drains
    assert {e.triggered_by for e in drains} == {"node-drain"}


# --------------------------------------------------------------------------- persistence


async def test_node_state_is_reloaded_and_raises_the_index(tmp_path: Path) -> None:
    path = tmp_path / "node-state.json"
    server = LocalServer(Node(id="n"), EventBroker())
    control = NodeControl(server, path)
    await control.load()
    assert [e.message for e in server.node.events] == ["Node registered"]
    index = await control.set_drain(90 * S, ignore_system_jobs=True, meta={"why": "kernel"})
    assert path.stat().st_mode & 0o777 == 0o600
    again = LocalServer(Node(id="n"), EventBroker())  # a restarted agent: index 0 in memory
    await NodeControl(again, path).load()
    node = again.node
    assert node.drain_strategy == server.node.drain_strategy
    assert node.drain
    assert node.scheduling_eligibility == "ineligible"
    assert node.modify_index == index
    assert again.index == index  # the next change takes a fresh index
    assert [e.message for e in node.events] == ["Node registered", "Node drain strategy set"]
    assert node.last_drain is not None
    assert node.last_drain.meta == {"why": "kernel"}


async def test_a_failed_write_keeps_the_change_in_memory(tmp_path: Path) -> None:
    server = LocalServer(Node(id="n"), EventBroker())
    control = NodeControl(server, tmp_path / "gone" / "node-state.json")
    await control.load()
    index = await control.set_eligibility("ineligible")
    assert server.node.scheduling_eligibility == "ineligible"
    assert server.node.modify_index == index
    with pytest.raises(ValueError, match="invalid scheduling eligibility"):
        await control.set_eligibility("maybe")


async def test_a_failing_drain_step_is_logged_once_and_retried(
        autojump_clock: MockClock, caplog: pytest.LogCaptureFixture) -> None:
    broker = EventBroker()
    node = Node(id="n1", name="n1", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=4096)))
    server = LocalServer(node, broker)
    control = NodeControl(server, None, unix_clock=unix_clock)
    await control.load()
    assert len((await server.register_job(_job())).placed) == 5
    stop_alloc, failures = server.stop_alloc, 3

    async def failing_stop(alloc_id: str, *, triggered_by: str) -> Allocation:
        nonlocal failures
        if failures:
            failures -= 1
            raise OSError(28, "No space left on device")
        return await stop_alloc(alloc_id, triggered_by=triggered_by)

    server.stop_alloc = failing_stop  # type: ignore[method-assign]
    caplog.set_level(logging.ERROR, "yurt.server.nodestate")
    async with trio.open_nursery() as nursery:
        await nursery.start(control.run)
        await control.set_drain(-1)  # force: every allocation stops at once
        with trio.fail_after(300):
            while node.drain_strategy is not None:
                await server.changed.wait()
        nursery.cancel_scope.cancel()
    assert failures == 0
    assert all(a.desired_status == "stop" for a in server.allocs.values())
    assert node.events[-1].message == "Node drain complete"
    assert [r.getMessage().count("No space left on device") for r in caplog.records] == [1]


async def test_a_fresh_node_registers_with_a_real_index(tmp_path: Path) -> None:
    path = tmp_path / "node-state.json"
    server = LocalServer(Node(id="n"), EventBroker())
    server.observe_index(7)  # what the server's store held
    sub = server.broker.subscribe()
    await NodeControl(server, path).load()
    node = server.node
    assert node.modify_index == node.create_index == server.index == 8
    (event,) = node.events
    assert (event.message, event.create_index) == ("Node registered", 8)
    with trio.fail_after(1):
        record = await sub.receive()
    assert [(e.topic, e.type) for e in record.events] == [("Node", "NodeRegistration")]
    assert record.events[0].payload["Node"].modify_index == 8
    sub.close()
    # A restart knows the node: no second registration, the same indexes.
    again = LocalServer(Node(id="n"), EventBroker())
    await NodeControl(again, path).load()
    assert again.node.modify_index == 8
    assert again.index == 8
    assert [(e.message, e.create_index) for e in again.node.events] == [("Node registered", 8)]

"""Blocked evaluations under the mock clock (layer 1): the server, a client running mock tasks,
and alloc updates between them, as the agent wires them. A job that does not fit stays
blocked; when another allocation stops, it is placed, without being registered again. And an
evaluation stored but not processed when the agent died is processed by the next one."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from tests.runtime_support import seconds, unix_clock, wired_server
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.state.sqlite import ServerStore
from yurt.runtime.structs import (
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
)

JOB = '''job "%s" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "%s" }
      resources {
        cpu    = 100
        memory = 600
      }
    }
  }
}'''


async def test_blocked_job_is_placed_when_another_allocation_stops(
        autojump_clock: MockClock) -> None:
    with trio.fail_after(3600):
        async with wired_server(memory_mb=1024, reschedule=False) as server:
            first = await server.register_job(parse_job(JOB % ("first", "10m")))
            assert len(first.placed) == 1
            second = await server.register_job(parse_job(JOB % ("second", "1m")))
            assert second.placed == []
            assert "memory" in second.failed["g"]
            ev = server.evals[second.eval_id]
            blocked_id = ev.blocked_eval
            assert server.evals[blocked_id].status == "blocked"
            assert server.jobs["second"].status == "pending"
            # Nine minutes on, the first still runs: the second stays blocked.
            await trio.sleep(9 * 60)
            assert server.allocs[first.placed[0].id].client_status == "running"
            assert server.evals[blocked_id].status == "blocked"
            assert server.job_allocs("second") == []
            # The first ends at 10 minutes; its memory frees and the blocked eval places it.
            while not server.job_allocs("second"):
                await server.changed.wait()
            (placed,) = server.job_allocs("second")
            assert seconds(placed.create_time) >= 600
            assert placed.eval_id == blocked_id
            assert server.evals[blocked_id].status == "complete"
            assert server.evals[blocked_id].failed_tg_allocs is None  # this run placed all
            assert server.jobs["second"].version == 0  # never registered again
            assert server.jobs["first"].status == "dead"
            while server.allocs[placed.id].client_status != "complete":
                await server.changed.wait()
            assert server.jobs["second"].status == "dead"


class _Died(Exception):
    """The agent dying between storing an evaluation and processing it."""


async def test_an_evaluation_stored_but_not_processed_is_processed_after_a_restart(
        tmp_path: Path) -> None:
    def fresh() -> LocalServer:
        node = Node(id="n1", name="n1", node_resources=NodeResources(
            cpu=NodeCpuResources(cpu_shares=4000),
            memory=NodeMemoryResources(memory_mb=1024)))
        return LocalServer(node, EventBroker())

    with trio.fail_after(10):
        first = fresh()
        first.store = await ServerStore.open(tmp_path)

        async def die(*args: object, **kwargs: object) -> None:
            await trio.lowlevel.checkpoint()
            raise _Died

        first._process = die  # type: ignore[method-assign]
        with pytest.raises(_Died):
            await first.register_job(parse_job(JOB % ("a", "1m")))
        await first.store.aclose()
        again = fresh()
        again.store = await ServerStore.open(tmp_path)
        await again.load()
        (ev,) = again.evals.values()
        assert (ev.status, ev.job_id) == ("pending", "a")
        assert again.allocs == {}
        async with trio.open_nursery() as nursery:
            await nursery.start(again.run)
            while not again.allocs:
                await again.changed.wait()
            nursery.cancel_scope.cancel()
        await again.store.aclose()
    (alloc,) = again.allocs.values()
    assert alloc.eval_id == ev.id
    assert again.evals[ev.id].status == "complete"


GPU_JOB = '''job "gpu" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 100
        memory = 100
        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}'''


async def test_blocked_job_is_placed_when_a_device_becomes_healthy(
        autojump_clock: MockClock) -> None:
    from yurt.runtime.structs import NodeDeviceInstance, NodeDeviceResource

    node = Node(id="n1", name="n1", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=1024),
        devices=[NodeDeviceResource(vendor="nvidia", type="gpu", name="t4", instances=[
            NodeDeviceInstance(id="GPU-0", healthy=False)])]))
    server = LocalServer(node, EventBroker(), owns_events=True, unix_clock=unix_clock)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            result = await server.register_job(parse_job(GPU_JOB))
            assert result.placed == []
            ev = server.evals[result.eval_id]
            assert ev.failed_tg_allocs is not None
            assert ev.failed_tg_allocs["g"].dimension_exhausted == {"devices": 1}
            # Another node change that frees nothing: the blocked evaluation stays as it is.
            index = server.index
            server.node_updated()
            await trio.testing.wait_all_tasks_blocked()
            assert server.evals[ev.blocked_eval].status == "blocked"
            assert server.index == index + 1  # the node's change only
            node.node_resources.devices[0].instances[0].healthy = True
            server.node_updated()
            while not server.job_allocs("gpu"):
                await server.changed.wait()
            (alloc,) = server.job_allocs("gpu")
            assert alloc.task_resources["t"].devices[0].device_ids == ["GPU-0"]
            assert server.evals[ev.blocked_eval].status == "complete"
            nursery.cancel_scope.cancel()

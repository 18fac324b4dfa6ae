"""Evaluations are collected as Nomad's core GC collects them (layer 1, mock clock): terminal
for longer than the threshold of their job type, and none of their allocations live."""

from __future__ import annotations

from typing import Any

import msgspec
import trio
from trio.testing import MockClock

from tests.runtime_support import unix_clock
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.server.records import collectable_evals
from yurt.runtime.structs import (
    Allocation,
    Evaluation,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
)

HOUR = 3600 * 10**9
JOB = '''job "%s" {
  type = "%s"
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''


def test_collectable_evaluations() -> None:
    evals = {
        "old": Evaluation(id="old", status="complete", modify_time=0),
        "young": Evaluation(id="young", status="complete", modify_time=HOUR),
        "blocked": Evaluation(id="blocked", status="blocked", modify_time=0),
        "busy": Evaluation(id="busy", status="complete", modify_time=0),
        "batch": Evaluation(id="batch", type="batch", status="complete", modify_time=0),
        "done": Evaluation(id="done", status="complete", modify_time=0),
    }
    allocs = {"a": Allocation(id="a", eval_id="busy", client_status="running"),
              "b": Allocation(id="b", eval_id="done", client_status="complete")}
    assert sorted(collectable_evals(evals, allocs, HOUR + 1)) == ["done", "old"]
    assert sorted(collectable_evals(evals, allocs, 25 * HOUR)) == ["batch", "done", "old",
                                                                    "young"]


async def test_the_server_collects_old_evaluations(autojump_clock: MockClock) -> None:
    node = Node(id="n1", name="n1", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=4096)))
    server = LocalServer(node, EventBroker(), owns_events=True, unix_clock=unix_clock)
    with trio.fail_after(10 * 3600):
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            stopped = await server.register_job(parse_job(JOB % ("stopped", "service")))
            gone = await server.deregister_job("stopped")
            live = await server.register_job(parse_job(JOB % ("live", "service")))
            await trio.sleep(3600 - 60)
            assert {stopped.eval_id, gone.eval_id, live.eval_id} <= set(server.evals)
            before = server.index
            await trio.sleep(3600)
            # Collected: the stopped job's (terminal, its allocations stopped); kept: the
            # one whose allocation still runs.
            assert set(server.evals) == {live.eval_id}
            assert server.index == before + 1
            nursery.cancel_scope.cancel()


def test_collectable_allocations_go_with_their_evaluations() -> None:
    from yurt.runtime.server.records import collectable_allocs

    now = 3 * HOUR
    jobs = {"svc": parse_job(JOB % ("svc", "service")),
            "bat": parse_job(JOB % ("bat", "batch"))}

    def alloc(alloc_id: str, **fields: Any) -> Allocation:
        fields.setdefault("job_id", "svc")
        fields.setdefault("eval_id", "e")
        return msgspec.structs.replace(Allocation(id=alloc_id), **fields)

    allocs = {a.id: a for a in (
        alloc("replaced", client_status="failed", next_allocation="next"),
        alloc("waiting", client_status="failed"),  # the unlimited default will replace it
        alloc("named", client_status="complete", desired_status="stop"),
        alloc("next", eval_id="f", client_status="running", previous_allocation="named"),
        alloc("stopping", desired_status="stop", client_status="running"),
        alloc("young", client_status="complete", desired_status="stop",
              modify_time=now - HOUR // 6),
        alloc("other", eval_id="x", client_status="failed", next_allocation="n2"),
        alloc("done", job_id="bat", client_status="complete"),
    )}
    # Done on the client an hour ago, of a collected evaluation, named by no live allocation,
    # not waiting for its replacement; a live batch job's completed allocation stays (it is
    # what says the work is done).
    assert collectable_allocs({"e"}, allocs, jobs, now) == ["replaced"]
    jobs["bat"] = msgspec.structs.replace(jobs["bat"], stop=True)
    assert collectable_allocs({"e"}, allocs, jobs, now) == ["replaced", "done"]
    # The evaluation that placed the waiting one is kept with it.
    evals = {"e": Evaluation(id="e", status="complete", modify_time=0)}
    assert collectable_evals(evals, allocs, now, jobs) == []
    del allocs["waiting"]
    assert collectable_evals(evals, allocs, now, jobs) == ["e"]

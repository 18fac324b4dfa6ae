"""Rescheduling under the mock clock (layer 1): the server, a client running mock tasks that
fail, and alloc updates between them, as the agent wires them. A failing service comes back
with Nomad's default exponential backoff (30 s, 60 s, 120 s …); a failing batch job gets its
one attempt a day. Plus the pure policy arithmetic."""

from __future__ import annotations

import itertools

import trio
from trio.testing import MockClock

from tests.runtime_support import seconds, wired_server
from yurt.runtime.jobspec import parse_job
from yurt.runtime.lib.durations import MINUTE, SECOND
from yurt.runtime.server.scheduler.reschedule import eligible, next_delay, unix_ns
from yurt.runtime.structs import (
    DEFAULT_RESCHEDULE_POLICY,
    Allocation,
    RescheduleEvent,
    RescheduleTracker,
)

JOB = '''job "crash" {
  type = "%s"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "mock_driver"
      config {
        run_for   = "1s"
        exit_code = 1
      }
    }
  }
}'''


def test_default_policies_delays_and_attempts() -> None:
    service, batch = DEFAULT_RESCHEDULE_POLICY["service"], DEFAULT_RESCHEDULE_POLICY["batch"]
    alloc = Allocation(id="a")
    delays = []
    for _ in range(9):
        delays.append(next_delay(service, alloc))
        alloc = Allocation(id="a", reschedule_tracker=RescheduleTracker(events=[
            *(alloc.reschedule_tracker.events if alloc.reschedule_tracker else []),
            RescheduleEvent(reschedule_time=0, delay=delays[-1])]))
    assert [d // SECOND for d in delays] == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert eligible(service, alloc, 0)
    once = Allocation(id="b", reschedule_tracker=RescheduleTracker(events=[
        RescheduleEvent(reschedule_time=0, delay=5 * SECOND)]))
    assert next_delay(batch, Allocation(id="c")) == next_delay(batch, once) == 5 * SECOND
    assert eligible(batch, Allocation(id="c"), 0)
    assert not eligible(batch, once, 23 * 60 * MINUTE)  # one attempt a day
    assert eligible(batch, once, 24 * 60 * MINUTE + 1)




async def test_a_crashing_service_comes_back_with_exponential_backoff(
        autojump_clock: MockClock) -> None:
    with trio.fail_after(3 * 3600):
        async with wired_server() as server:
            await server.register_job(parse_job(JOB % "service"))
            while len(server.job_allocs("crash")) < 6:
                await server.changed.wait()
            chain = server.job_allocs("crash")[:6]
            waits = []
            for failed, replacement in itertools.pairwise(chain):
                assert failed.client_status == "failed"
                assert failed.next_allocation == replacement.id
                assert replacement.previous_allocation == failed.id
                follow = server.evals[failed.followup_eval_id]
                assert (follow.triggered_by, follow.status) == ("failed-follow-up", "complete")
                assert replacement.eval_id == follow.id
                finished = max(t.finished_at for t in failed.task_states.values())
                waits.append(round((replacement.create_time - unix_ns(finished)) / SECOND))
            assert waits == [30, 60, 120, 240, 480]
            tracker = chain[5].reschedule_tracker
            assert tracker is not None
            assert [e.delay // SECOND for e in tracker.events] == [30, 60, 120, 240, 480]
            assert [e.prev_alloc_id for e in tracker.events] == [a.id for a in chain[:5]]
            assert server.jobs["crash"].version == 0  # never registered again


async def test_a_failing_batch_job_gets_one_attempt_a_day(autojump_clock: MockClock) -> None:
    with trio.fail_after(3 * 3600):
        async with wired_server() as server:
            await server.register_job(parse_job(JOB % "batch"))
            while len(server.job_allocs("crash")) < 2:
                await server.changed.wait()
            first, second = server.job_allocs("crash")
            assert seconds(second.create_time) - seconds(first.create_time) == 6  # 1 s + 5 s
            await trio.sleep(3600)
            assert [a.client_status for a in server.job_allocs("crash")] == ["failed",
                                                                             "failed"]
            assert server.allocs[second.id].followup_eval_id == ""
            assert server.jobs["crash"].status == "dead"


def crash_with(job_type: str, reschedule: str) -> str:
    """`JOB` with a `reschedule { … }` block in its group."""
    return (JOB % job_type).replace('  group "g" {\n',
                                    f'  group "g" {{\n    reschedule {{\n{reschedule}\n    }}\n')


async def test_a_group_reschedule_block_is_followed(autojump_clock: MockClock) -> None:
    policy = ('attempts = 2\n interval = "1h"\n delay = "10s"\n delay_function = "constant"')
    with trio.fail_after(3 * 3600):
        async with wired_server() as server:
            job = parse_job(crash_with("batch", policy))
            assert job.task_groups[0].reschedule_policy is not None
            await server.register_job(job)
            while len(server.job_allocs("crash")) < 3:
                await server.changed.wait()
            chain = server.job_allocs("crash")
            waits = []
            for failed, replacement in itertools.pairwise(chain):
                assert replacement.previous_allocation == failed.id
                finished = max(t.finished_at for t in failed.task_states.values())
                waits.append(round((replacement.create_time - unix_ns(finished)) / SECOND))
            assert waits == [10, 10]  # constant, not the batch default's 5 s
            await trio.sleep(3600)
            # Two attempts in the hour: the third failure stays, with nothing planned for it.
            allocs = server.job_allocs("crash")
            assert [a.client_status for a in allocs] == ["failed"] * 3
            assert allocs[2].followup_eval_id == ""
            assert allocs[2].next_allocation == ""
            assert [seconds(a.create_time) for a in allocs] == [0, 11, 22]  # 1 s run + 10 s


async def test_attempts_zero_and_not_unlimited_disables_rescheduling(
        autojump_clock: MockClock) -> None:
    with trio.fail_after(3 * 3600):
        async with wired_server() as server:
            await server.register_job(parse_job(crash_with(
                "service", 'attempts = 0\n unlimited = false')))
            while not any(a.client_status == "failed" for a in server.job_allocs("crash")):
                await server.changed.wait()
            await trio.sleep(3600)  # the service default would have replaced it 6 times
            (only,) = server.job_allocs("crash")
            assert (only.client_status, only.followup_eval_id, only.next_allocation) == (
                "failed", "", "")

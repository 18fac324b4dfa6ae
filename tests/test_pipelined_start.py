"""The pipelined start (layer 1, `autojump_clock`, mock driver): the agent-wide bound of task
starts in flight (which re-attached tasks do not wait for), and the zero-delay restart that
takes no sleep."""

from __future__ import annotations

import dataclasses

import trio
from trio.testing import MockClock

from tests.runtime_support import (
    at,
    crash_loop_alloc,
    harness,
    job_alloc,
    seconds,
    types,
    unix_clock,
    until_running,
)
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.taskrunner import events
from yurt.store import MemoryStateDB

N = 50


def blocking_start(alloc_id: str) -> str:
    """One task whose driver start takes 1 s, then runs for an hour."""
    return f'''job "j-{alloc_id}" {{
  type = "service"
  group "g" {{
    task "t" {{
      driver = "mock_driver"
      config {{
        start_block_for = "1s"
        run_for = "1h"
      }}
    }}
  }}
}}'''


async def start_many(limit: int) -> list[AllocRunner]:
    """N allocations placed at once on runners sharing a start limit of `limit`; returns
    once every task is running."""
    async with harness() as h:
        h.config = dataclasses.replace(h.config, start_limiter=trio.CapacityLimiter(limit))
        runners = [h.start(job_alloc(blocking_start(f"a{i}"), alloc_id=f"a{i}"))
                   for i in range(N)]
        with trio.fail_after(3600):
            for ar in runners:
                await until_running(ar, "t")
        h.nursery.cancel_scope.cancel()
    return runners


async def test_first_task_starts_before_the_last_one_is_set_up(autojump_clock: MockClock
                                                                ) -> None:
    runners = await start_many(limit=5)
    started = sorted(at(ar.task_runners["t"], events.STARTED) for ar in runners)
    setup = sorted(at(ar.task_runners["t"], events.SETUP) for ar in runners)
    # Every task was received at once, but only 5 were between prestart and Started at any
    # time: the first ones run after 1 s, while the last ones are not even set up yet.
    assert started[0] == 1.0
    assert setup[-1] > started[0]
    assert started[-1] == N / 5  # ten waves of five one-second starts
    for ar in runners:
        assert types(ar.task_runners["t"]) == [events.RECEIVED, events.SETUP, events.STARTED]


async def test_starts_in_flight_never_exceed_the_limit(autojump_clock: MockClock) -> None:
    runners = await start_many(limit=7)
    spans = [(at(ar.task_runners["t"], events.SETUP), at(ar.task_runners["t"], events.STARTED))
             for ar in runners]
    for t in {begin for begin, _ in spans}:
        assert sum(1 for begin, end in spans if begin <= t < end) <= 7
async def test_zero_delay_restart_happens_without_the_clock_moving(autojump_clock: MockClock
                                                                   ) -> None:
    async with harness() as h:
        ar = h.start(crash_loop_alloc("0s"))
        with trio.fail_after(60):
            await ar.wait_done.wait()
    tr = ar.task_runners["t"]
    terminated = [seconds(e.time) for e in tr.state.events if e.type == events.TERMINATED]
    restarted = [seconds(e.time) for e in tr.state.events if e.type == events.STARTED]
    # Each exit is followed by the next start at the same virtual instant: a delay of 0 is
    # no sleep at all, not a sleep(0) that lets the clock jump.
    assert restarted[1:] == terminated[:len(restarted) - 1]
    assert types(tr).count(events.RESTARTING) == 3


async def test_a_re_attached_task_takes_no_start_slot(autojump_clock: MockClock) -> None:
    alloc = job_alloc(blocking_start("a1"), alloc_id="a1")
    db = MemoryStateDB()
    driver = MockDriver(unix_clock)  # outlives both agents, as a running task would
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                               unix_clock=unix_clock)
    async with trio.open_nursery() as nursery:
        first = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(first.run)
        with trio.fail_after(60):
            await until_running(first, "t")
        nursery.cancel_scope.cancel()  # the agent dies; the task keeps running

    busy = trio.CapacityLimiter(1)
    await busy.acquire()  # every start slot of the next agent is taken
    config = dataclasses.replace(config, start_limiter=busy)
    async with trio.open_nursery() as nursery:
        second = AllocRunner(alloc, config, nursery=nursery)
        await second.restore()
        nursery.start_soon(second.run)
        # The re-attached runner waits for its task (which ends after its hour), instead of
        # waiting for a start slot it does not need.
        listener = second.broadcaster.listen()
        with trio.fail_after(2 * 3600):
            async for view in listener:
                if events.TERMINATED in [e.type for e in view.task_states["t"].events]:
                    break
        listener.close()
        nursery.cancel_scope.cancel()
    assert [kind for _, kind, _ in driver.log] == ["start"]  # re-attached, not started
    busy.release()

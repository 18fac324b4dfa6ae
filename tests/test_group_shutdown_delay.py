"""A group's `shutdown_delay` under `autojump_clock` with the mock driver (layer 1): the
allocation's tasks are killed only once the delay has passed since the stop (Nomad's
group_service_hook.go `PreKill`), and at once when the server asked for no delay
(`DesiredTransition.NoShutdownDelay`)."""

from __future__ import annotations

import msgspec
import trio
from trio.testing import MockClock

from tests.runtime_support import at, harness, job_alloc, stopped, until_running
from yurt.runtime.structs import DesiredTransition

JOB = '''job "j" {
  group "g" {
    shutdown_delay = "9s"
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}
'''


async def _kill_delay(no_delay: bool) -> float:
    alloc = job_alloc(JOB)
    async with harness() as h:
        ar = h.start(alloc)
        await until_running(ar, "t")
        stop_at = trio.current_time()
        stop = stopped(alloc)
        if no_delay:
            stop = msgspec.structs.replace(
                stop, desired_transition=DesiredTransition(no_shutdown_delay=True))
        ar.update(stop)
        await ar.wait_done.wait()
        return at(ar.task_runners["t"], "Killing") - stop_at


async def test_the_group_waits_its_shutdown_delay_before_killing(
        autojump_clock: MockClock) -> None:
    assert 9.0 <= await _kill_delay(no_delay=False) < 10.0


async def test_no_shutdown_delay_skips_it(autojump_clock: MockClock) -> None:
    assert await _kill_delay(no_delay=True) < 1.0

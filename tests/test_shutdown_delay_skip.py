"""`DesiredTransition.NoShutdownDelay` on the client under `autojump_clock` with the mock driver
(layer 1): a task's `shutdown_delay` is skipped with Nomad's "Skipping shutdown delay" event
when the stop asks for it (client/allocrunner/taskrunner/task_runner.go `handleKill`), and a
copy that asks for it while a group's or a task's delay is being waited out ends the wait
(alloc_runner.go `Update` cancelling `shutdownDelayCtx`): what `alloc stop
-no-shutdown-delay` and `job stop -no-shutdown-delay` rely on."""

from __future__ import annotations

import msgspec
import trio
from trio.testing import MockClock

from tests.runtime_support import at, harness, job_alloc, stopped, types, until_running
from yurt.runtime.structs import Allocation, DesiredTransition

GROUP_DELAY = '''job "j" {
  group "g" {
    shutdown_delay = "9s"
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}
'''
TASK_DELAY = '''job "j" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      shutdown_delay = "9s"
      config { run_for = "1h" }
    }
  }
}
'''


def no_delay(alloc: Allocation, index: int) -> Allocation:
    return msgspec.structs.replace(stopped(alloc, index),
                                   desired_transition=DesiredTransition(no_shutdown_delay=True))


async def _killed_after(spec: str, *, skip_at: float | None, at_stop: bool = False
                        ) -> tuple[float, list[str]]:
    """Seconds from the stop to the task's end (its Killed event), and its event types."""
    alloc = job_alloc(spec)
    async with harness() as h:
        ar = h.start(alloc)
        await until_running(ar, "t")
        stop_at = trio.current_time()
        ar.update(no_delay(alloc, 100) if at_stop else stopped(alloc))
        if skip_at is not None:
            await trio.sleep(skip_at)
            ar.update(no_delay(alloc, 101))
        await ar.wait_done.wait()
        tr = ar.task_runners["t"]
        return at(tr, "Killed") - stop_at, types(tr)


async def test_a_tasks_delay_is_skipped_with_nomads_event(autojump_clock: MockClock) -> None:
    took, seen = await _killed_after(TASK_DELAY, skip_at=None, at_stop=True)
    assert took < 1.0
    assert "Skipping shutdown delay" in seen
    assert "Waiting for shutdown delay" not in seen
    took, seen = await _killed_after(TASK_DELAY, skip_at=None)
    assert 9.0 <= took < 10.0
    assert "Waiting for shutdown delay" in seen


async def test_a_later_copy_ends_a_tasks_delay_under_way(autojump_clock: MockClock) -> None:
    took, seen = await _killed_after(TASK_DELAY, skip_at=2.0)
    assert 2.0 <= took < 3.0
    assert "Waiting for shutdown delay" in seen


async def test_a_later_copy_ends_a_groups_delay_under_way(autojump_clock: MockClock) -> None:
    took, _ = await _killed_after(GROUP_DELAY, skip_at=2.0)
    assert 2.0 <= took < 3.0

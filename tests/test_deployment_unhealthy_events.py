"""The `Alloc Unhealthy` events of an unhealthy deployment allocation reach every task even
when the server stops the allocation at once (layer 1: the alloc runner with the mock driver
under `autojump_clock`).

The client's unhealthy health fails the deployment and its rollback stops the allocation
straight away; that update cancels the health watcher. Nomad appends the events in the same
step that sets the health; here they were emitted one task at a time after it, so the stop
cut them short: found by the rolling-update end-to-end test, where the prestart task of a
version stuck past its healthy_deadline never got its event (tests/test_deployment_e2e.py)."""

from __future__ import annotations

import trio
from trio.testing import MockClock

from tests.runtime_support import harness, stopped
from tests.test_alloc_health_runner import deploy_alloc, health_of
from yurt.runtime.client.allocrunner.runner import AllocRunner
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.structs.update import UpdateStrategy

STUCK_IN_PRESTART = '''job "j" {
  group "g" {
    task "init" {
      driver = "mock_driver"
      lifecycle { hook = "prestart" }
      config { run_for = "1h" }
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''


async def test_a_stop_right_after_unhealthy_health_keeps_every_tasks_event(
        autojump_clock: MockClock) -> None:
    alloc = deploy_alloc(STUCK_IN_PRESTART, update=UpdateStrategy(
        min_healthy_time=1 * SECOND, healthy_deadline=3 * SECOND, health_check="task_states"))
    async with harness() as h:
        ar = AllocRunner(alloc, h.config, nursery=h.nursery)
        h.nursery.start_soon(ar.run)
        with trio.fail_after(3600):
            status = await health_of(ar)
            ar.update(stopped(alloc))  # the rollback, as soon as the server has the health
            await ar.wait_done.wait()
        h.nursery.cancel_scope.cancel()
    assert status.healthy is False
    reasons = {name: [e.message for e in tr.state.events if e.type == "Alloc Unhealthy"]
               for name, tr in ar.task_runners.items()}
    assert reasons == {
        "init": ["Task not running for min_healthy_time of 1s by healthy_deadline of 3s"],
        "t": ["Task not running by healthy_deadline of 3s"]}

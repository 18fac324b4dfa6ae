"""Allocation health in a running alloc runner (layer 1): the `alloc_health_watcher` hook with
the mock driver under `autojump_clock`. Health reaches the client view the alloc sync sends
(`DeploymentStatus`), once, at the virtual time Nomad's rules give."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import msgspec
import trio
from trio.testing import MockClock

from tests.runtime_support import at, harness, job_alloc, seconds, unix_clock
from yurt.runtime.client.allocrunner.runner import AllocRunner
from yurt.runtime.client.taskrunner import events
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.structs import Allocation, AllocDeploymentStatus
from yurt.runtime.structs.checks import CheckQueryResult
from yurt.runtime.structs.update import UpdateStrategy


def service(config: str = 'run_for = "1h"', restart: str = "", job_type: str = "service"
            ) -> str:
    return f'''job "j" {{
  type = "{job_type}"
  group "g" {{
    {restart}
    task "t" {{
      driver = "mock_driver"
      config {{ {config} }}
    }}
  }}
}}'''


def deploy_alloc(hcl: str | None = None, *, update: UpdateStrategy | None = None,
                 deployment_id: str = "d1",
                 status: AllocDeploymentStatus | None = None) -> Allocation:
    """An allocation of deployment `deployment_id` whose group has `update` (default: 5 s
    min_healthy_time, 60 s healthy_deadline, task_states)."""
    alloc = job_alloc(hcl or service())
    assert alloc.job is not None
    group = msgspec.structs.replace(alloc.job.task_groups[0], update=update or UpdateStrategy(
        min_healthy_time=5 * SECOND, healthy_deadline=60 * SECOND, health_check="task_states"))
    job = msgspec.structs.replace(alloc.job, task_groups=[group])
    return msgspec.structs.replace(alloc, job=job, deployment_id=deployment_id,
                                   deployment_status=status)


async def health_of(ar: AllocRunner, *, other_than: AllocDeploymentStatus | None = None
                    ) -> AllocDeploymentStatus:
    """Wait, on the runner's broadcasts, until the client view carries health (other than
    `other_than`)."""
    listener = ar.broadcaster.listen()
    try:
        async for alloc in listener:
            status = alloc.deployment_status
            if status is not None and status.healthy is not None and status != other_than:
                return status
    finally:
        listener.close()
    raise AssertionError("the runner ended without health")


def health_time(status: AllocDeploymentStatus) -> float:
    return seconds(int(status.timestamp.timestamp() * 1e9))


async def run_until_health(alloc: Allocation, *, expected_checks: Callable[[Allocation], int]
                           | None = None, during: Callable[[AllocRunner], object] | None = None
                           ) -> tuple[AllocRunner, AllocDeploymentStatus]:
    async with harness() as h:
        config = h.config if expected_checks is None else dataclasses.replace(
            h.config, expected_checks=expected_checks)
        ar = AllocRunner(alloc, config, nursery=h.nursery)
        h.nursery.start_soon(ar.run)
        if during is not None:
            h.nursery.start_soon(during, ar)  # type: ignore[arg-type]
        with trio.fail_after(3600):
            status = await health_of(ar)
        h.nursery.cancel_scope.cancel()
    return ar, status


async def test_healthy_after_min_healthy_time(autojump_clock: MockClock) -> None:
    ar, status = await run_until_health(deploy_alloc(status=AllocDeploymentStatus(
        canary=True, modify_index=3)))
    started = at(ar.task_runners["t"], events.STARTED)
    assert status.healthy is True
    assert health_time(status) == started + 5.0
    assert (status.canary, status.modify_index) == (True, 3)  # the server's, kept
    assert ar.client_alloc().deployment_status == status  # what sync and the API read


async def test_a_restart_starts_the_wait_again(autojump_clock: MockClock) -> None:
    async def restart_at_3s(ar: AllocRunner) -> None:
        await trio.sleep(3)
        await ar.restart_task("t")

    ar, status = await run_until_health(deploy_alloc(), during=restart_at_3s)
    tr = ar.task_runners["t"]
    second_start = at(tr, events.STARTED, 1)
    assert second_start >= 3.0
    assert health_time(status) == second_start + 5.0


async def test_deadline_makes_it_unhealthy_with_nomads_events(autojump_clock: MockClock
                                                             ) -> None:
    async def restart_every_8s(ar: AllocRunner) -> None:
        while True:
            await trio.sleep(8)
            await ar.restart_task("t")

    alloc = deploy_alloc(update=UpdateStrategy(
        min_healthy_time=10 * SECOND, healthy_deadline=20 * SECOND, health_check="task_states"))
    ar, status = await run_until_health(alloc, during=restart_every_8s)
    assert status.healthy is False
    assert health_time(status) == 20.0
    unhealthy = [e for e in ar.task_runners["t"].state.events
                 if e.type == "Alloc Unhealthy"]
    assert len(unhealthy) == 1
    message = "Task not running for min_healthy_time of 10s by healthy_deadline of 20s"
    assert (unhealthy[0].message, unhealthy[0].display_message) == (message, message)
    assert unhealthy[0].details == {"message": message}


async def test_deadline_while_the_task_waits_to_restart(autojump_clock: MockClock) -> None:
    crash = service('run_for = "3s"\n exit_code = 1', restart='restart {\n attempts = 5\n'
                    ' interval = "1h"\n delay = "30s"\n mode = "fail"\n }')
    alloc = deploy_alloc(crash, update=UpdateStrategy(
        min_healthy_time=10 * SECOND, healthy_deadline=20 * SECOND, health_check="task_states"))
    ar, status = await run_until_health(alloc)
    assert (status.healthy, health_time(status)) == (False, 20.0)
    assert [e.message for e in ar.task_runners["t"].state.events
            if e.type == "Alloc Unhealthy"] == ["Task not running by healthy_deadline of 20s"]


async def test_checks_mode_waits_for_passing_checks(autojump_clock: MockClock) -> None:
    async def checks_pass_at_7s(ar: AllocRunner) -> None:
        ar.check_results.set(CheckQueryResult(id="c1", status="pending"))
        await trio.sleep(7)
        ar.check_results.set(CheckQueryResult(id="c1", status="failure"))
        await trio.sleep(1)
        ar.check_results.set(CheckQueryResult(id="c1", status="success"))

    alloc = deploy_alloc(update=UpdateStrategy(min_healthy_time=5 * SECOND,
                                               healthy_deadline=60 * SECOND))
    _, status = await run_until_health(alloc, expected_checks=lambda a: 1,
                                        during=checks_pass_at_7s)
    assert status.healthy is True
    assert health_time(status) == 8.0 + 5.0


async def test_checks_mode_missing_check_hits_the_deadline(autojump_clock: MockClock) -> None:
    async def one_of_two(ar: AllocRunner) -> None:
        ar.check_results.set(CheckQueryResult(id="c1", status="success"))
        await trio.lowlevel.checkpoint()

    alloc = deploy_alloc(update=UpdateStrategy(min_healthy_time=5 * SECOND,
                                               healthy_deadline=60 * SECOND))
    _, status = await run_until_health(alloc, expected_checks=lambda a: 2, during=one_of_two)
    assert (status.healthy, health_time(status)) == (False, 60.0)


async def test_manual_mode_sets_no_health(autojump_clock: MockClock) -> None:
    alloc = deploy_alloc(update=UpdateStrategy(health_check="manual"),
                         status=AllocDeploymentStatus(canary=True))
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(3600)
        assert ar.client_alloc().client_status == "running"
        assert ar.client_alloc().deployment_status == AllocDeploymentStatus(canary=True)
        h.nursery.cancel_scope.cancel()


async def test_batch_jobs_have_no_health(autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.start(job_alloc(service(job_type="batch")))
        await trio.sleep(3600)
        assert ar.client_alloc().client_status == "running"
        assert ar.client_alloc().deployment_status is None
        h.nursery.cancel_scope.cancel()


async def test_service_alloc_outside_a_deployment_uses_the_migrate_default(
        autojump_clock: MockClock) -> None:
    # Nomad's DefaultMigrateStrategy: 10 s of running tasks (no checks here).
    ar, status = await run_until_health(job_alloc(service()))
    assert status.healthy is True
    assert health_time(status) == at(ar.task_runners["t"], events.STARTED) + 10.0


async def test_health_already_set_is_not_tracked_again(autojump_clock: MockClock) -> None:
    # As after an agent restart: the allocation comes back with the health it had.
    earlier = AllocDeploymentStatus(healthy=False, timestamp=events.datetime_of(unix_clock()))
    async with harness() as h:
        ar = h.start(deploy_alloc(status=earlier))
        await trio.sleep(3600)
        assert ar.client_alloc().deployment_status == earlier
        h.nursery.cancel_scope.cancel()


async def test_a_new_deployment_clears_and_tracks_again(autojump_clock: MockClock) -> None:
    alloc = deploy_alloc()
    async with harness() as h:
        ar = h.start(alloc)
        with trio.fail_after(60):
            first = await health_of(ar)
        await trio.sleep(100)
        ar.update(msgspec.structs.replace(alloc, deployment_id="d2", alloc_modify_index=9))
        with trio.fail_after(60):
            second = await health_of(ar, other_than=first)
        h.nursery.cancel_scope.cancel()
    assert (first.healthy, second.healthy) == (True, True)
    assert health_time(second) >= health_time(first) + 100 + 5


async def test_a_new_deployment_publishes_the_cleared_health_at_once(
        autojump_clock: MockClock) -> None:
    """The cleared health is persisted and sent before the new verdict: a restart or the
    alloc sync in between must not carry the old deployment's health."""
    alloc = deploy_alloc()
    async with harness() as h:
        ar = h.start(alloc)
        with trio.fail_after(60):
            await health_of(ar)
        listener = ar.broadcaster.listen()
        ar.update(msgspec.structs.replace(alloc, deployment_id="d2", alloc_modify_index=9))
        with trio.fail_after(60):
            async for after in listener:
                if after.deployment_id == "d2":
                    break
        listener.close()
        # The first view of the new deployment, not its verdict min_healthy_time later.
        assert after.deployment_status is None or after.deployment_status.healthy is None
        h.nursery.cancel_scope.cancel()


async def test_failed_deployment_alloc_is_unhealthy(autojump_clock: MockClock) -> None:
    crash = service('run_for = "1s"\n exit_code = 1', restart='restart {\n attempts = 0\n'
                    ' mode = "fail"\n }')
    async with harness() as h:
        ar = h.runner(deploy_alloc(crash))
        await ar.run()
    status = ar.client_alloc().deployment_status
    assert ar.client_alloc().client_status == "failed"
    assert status is not None
    assert status.healthy is False
    events_ = [e for e in ar.task_runners["t"].state.events if e.type == "Alloc Unhealthy"]
    assert [e.message for e in events_] == ["Unhealthy because of failed task"]


async def test_agent_shutdown_stops_tracking_without_health(autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.start(deploy_alloc())
        await trio.sleep(2)
        await ar.shutdown_and_wait()
        await trio.sleep(3600)  # long past min_healthy_time and the deadline
        assert not ar.health.has_health()
        assert ar.client_alloc().deployment_status is None
        h.nursery.cancel_scope.cancel()


async def test_a_stop_ends_tracking_without_health(autojump_clock: MockClock) -> None:
    alloc = deploy_alloc()
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(2)
        ar.update(msgspec.structs.replace(alloc, desired_status="stop", alloc_modify_index=5))
        await ar.wait_done.wait()
        await trio.sleep(3600)
        assert ar.client_alloc().client_status == "complete"
        assert ar.client_alloc().deployment_status is None
        h.nursery.cancel_scope.cancel()

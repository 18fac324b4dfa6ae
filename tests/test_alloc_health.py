"""Allocation health's sans-io core (layer 0): the tracker's rules as tables, after Nomad's
`client/allochealth/tracker_test.go` and `health_hook_test.go`, with time as a parameter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from tests.runtime_support import job_alloc
from yurt.runtime.client.allocrunner.health import (
    ClientHealth,
    HealthParams,
    Tracker,
    Verdict,
    checks_passing,
    health_params,
    restored_alloc,
)
from yurt.runtime.lib.durations import MINUTE, SECOND
from yurt.runtime.structs import (
    Allocation,
    AllocDeploymentStatus,
    MigrateStrategy,
    TaskState,
    merge_client_health,
)
from yurt.runtime.structs.checks import CheckQueryResult
from yurt.runtime.structs.update import UpdateStrategy

T0 = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
MHT = 10.0  # min_healthy_time, seconds
DEADLINE = 300.0
PARAMS = HealthParams(deploy=True, min_healthy_time=10 * SECOND, healthy_deadline=5 * MINUTE,
                      use_checks=False)
CHECKS = HealthParams(deploy=True, min_healthy_time=10 * SECOND, healthy_deadline=5 * MINUTE,
                      use_checks=True)


def group_hcl(tasks: str, job_type: str = "service") -> str:
    return f'job "j" {{\n type = "{job_type}"\n group "g" {{\n{tasks}\n }}\n}}'


def task_hcl(name: str, lifecycle: str = "") -> str:
    return (f'task "{name}" {{\n driver = "mock_driver"\n config {{ run_for = "1h" }}\n'
            f'{lifecycle}\n}}')


WEB = group_hcl(task_hcl("web"))


def alloc_of(hcl: str = WEB, **fields: object) -> Allocation:
    return msgspec.structs.replace(job_alloc(hcl), **fields)


def with_update(alloc: Allocation, update: UpdateStrategy | None,
                migrate: MigrateStrategy | None = None) -> Allocation:
    assert alloc.job is not None
    group = msgspec.structs.replace(alloc.job.task_groups[0], update=update, migrate=migrate)
    job = msgspec.structs.replace(alloc.job, task_groups=[group])
    return msgspec.structs.replace(alloc, job=job)


def running(at: float = 0.0) -> TaskState:
    return TaskState(state="running", started_at=T0 + timedelta(seconds=at))


def pending() -> TaskState:
    return TaskState(state="pending")


def dead(at: float = 0.0, *, failed: bool = False) -> TaskState:
    return TaskState(state="dead", failed=failed, started_at=T0,
                     finished_at=T0 + timedelta(seconds=at))


def view(alloc: Allocation, client_status: str = "running", **states: TaskState) -> Allocation:
    return msgspec.structs.replace(alloc, client_status=client_status, task_states=states)


def tracker(alloc: Allocation, params: HealthParams = PARAMS, *, checks: int = 0,
            now: float = 0.0) -> Tracker:
    assert alloc.job is not None
    return Tracker(alloc.job.task_groups[0], params, expected_checks=checks, now=now)


def result(status: str, mode: str = "healthiness", check_id: str = "c1") -> CheckQueryResult:
    return CheckQueryResult(id=check_id, mode=mode, status=status)


# --------------------------------------------------------------------------- task states


def test_healthy_once_running_for_min_healthy_time() -> None:
    alloc = alloc_of()
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running()), now=1.0)
    assert t.poll(1.0).verdict is None
    assert t.poll(1.0).wake_at == 1.0 + MHT
    assert t.poll(1.0 + MHT - 0.001).verdict is None
    assert t.poll(1.0 + MHT).verdict is Verdict.HEALTHY


def test_pending_tasks_start_no_timer() -> None:
    alloc = alloc_of()
    t = tracker(alloc)
    t.alloc_updated(view(alloc, "pending", web=pending()), now=0.0)
    assert t.poll(0.0).wake_at == DEADLINE  # only the deadline


def test_a_restart_starts_the_wait_again() -> None:
    alloc = alloc_of()
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running(0)), now=0.0)
    t.alloc_updated(view(alloc, web=pending()), now=5.0)  # restarting
    assert t.poll(MHT).verdict is None
    t.alloc_updated(view(alloc, web=running(8)), now=8.0)
    assert t.poll(8.0 + MHT - 0.001).verdict is None
    assert t.poll(8.0 + MHT).verdict is Verdict.HEALTHY


def test_an_unchanged_start_keeps_the_timer() -> None:
    alloc = alloc_of()
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running(0)), now=0.0)
    t.alloc_updated(view(alloc, web=running(0)), now=6.0)  # e.g. a new event, same start
    assert t.poll(MHT).verdict is Verdict.HEALTHY


def test_the_latest_start_of_all_tasks_counts() -> None:
    alloc = alloc_of(group_hcl(task_hcl("a") + task_hcl("b")))
    t = tracker(alloc)
    t.alloc_updated(view(alloc, a=running(0), b=pending()), now=0.0)
    t.alloc_updated(view(alloc, a=running(0), b=running(4)), now=4.0)
    assert t.poll(MHT).verdict is None
    assert t.poll(4.0 + MHT).verdict is Verdict.HEALTHY


@pytest.mark.parametrize(("state", "message"), [
    (dead(3, failed=True), "Unhealthy because of failed task"),
    (dead(3), "Unhealthy because of dead task"),
])
def test_a_failed_or_finished_main_task_is_unhealthy_at_once(state: TaskState,
                                                            message: str) -> None:
    alloc = alloc_of()
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    t.alloc_updated(view(alloc, web=state), now=3.0)
    decision = t.poll(3.0)
    assert decision.verdict is Verdict.UNHEALTHY
    assert decision.task_events == {"web": message}


def test_an_alloc_failed_without_a_failed_task_has_no_task_events() -> None:
    alloc = alloc_of()
    t = tracker(alloc)
    t.alloc_updated(view(alloc, "failed", web=running()), now=0.0)
    decision = t.poll(0.0)
    assert (decision.verdict, decision.task_events) == (Verdict.UNHEALTHY, {})


@pytest.mark.parametrize("desired", ["stop", "evict"])
def test_a_desired_stop_ends_tracking_without_health(desired: str) -> None:
    alloc = alloc_of()
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    t.alloc_updated(msgspec.structs.replace(view(alloc, web=running()),
                                            desired_status=desired), now=1.0)
    assert t.poll(MHT).verdict is Verdict.STOPPED


def test_pending_poststop_task_is_ignored() -> None:
    # TestTracker_Checks_PendingPostStop_Healthy
    alloc = alloc_of(group_hcl(task_hcl("web") + task_hcl(
        "post", 'lifecycle {\n hook = "poststop"\n}')))
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running(), post=pending()), now=0.0)
    assert t.poll(MHT).verdict is Verdict.HEALTHY


def test_succeeded_poststart_task_is_ignored() -> None:
    # TestTracker_Succeeded_PostStart_Healthy
    alloc = alloc_of(group_hcl(task_hcl("web") + task_hcl(
        "post", 'lifecycle {\n hook = "poststart"\n}')))
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running(), post=dead(0.5)), now=0.0)
    assert t.poll(MHT).verdict is Verdict.HEALTHY


def test_failed_poststart_task_is_unhealthy() -> None:
    alloc = alloc_of(group_hcl(task_hcl("web") + task_hcl(
        "post", 'lifecycle {\n hook = "poststart"\n}')))
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running(), post=dead(0.5, failed=True)), now=0.0)
    assert t.poll(0.0).verdict is Verdict.UNHEALTHY


def test_finished_prestart_task_counts_as_started() -> None:
    alloc = alloc_of(group_hcl(task_hcl("init", 'lifecycle {\n hook = "prestart"\n}')
                               + task_hcl("web")))
    t = tracker(alloc)
    t.alloc_updated(view(alloc, init=dead(1), web=running(2)), now=2.0)
    assert t.poll(2.0 + MHT).verdict is Verdict.HEALTHY


def test_dead_prestart_sidecar_is_unhealthy() -> None:
    alloc = alloc_of(group_hcl(task_hcl(
        "side", 'lifecycle {\n hook = "prestart"\n sidecar = true\n}') + task_hcl("web")))
    t = tracker(alloc)
    t.alloc_updated(view(alloc, side=dead(1), web=running(2)), now=2.0)
    decision = t.poll(2.0)
    assert decision.verdict is Verdict.UNHEALTHY
    assert decision.task_events["side"] == "Unhealthy because of dead task"


# --------------------------------------------------------------------------- the deadline


def test_deadline_gives_nomads_task_events() -> None:
    alloc = alloc_of(group_hcl(task_hcl("a") + task_hcl("b")))
    t = tracker(alloc, now=100.0)
    t.alloc_updated(view(alloc, a=running(0), b=pending()), now=100.0)
    assert t.poll(100.0 + DEADLINE - 0.001).verdict is None
    decision = t.poll(100.0 + DEADLINE)
    assert decision.verdict is Verdict.UNHEALTHY
    assert decision.task_events == {
        "a": "Task not running for min_healthy_time of 10s by healthy_deadline of 5m0s",
        "b": "Task not running by healthy_deadline of 5m0s",
    }


def test_healthy_at_the_deadline_instant_wins() -> None:
    alloc = alloc_of()
    params = HealthParams(True, 10 * SECOND, 10 * SECOND, False)
    t = tracker(alloc, params)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    assert t.poll(10.0).verdict is Verdict.HEALTHY


def test_a_verdict_is_final() -> None:
    alloc = alloc_of()
    t = tracker(alloc)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    assert t.poll(MHT).verdict is Verdict.HEALTHY
    t.alloc_updated(view(alloc, web=dead(20, failed=True)), now=20.0)
    assert t.poll(20.0).verdict is Verdict.HEALTHY


# --------------------------------------------------------------------------- checks


def test_checks_must_pass_for_min_healthy_time_too() -> None:
    # TestTracker_NomadChecks_Healthy: pending, then success.
    alloc = alloc_of()
    t = tracker(alloc, CHECKS, checks=1)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    t.checks_updated({"c1": result("pending")}, now=0.0)
    assert t.poll(MHT).verdict is None  # tasks healthy, checks not yet
    t.checks_updated({"c1": result("success")}, now=5.0)
    assert t.poll(5.0 + MHT - 0.001).verdict is None
    assert t.poll(5.0 + MHT).verdict is Verdict.HEALTHY


def test_failing_check_never_healthy() -> None:
    # TestTracker_NomadChecks_Unhealthy
    alloc = alloc_of()
    t = tracker(alloc, CHECKS, checks=1)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    t.checks_updated({"c1": result("failure")}, now=1.0)
    assert t.poll(DEADLINE - 1).verdict is None
    assert t.poll(DEADLINE).verdict is Verdict.UNHEALTHY


def test_a_failure_restarts_the_checks_wait() -> None:
    alloc = alloc_of()
    t = tracker(alloc, CHECKS, checks=1)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    t.checks_updated({"c1": result("success")}, now=0.0)
    t.checks_updated({"c1": result("failure")}, now=5.0)
    t.checks_updated({"c1": result("success")}, now=7.0)
    assert t.poll(MHT).verdict is None
    assert t.poll(7.0 + MHT).verdict is Verdict.HEALTHY


@pytest.mark.parametrize(("mode", "status", "passes"), [
    ("healthiness", "success", True),
    ("healthiness", "failure", False),
    ("readiness", "success", True),
    ("readiness", "failure", True),  # on_update = "ignore"
    ("healthiness", "pending", False),
    ("readiness", "pending", False),
])
def test_check_modes(mode: str, status: str, passes: bool) -> None:
    # TestTracker_NomadChecks_OnUpdate
    assert checks_passing({"c1": result(status, mode)}, expected=1) is passes


def test_checks_not_all_reported_do_not_pass() -> None:
    assert not checks_passing({"c1": result("success")}, expected=2)
    assert checks_passing({"c1": result("success"), "c2": result("success", check_id="c2")},
                          expected=2)


def test_checks_healthy_before_tasks() -> None:
    # TestTracker_Checks_Healthy_Before_TaskHealth
    alloc = alloc_of(group_hcl(task_hcl("a") + task_hcl("b")))
    t = tracker(alloc, CHECKS, checks=1)
    t.alloc_updated(view(alloc, a=running(0), b=pending()), now=0.0)
    t.checks_updated({"c1": result("success")}, now=0.0)
    assert t.poll(MHT).verdict is None  # checks passed, but b is not running
    t.alloc_updated(view(alloc, a=running(0), b=running(12)), now=12.0)
    assert t.poll(12.0 + MHT).verdict is Verdict.HEALTHY


def test_task_restart_resets_check_health() -> None:
    # TestTracker_Healthy_IfBothTasksAndConsulChecksAreHealthy: task health lost after the
    # checks passed; both must be healthy again.
    alloc = alloc_of()
    t = tracker(alloc, CHECKS, checks=1)
    t.alloc_updated(view(alloc, web=running(0)), now=0.0)
    t.checks_updated({"c1": result("success")}, now=0.0)
    t.alloc_updated(view(alloc, web=pending()), now=9.0)
    assert t.poll(MHT).verdict is None
    t.alloc_updated(view(alloc, web=running(11)), now=11.0)
    assert t.poll(11.0 + MHT).verdict is Verdict.HEALTHY


def test_checks_mode_without_checks_uses_task_states() -> None:
    alloc = alloc_of()
    t = tracker(alloc, CHECKS, checks=0)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    assert t.poll(MHT).verdict is Verdict.HEALTHY


def test_task_states_mode_ignores_checks() -> None:
    alloc = alloc_of()
    t = tracker(alloc, PARAMS, checks=1)
    t.alloc_updated(view(alloc, web=running()), now=0.0)
    t.checks_updated({"c1": result("failure")}, now=0.0)
    assert t.poll(MHT).verdict is Verdict.HEALTHY


# --------------------------------------------------------------------------- parameters


UPDATE = UpdateStrategy(min_healthy_time=3 * SECOND, healthy_deadline=MINUTE,
                        health_check="task_states")


@pytest.mark.parametrize(("alloc", "expected"), [
    (with_update(alloc_of(deployment_id="d1"), UPDATE),
     HealthParams(True, 3 * SECOND, MINUTE, False)),
    (with_update(alloc_of(deployment_id="d1"), UpdateStrategy()),
     HealthParams(True, 10 * SECOND, 5 * MINUTE, True)),
    (with_update(alloc_of(deployment_id="d1"), UpdateStrategy(health_check="manual")), None),
    (with_update(alloc_of(deployment_id="d1"), UpdateStrategy(max_parallel=0)), None),
    (with_update(alloc_of(deployment_id="d1"), None), None),
    # Not in a deployment: the group's migrate strategy, or Nomad's default one.
    (with_update(alloc_of(), UPDATE), HealthParams(False, 10 * SECOND, 5 * MINUTE, True)),
    (with_update(alloc_of(), None, MigrateStrategy(health_check="task_states",
                                                   min_healthy_time=SECOND,
                                                   healthy_deadline=MINUTE)),
     HealthParams(False, SECOND, MINUTE, False)),
    (alloc_of(group_hcl(task_hcl("t"), "batch")), None),
    (alloc_of(group_hcl(task_hcl("t"), "sysbatch")), None),
])
def test_health_params(alloc: Allocation, expected: HealthParams | None) -> None:
    assert health_params(alloc) == expected


# --------------------------------------------------------------------------- client health


def test_client_health_keeps_the_servers_fields() -> None:
    alloc = alloc_of(deployment_id="d1", deployment_status=AllocDeploymentStatus(
        canary=True, modify_index=7))
    health = ClientHealth.of(alloc)
    assert not health.has_health()
    assert health.status(alloc, "running") == alloc.deployment_status
    health.set(True, T0)
    assert health.status(alloc, "running") == AllocDeploymentStatus(
        healthy=True, timestamp=T0, canary=True, modify_index=7)
    health.clear()
    assert health.status(alloc, "running") == alloc.deployment_status


def test_client_health_without_server_status() -> None:
    alloc = alloc_of()
    health = ClientHealth()
    assert health.status(alloc, "running") is None
    health.set(False, T0)
    assert health.status(alloc, "running") == AllocDeploymentStatus(healthy=False,
                                                                    timestamp=T0)


def test_failed_deployment_alloc_without_health_is_unhealthy() -> None:
    # Nomad's clientAlloc guard: the watcher may never have run.
    alloc = alloc_of(deployment_id="d1", deployment_status=AllocDeploymentStatus(canary=True))
    assert ClientHealth().status(alloc, "failed") == AllocDeploymentStatus(healthy=False,
                                                                           canary=True)
    assert ClientHealth().status(alloc_of(), "failed") is None  # not in a deployment


def test_client_health_of_a_copy_with_health() -> None:
    alloc = alloc_of(deployment_status=AllocDeploymentStatus(healthy=True, timestamp=T0))
    health = ClientHealth.of(alloc)
    assert (health.healthy, health.timestamp) == (True, T0)


def test_restored_alloc_takes_the_persisted_health() -> None:
    server = alloc_of(deployment_id="d1",
                      deployment_status=AllocDeploymentStatus(canary=True, modify_index=4))
    stored = msgspec.structs.replace(server, deployment_status=AllocDeploymentStatus(
        healthy=True, timestamp=T0, canary=True))
    assert restored_alloc(server, stored).deployment_status == AllocDeploymentStatus(
        healthy=True, timestamp=T0, canary=True, modify_index=4)
    # A newer deployment, or a server that already knows: the server's copy as it is.
    other = msgspec.structs.replace(server, deployment_id="d2")
    assert restored_alloc(other, stored) is other
    known = msgspec.structs.replace(server, deployment_status=AllocDeploymentStatus(
        healthy=False))
    assert restored_alloc(known, stored) is known
    assert restored_alloc(server, server) is server


# --------------------------------------------------------------------------- the server's merge


def test_server_merge_takes_new_health_with_the_index() -> None:
    server = AllocDeploymentStatus(canary=True, modify_index=4)
    client = AllocDeploymentStatus(healthy=True, timestamp=T0, canary=False, modify_index=1)
    assert merge_client_health(server, client, 9) == AllocDeploymentStatus(
        healthy=True, timestamp=T0, canary=True, modify_index=9)


def test_server_merge_keeps_unchanged_or_unreported_health() -> None:
    server = AllocDeploymentStatus(healthy=True, timestamp=T0, modify_index=9)
    same = AllocDeploymentStatus(healthy=True, timestamp=T0 + timedelta(seconds=1))
    assert merge_client_health(server, same, 12) is server
    assert merge_client_health(server, AllocDeploymentStatus(), 12) is server  # by hand
    assert merge_client_health(server, None, 12) is server
    flipped = AllocDeploymentStatus(healthy=False, timestamp=T0)
    assert merge_client_health(server, flipped, 12) == AllocDeploymentStatus(
        healthy=False, timestamp=T0, modify_index=12)


def test_server_merge_first_status_from_the_client() -> None:
    client = AllocDeploymentStatus(healthy=False, timestamp=T0)
    assert merge_client_health(None, client, 5) == AllocDeploymentStatus(
        healthy=False, timestamp=T0, modify_index=5)
    assert merge_client_health(None, None, 5) is None

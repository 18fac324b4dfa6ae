"""The restart tracker, rule by rule (layer 0: no Trio, time passed in)."""

from __future__ import annotations

import random

import pytest

from yurt.runtime.client.drivers.protocol import ExitResult
from yurt.runtime.client.taskrunner.restarts import (
    REASON_DELAY,
    REASON_NO_RESTARTS_ALLOWED,
    REASON_SUCCESSFUL,
    REASON_UNRECOVERABLE,
    REASON_WITHIN_POLICY,
    RestartTracker,
    restarts_on_success,
)
from yurt.runtime.errors import DriverError
from yurt.runtime.lib.durations import MINUTE, SECOND
from yurt.runtime.structs import Lifecycle, RestartPolicy

FAIL = ExitResult(exit_code=1)
OK = ExitResult()


def tracker(attempts: int = 2, interval: int = 10 * MINUTE, delay: int = 15 * SECOND,
            mode: str = "fail", job_type: str = "service", lifecycle: Lifecycle | None = None,
            now: int = 0, seed: int = 1) -> RestartTracker:
    policy = RestartPolicy(attempts=attempts, interval=interval, delay=delay, mode=mode)
    return RestartTracker(policy, job_type, lifecycle, now=now, rng=random.Random(seed))


def test_within_policy_delay_has_jitter_in_range_and_is_never_zero() -> None:
    t = tracker(attempts=1000, delay=10 * SECOND)
    delays = []
    for i in range(500):
        t.set_exit_result(FAIL)
        d = t.decide(now=i)
        assert (d.outcome, d.reason) == ("Restarting", REASON_WITHIN_POLICY)
        delays.append(d.delay)
    assert all(10 * SECOND <= d < 12.5 * SECOND for d in delays)
    assert len(set(delays)) > 400  # jittered, not constant


def test_zero_delay_still_waits_a_nanosecond() -> None:
    t = tracker(delay=0)
    t.set_exit_result(FAIL)
    assert t.decide(now=0).delay == 1


def test_exhaustion_mode_fail() -> None:
    t = tracker(attempts=2, interval=10 * MINUTE)
    for _ in range(2):
        t.set_exit_result(FAIL)
        assert t.decide(now=SECOND).outcome == "Restarting"
    t.set_exit_result(FAIL)
    d = t.decide(now=2 * SECOND)
    assert d.outcome == "Not Restarting"
    assert d.reason == 'Exceeded allowed attempts 2 in interval 10m0s and mode is "fail"'


def test_exhaustion_mode_delay_waits_until_the_interval_ends() -> None:
    t = tracker(attempts=1, interval=10 * MINUTE, mode="delay", now=0)
    t.set_exit_result(FAIL)
    assert t.decide(now=1 * MINUTE).outcome == "Restarting"
    t.set_exit_result(FAIL)
    d = t.decide(now=3 * MINUTE)
    assert (d.outcome, d.reason, d.delay) == ("Restarting", REASON_DELAY, 7 * MINUTE)
    # After the window, the count starts again: back within policy.
    t.set_exit_result(FAIL)
    d = t.decide(now=10 * MINUTE + 1)
    assert (d.outcome, d.reason) == ("Restarting", REASON_WITHIN_POLICY)


def test_interval_window_resets_the_count() -> None:
    t = tracker(attempts=1, interval=MINUTE)
    t.set_exit_result(FAIL)
    assert t.decide(now=10 * SECOND).outcome == "Restarting"
    t.set_exit_result(FAIL)
    assert t.decide(now=61 * SECOND).outcome == "Restarting"  # a new window
    t.set_exit_result(FAIL)
    assert t.decide(now=62 * SECOND).outcome == "Not Restarting"


def test_start_errors() -> None:
    t = tracker()
    t.set_start_error(DriverError("try again", recoverable=True), recoverable=True)
    assert t.decide(now=0).outcome == "Restarting"
    t.set_start_error(DriverError("broken"), recoverable=False)
    d = t.decide(now=0)
    assert (d.outcome, d.reason) == ("Not Restarting", REASON_UNRECOVERABLE)


@pytest.mark.parametrize(("job_type", "lifecycle", "expected"), [
    ("service", None, True),
    ("batch", None, False),
    ("sysbatch", None, False),
    ("service", Lifecycle(hook="prestart"), False),
    ("service", Lifecycle(hook="prestart", sidecar=True), True),
    ("batch", Lifecycle(hook="poststart", sidecar=True), True),
    ("service", Lifecycle(hook="poststop"), False),
])
def test_restart_on_success_rules(job_type: str, lifecycle: Lifecycle | None,
                                  expected: bool) -> None:
    assert restarts_on_success(job_type, lifecycle) is expected


def test_successful_batch_exit_terminates() -> None:
    t = tracker(job_type="batch")
    t.set_exit_result(OK)
    d = t.decide(now=0)
    assert (d.outcome, d.reason) == ("Terminated", REASON_SUCCESSFUL)


def test_successful_service_exit_restarts() -> None:
    t = tracker(job_type="service")
    t.set_exit_result(OK)
    assert t.decide(now=0).outcome == "Restarting"


def test_zero_attempts() -> None:
    t = tracker(attempts=0, job_type="batch")
    t.set_exit_result(OK)
    assert t.decide(now=0) .outcome == "Terminated"
    t = tracker(attempts=0, job_type="service")
    t.set_exit_result(OK)  # a service exiting 0 with no restarts allowed fails
    d = t.decide(now=0)
    assert (d.outcome, d.reason) == ("Not Restarting", REASON_NO_RESTARTS_ALLOWED)


def test_killed_wins_and_user_restart_is_free() -> None:
    t = tracker(attempts=1)
    t.set_exit_result(FAIL)
    t.set_killed()
    assert t.decide(now=0).outcome == "Killed"
    for _ in range(5):  # user restarts: immediate, never counted
        t.set_restart_triggered(failure=False)
        t.set_exit_result(FAIL)
        assert (t.decide(now=0).outcome, t.count) == ("Restarting", 0)
    t.set_restart_triggered(failure=False)
    assert t.decide(now=0).delay == 0


def test_failure_triggered_restart_goes_through_the_policy() -> None:
    t = tracker(attempts=1)
    t.set_restart_triggered(failure=True)
    assert t.decide(now=0).reason == REASON_WITHIN_POLICY
    t.set_restart_triggered(failure=True)
    assert t.decide(now=0).outcome == "Not Restarting"


def test_nothing_happened_means_restart_now() -> None:
    t = tracker()
    assert (t.decide(now=0).outcome, t.decide(now=0).delay) == ("", 0)


def test_inputs_are_cleared_after_each_decision() -> None:
    t = tracker(job_type="batch")
    t.set_killed()
    assert t.decide(now=0).outcome == "Killed"
    t.set_exit_result(OK)
    assert t.decide(now=0).outcome == "Terminated"

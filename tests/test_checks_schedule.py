"""Check scheduling (layer 0: time passed in, no I/O): the heap of due times hands checks out
in due order, never twice while a probe is in flight (an overrunning probe does not pile up),
re-arms them an interval after their probe ends, and follows removals and interval changes;
and Nomad's `check_restart` decision (`Restarter`), as client/serviceregistration/
watcher_test.go tables it."""

from __future__ import annotations

import pytest

from yurt.runtime.client.checks.restarts import Restarter, restart_reason
from yurt.runtime.client.checks.schedule import CheckSchedule


def keys(due: list[tuple[str, int]]) -> list[str]:
    return [k for k, _ in due]


def test_checks_come_due_in_order_at_once_then_an_interval_after_each_probe() -> None:
    s: CheckSchedule[str] = CheckSchedule()
    s.add("slow", 10.0, now=0.0, offset=2.0)
    s.add("fast", 1.0, now=0.0)
    assert s.next_due() == 0.0
    (fast,) = s.pop_due(0.0)
    assert fast[0] == "fast"
    assert s.next_due() == 2.0  # fast is in flight: only slow is waiting
    assert s.finished("fast", fast[1], now=0.5)
    assert s.next_due() == 1.5
    assert keys(s.pop_due(1.9)) == ["fast"]
    assert keys(s.pop_due(2.0)) == ["slow"]
    assert s.next_due() is None  # both in flight


def test_an_overrunning_probe_does_not_pile_up() -> None:
    s: CheckSchedule[str] = CheckSchedule()
    s.add("c", 1.0, now=0.0)
    (c,) = s.pop_due(0.0)
    # The probe takes 7.5 intervals: nothing is handed out meanwhile.
    for t in range(1, 8):
        assert s.pop_due(float(t)) == []
    assert s.finished("c", c[1], now=7.5)
    assert s.pop_due(8.4) == []
    assert keys(s.pop_due(8.5)) == ["c"]  # once, an interval after the probe ended


def test_removal_and_interval_changes() -> None:
    s: CheckSchedule[str] = CheckSchedule()
    s.add("a", 5.0, now=0.0)
    s.add("b", 5.0, now=0.0)
    s.remove("b")
    assert "b" not in s
    assert len(s) == 1
    (a,) = s.pop_due(0.0)
    s.add("a", 2.0, now=1.0)  # replaced while in flight: the new interval counts from now
    assert not s.finished("a", a[1], now=1.5)  # the old probe's end is ignored
    (a2,) = s.pop_due(1.0)
    assert a2[1] != a[1]
    assert s.finished("a", a2[1], now=1.2)
    assert s.next_due() == pytest.approx(3.2)
    s.remove("a")
    assert s.next_due() is None
    assert not s.finished("a", a2[1], now=4.0)


def restarter(limit: int = 3, grace: float = 5.0, interval: float = 1.0,
              ignore_warnings: bool = False) -> Restarter:
    r = Restarter(check_name="web", limit=limit, grace=grace, interval=interval,
                  ignore_warnings=ignore_warnings)
    r.started(0.0)
    return r


def test_failures_inside_the_grace_period_do_not_count() -> None:
    r = restarter()
    assert not any(r.apply("failure", float(t)) for t in range(5))
    assert not r.apply("failure", 5.0)  # first failure after grace: unhealthy since 5
    assert not r.apply("failure", 6.0)
    assert r.apply("failure", 7.0)  # (limit - 1) intervals later
    assert not r.apply("failure", 8.0)  # not watched until the next start
    r.started(8.0)
    assert not r.apply("failure", 9.0)


def test_a_passing_result_resets_the_count() -> None:
    r = restarter(grace=0.0)
    assert not r.apply("failure", 1.0)
    assert not r.apply("failure", 2.0)
    assert not r.apply("success", 3.0)
    assert not r.apply("failure", 4.0)
    assert not r.apply("failure", 5.0)
    assert r.apply("pending", 6.0)  # pending counts as unhealthy, as in Nomad


def test_limit_one_restarts_at_the_first_failure_after_grace() -> None:
    r = restarter(limit=1, grace=1.0)
    assert not r.apply("failure", 0.5)
    assert r.apply("failure", 1.0)


def test_warnings_count_unless_ignored() -> None:
    r = restarter(limit=2, grace=0.0)
    assert not r.apply("warning", 1.0)
    assert r.apply("warning", 2.0)
    ignoring = restarter(limit=2, grace=0.0, ignore_warnings=True)
    assert not ignoring.apply("failure", 1.0)
    assert not ignoring.apply("warning", 2.0)  # resets, as a pass does
    assert not ignoring.apply("failure", 3.0)


def test_a_stopped_task_is_not_watched() -> None:
    r = restarter(limit=1, grace=0.0)
    r.stopped()
    assert not r.apply("failure", 10.0)


def test_restart_reason_is_nomads() -> None:
    assert restart_reason("web") == 'healthcheck: check "web" unhealthy'


def test_slack_batches_checks_due_soon_but_never_much_too_early() -> None:
    s: CheckSchedule[str] = CheckSchedule()
    s.add("long", 10.0, now=0.0, offset=5.2)  # may run up to 1 s early
    s.add("short", 1.0, now=0.0, offset=5.15)  # up to 0.1 s early
    s.add("later", 10.0, now=0.0, offset=6.5)
    assert keys(s.pop_due(5.0, slack=0.25)) == []  # short is 0.15 s away: too early for it
    assert keys(s.pop_due(5.06, slack=0.25)) == ["short", "long"]
    assert keys(s.pop_due(5.06, slack=0.25)) == []

"""The agent's one check loop (layer 1: `autojump_clock`, probes faked through the script
hook, no I/O): a check runs at once then an interval after each probe, a probe that runs out
of time is Nomad's failure, a burst of due checks never has more than the concurrency bound
in flight, and a removed check reports nothing more."""

from __future__ import annotations

import trio
import trio.testing

from yurt.runtime.client.checks.runner import CheckJob, CheckRunner
from yurt.runtime.structs.checks import CheckQueryResult


def job(check_id: str, results: list[tuple[float, CheckQueryResult]],
        probe: object, interval: float = 10.0, timeout: float = 2.0) -> CheckJob:
    def on_result(result: CheckQueryResult) -> None:
        results.append((trio.current_time(), result))

    return CheckJob(template=CheckQueryResult(id=check_id, check=check_id), kind="script",
                    interval=interval, timeout=timeout, on_result=on_result,
                    script=probe)  # type: ignore[arg-type]


async def test_a_check_runs_at_once_then_each_interval_after_its_probe(
        autojump_clock: trio.testing.MockClock) -> None:
    results: list[tuple[float, CheckQueryResult]] = []

    async def probe() -> tuple[int, str]:
        await trio.sleep(1.0)
        return 0, "ok"

    runner = CheckRunner(unix_clock=lambda: 1234.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        start = trio.current_time()
        runner.add(job("c", results, probe))
        await trio.sleep(35)
        nursery.cancel_scope.cancel()
    times = [round(t - start, 3) for t, _ in results]
    assert times == [1.0, 12.0, 23.0, 34.0]  # probe 1 s, then 10 s after each end
    assert {(r.status, r.output, r.timestamp) for _, r in results} == {("success", "ok", 1234)}


async def test_a_probe_that_runs_out_of_time_fails_and_does_not_pile_up(
        autojump_clock: trio.testing.MockClock) -> None:
    results: list[tuple[float, CheckQueryResult]] = []
    started = 0

    async def hang() -> tuple[int, str]:
        nonlocal started
        started += 1
        await trio.sleep_forever()
        raise AssertionError

    runner = CheckRunner()
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        runner.add(job("c", results, hang, interval=1.0, timeout=5.0))
        await trio.sleep(12.5)
        nursery.cancel_scope.cancel()
    assert [r.output for _, r in results] == ["nomad: context deadline exceeded"] * 2
    assert [r.status for _, r in results] == ["failure"] * 2
    assert started == 3  # at 0, 6 and 12: one at a time, an interval after each timeout


async def test_a_burst_stays_under_the_concurrency_bound(
        autojump_clock: trio.testing.MockClock) -> None:
    results: list[tuple[float, CheckQueryResult]] = []
    in_flight = peak = 0

    async def probe() -> tuple[int, str]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await trio.sleep(0.5)
        in_flight -= 1
        return 1, "bad"

    runner = CheckRunner(concurrency=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        for i in range(40):
            runner.add(job(f"c{i}", results, probe))
        await trio.sleep(9)
        nursery.cancel_scope.cancel()
    assert peak == 4
    assert len(results) == 40
    assert {r.status for _, r in results} == {"failure"}
    assert runner.probes == 40


async def test_a_removed_check_reports_nothing_more(
        autojump_clock: trio.testing.MockClock) -> None:
    results: list[tuple[float, CheckQueryResult]] = []

    async def probe() -> tuple[int, str]:
        await trio.sleep(1.0)
        return 0, ""

    runner = CheckRunner()
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        runner.add(job("c", results, probe))
        await trio.sleep(0.5)
        runner.remove("c")  # mid-probe
        await trio.sleep(30)
        assert len(runner) == 0
        nursery.cancel_scope.cancel()
    assert results == []

"""A task's usage over its whole process tree, CPU as a rate (runtime/client/taskusage.py): the rate
arithmetic without processes (layer 1), then real process trees, alone and through the
allocation stats endpoint (layer 3)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.agent_support import raw_job, running_agent
from tests.browser_support import poll
from yurt.runtime.client.taskusage import (
    TICKS_PER_S,
    CpuRates,
    ProcessUsage,
    TreeUsage,
    tree_usage,
    uptime,
)

#: A shell that does nothing itself while its child spins a core.
BUSY_CHILD = "sh -c 'while :; do :; done' & wait"


def reading(user: int, system: int = 0, start: int = 0) -> TreeUsage:
    return TreeUsage(0, user, system, start, {1: ProcessUsage(0, user, system, start)})


def test_a_rate_is_the_ticks_between_two_readings_over_the_seconds_between() -> None:
    rates = CpuRates()
    rates.rate(("a", "t"), 10.0, reading(0), since_boot=100.0)

    rate = rates.rate(("a", "t"), 12.0, reading(TICKS_PER_S, TICKS_PER_S // 2), since_boot=102)

    assert rate.percent == pytest.approx(75.0)
    assert (rate.user, rate.system) == (pytest.approx(50.0), pytest.approx(25.0))
    assert rate.mhz(2000.0) == pytest.approx(1500.0)


def test_the_first_reading_is_the_average_since_the_processes_started() -> None:
    # Started 50 s after boot, read at 150 s: 100 s of life, 25 s of CPU.
    rate = CpuRates().rate(("a", "t"), 1.0, reading(25 * TICKS_PER_S, start=50 * TICKS_PER_S),
                           since_boot=150.0)
    assert rate.percent == pytest.approx(25.0)


def test_a_restarted_task_whose_counters_went_down_starts_its_series_again() -> None:
    rates = CpuRates()
    rates.rate(("a", "t"), 10.0, reading(500 * TICKS_PER_S), since_boot=1000.0)

    rate = rates.rate(("a", "t"), 11.0, reading(TICKS_PER_S, start=990 * TICKS_PER_S),
                      since_boot=1001.0)

    assert rate.percent == pytest.approx(100.0 / 11)  # 1 s of CPU over its 11 s of life
    assert rates.rate(("a", "t"), 11.0, TreeUsage(), since_boot=1001.0).percent == 0.0


def test_series_not_read_for_ten_minutes_are_forgotten() -> None:
    rates = CpuRates()
    for n in range(65):
        rates.rate((f"a{n}", "t"), 0.0, reading(0), since_boot=10.0)
    rates.rate(("new", "t"), 601.0, reading(0), since_boot=611.0)
    assert len(rates._last) == 1


@pytest.fixture
def busy_tree() -> Iterator[subprocess.Popen[bytes]]:
    shell = subprocess.Popen(["sh", "-c", BUSY_CHILD], start_new_session=True)
    try:
        yield shell
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(shell.pid)], check=False)
        shell.wait(timeout=10)


def test_the_tree_counts_the_child_doing_the_work(busy_tree: subprocess.Popen[bytes]) -> None:
    poll(lambda: len(tree_usage(busy_tree.pid).processes) >= 2, 10, "the busy child")
    rates = CpuRates()
    first = tree_usage(busy_tree.pid)
    rates.rate(("x", "t"), time.monotonic(), first, uptime())
    time.sleep(1.0)  # the rate is over the time between two readings: a second of spinning
    second = tree_usage(busy_tree.pid)
    rate = rates.rate(("x", "t"), time.monotonic(), second, uptime())

    assert set(second.processes) > {busy_tree.pid}
    # The shell only waits: what is measured is the child's work.
    shell = first.processes[busy_tree.pid], second.processes[busy_tree.pid]
    assert shell[1].user_ticks - shell[0].user_ticks <= 2
    # The child spins: on a loaded 2-core machine it still gets a good share of a core, where
    # the shell's pid alone reads as about 0.
    assert rate.percent > 15, rate
    assert second.rss > second.processes[busy_tree.pid].rss


async def test_the_stats_endpoint_answers_the_tree_and_a_rate_as_nomad_does(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            c = a.client
            await c.post("/v1/jobs", json=raw_job("busy", BUSY_CHILD))
            while True:
                allocs = (await c.get("/v1/job/busy/allocations")).json()
                if allocs and allocs[0]["ClientStatus"] == "running":
                    break
                await trio.sleep(0.05)
            stats_url = f"/v1/client/allocation/{allocs[0]['ID']}/stats"
            pids: dict[str, object] = {}
            while len(pids) < 2:  # the shell has started its child
                pids = (await c.get(stats_url)).json()["Tasks"]["t"]["Pids"]
                await trio.sleep(0.05)
            await trio.sleep(1.0)  # the rate is over the time between two readings
            stats = (await c.get(stats_url)).json()

    task = stats["Tasks"]["t"]["ResourceUsage"]["CpuStats"]
    assert "Percent" in task["Measured"]
    assert task["Percent"] > 15, task  # the child's spinning, not the waiting shell's 0
    assert task["TotalTicks"] > 0
    assert len(stats["Tasks"]["t"]["Pids"]) >= 2
    assert stats["ResourceUsage"]["CpuStats"]["Percent"] == pytest.approx(task["Percent"])

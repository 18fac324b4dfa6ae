"""A container's usage from the Engine API's stats: Nomad's arithmetic on canned answers
(cgroup v1 and v2 shapes), and a real container burning CPU against the real dockerd."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from tests.docker_support import IMAGE, DockerDaemon
from yurt.runtime.client.drivers.docker.engine import DockerEngine, DockerError
from yurt.runtime.client.drivers.docker.stats import (
    MEASURED_CPU,
    MEASURED_MEMORY_V1,
    MEASURED_MEMORY_V2,
    container_usage,
    cpu_percent,
    usage_from_stats,
)

LABEL = "yurt-test=docker-stats"

V1 = {
    "read": "2026-12-08T01:00:01.000000002Z",
    "memory_stats": {"usage": 9_000_000, "max_usage": 12_000_000,
                     "stats": {"rss": 4_000_000, "cache": 3_000_000, "swap": 0,
                               "file_mapped": 1_000_000}},
    "cpu_stats": {"cpu_usage": {"total_usage": 3_000_000_000,
                                "usage_in_kernelmode": 600_000_000,
                                "usage_in_usermode": 2_000_000_000},
                  "system_cpu_usage": 20_000_000_000, "online_cpus": 2,
                  "throttling_data": {"periods": 10, "throttled_periods": 4,
                                      "throttled_time": 5000}},
    "precpu_stats": {"cpu_usage": {"total_usage": 2_000_000_000,
                                   "usage_in_kernelmode": 400_000_000,
                                   "usage_in_usermode": 1_500_000_000},
                     "system_cpu_usage": 18_000_000_000},
}


def test_nomads_arithmetic_on_a_cgroup_v1_answer() -> None:
    usage = usage_from_stats(V1)
    # 1 s of the container's CPU in 2 s of host CPU time (two cores, 1 s): one core.
    assert usage.cpu_percent == pytest.approx(100.0)
    assert usage.cpu_system_mode == pytest.approx(0.2 / 1.0 * 2 * 100)
    assert usage.cpu_user_mode == pytest.approx(0.5 / 1.0 * 2 * 100)
    assert (usage.cpu_throttled_periods, usage.cpu_throttled_time) == (4, 5000)
    assert (usage.rss, usage.cache, usage.mapped_file, usage.usage, usage.max_usage) == (
        4_000_000, 3_000_000, 1_000_000, 9_000_000, 12_000_000)
    assert usage.memory_measured == MEASURED_MEMORY_V1
    assert usage.cpu_measured == MEASURED_CPU
    assert usage.timestamp == 1796691601 * 10**9 + 2


def test_a_cgroup_v2_answer_reads_anon_and_file() -> None:
    v2 = {**V1, "memory_stats": {"usage": 9_000_000,
                                 "stats": {"anon": 5_000_000, "file": 2_000_000}}}
    usage = usage_from_stats(v2)
    assert (usage.rss, usage.cache, usage.max_usage) == (5_000_000, 2_000_000, 0)
    assert usage.memory_measured == MEASURED_MEMORY_V2


def test_cpu_percent_of_counters_that_did_not_move_is_zero() -> None:
    assert cpu_percent(5, 5, 10, 8, 4) == 0.0
    assert cpu_percent(6, 5, 8, 8, 4) == 0.0
    assert usage_from_stats({}).cpu_percent == 0.0  # a stopped container's empty answer


@pytest.fixture
def burner(dockerd: DockerDaemon) -> Iterator[str]:
    cid = dockerd.cli("run", "-d", "--label", LABEL, "--network", "none", IMAGE,
                      "sh", "-c", "while :; do :; done").stdout.strip()
    yield cid
    dockerd.cli("rm", "-f", cid)


async def test_a_container_burning_cpu_shows_its_cpu_and_memory(
        dockerd: DockerDaemon, burner: str) -> None:
    engine = DockerEngine(dockerd.host)
    try:
        with trio.fail_after(30):
            usage = await container_usage(engine, burner)
    finally:
        await engine.aclose()
    assert usage.cpu_percent > 10.0  # one busy loop: most of a core (two cores, shared)
    assert usage.cpu_user_mode > 0.0
    assert usage.usage > 0
    assert usage.rss > 0
    assert usage.timestamp > 0


async def test_stats_of_a_container_that_is_not_there(dockerd: DockerDaemon) -> None:
    engine = DockerEngine(dockerd.host)
    try:
        with trio.fail_after(30), pytest.raises(DockerError, match="No such container"):
            await container_usage(engine, "yurt-no-such-container")
    finally:
        await engine.aclose()

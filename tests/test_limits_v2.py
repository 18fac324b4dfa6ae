"""cgroup v2 limits (`V2Limits`) and v1's devices cgroup over a fake cgroupfs (layer 1: a plain
directory tree in tmp_path; no root, no kernel). This host is v1, so these files are the only
proof V2Limits has: the names and values Nomad's configureCG2 writes, the OOM counter of
`memory.events`, removal and sweep, and the host selection rules.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_limits import fake_rmdir
from yurt.runtime.client.drivers import limits
from yurt.runtime.client.drivers.limits import MIB, V1Limits, V2Limits, cpu_weight, limits_for
from yurt.runtime.errors import DriverError

V2_ONLY = "30 25 0:26 / {mount} rw - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.fixture
def v2(tmp_path: Path) -> V2Limits:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    return V2Limits(tmp_path, rmdir=fake_rmdir)


def test_cpu_weight_is_nomads_conversion() -> None:
    assert [cpu_weight(s) for s in (0, 2, 1024, 262_144, 10**7)] == [1, 1, 100, 10_000, 10_000]
    assert cpu_weight(100) == 17  # ceil(10^((l²+125l)/612 - 7/34)), l = log2(100)
    assert cpu_weight(500) < cpu_weight(1000) < cpu_weight(2000)


def test_create_writes_nomads_v2_files(v2: V2Limits) -> None:
    joins = v2.create("a1.s1", limits_for(64, 128, 1024))
    cgroup = v2.mount / "yurt" / "a1.s1"
    assert joins == [cgroup]
    assert (cgroup / "memory.max").read_text() == str(128 * MIB)
    assert (cgroup / "memory.low").read_text() == str(64 * MIB)
    assert (cgroup / "cpu.weight").read_text() == "100"
    for parent in (v2.mount, v2.mount / "yurt"):
        assert (parent / "cgroup.subtree_control").read_text() == "+memory +cpu"


def test_no_hard_limit_is_max_and_no_soft_limit_no_low(v2: V2Limits) -> None:
    v2.create("a1.s1", limits_for(64, -1, 100))
    assert (v2.mount / "yurt" / "a1.s1" / "memory.max").read_text() == "max"
    v2.create("a1.s2", limits_for(64, 0, 100))
    assert (v2.mount / "yurt" / "a1.s2" / "memory.max").read_text() == str(64 * MIB)
    assert not (v2.mount / "yurt" / "a1.s2" / "memory.low").exists()


def test_oom_killed_reads_memory_events(v2: V2Limits) -> None:
    v2.create("a1.s1", limits_for(64, 0, 100))
    events = v2.mount / "yurt" / "a1.s1" / "memory.events"
    assert not v2.oom_killed("a1.s1")
    events.write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    assert not v2.oom_killed("a1.s1")  # hit its max, but nothing was killed
    events.write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\noom_group_kill 0\n")
    assert v2.oom_killed("a1.s1")
    assert not v2.oom_killed("other")


def test_remove_and_sweep(v2: V2Limits) -> None:
    busy = v2.create("crashed.busy", limits_for(64, 0, 100))[0]
    (busy / "cgroup.procs").write_text("4242\n")
    v2.create("crashed.done", limits_for(64, 0, 100))
    v2.create("known.s1", limits_for(64, 0, 100))
    assert v2.sweep({"known.s1"}, {"known", "crashed"}) == ["crashed.done"]
    assert not v2.remove("crashed.busy")
    (busy / "cgroup.procs").write_text("")
    assert v2.remove("crashed.busy")
    assert v2.remove("crashed.busy")  # gone already: done


def test_a_failed_write_is_recoverable_and_leaves_nothing(v2: V2Limits) -> None:
    (v2.mount / "yurt" / "a1.s1" / "cpu.weight").mkdir(parents=True)  # unwritable
    with pytest.raises(DriverError, match="cannot set the task's resource limits") as e:
        v2.create("a1.s1", limits_for(64, 0, 100))
    assert e.value.recoverable
    assert not (v2.mount / "yurt" / "a1.s1").exists()


def test_select_limits_picks_v2_only_with_both_controllers(tmp_path: Path) -> None:
    info = V2_ONLY.format(mount=tmp_path)
    assert limits.select_limits(info) is None  # no cgroup.controllers: not a cgroupfs
    (tmp_path / "cgroup.controllers").write_text("cpuset io memory pids\n")
    assert limits.select_limits(info) is None  # no cpu controller
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert limits.select_limits(info) == V2Limits(tmp_path)
    assert (tmp_path / "yurt").is_dir()


def test_v1_wins_on_a_hybrid_host_and_brings_its_devices_cgroup(tmp_path: Path) -> None:
    for name in ("memory", "cpu", "devices", "unified"):
        (tmp_path / name).mkdir()
    info = (f"30 25 0:26 / {tmp_path}/unified rw - cgroup2 cgroup2 rw\n"
            f"31 25 0:27 / {tmp_path}/cpu rw - cgroup cgroup rw,cpu\n"
            f"32 25 0:28 / {tmp_path}/memory rw - cgroup cgroup rw,memory\n"
            f"33 25 0:29 / {tmp_path}/devices rw - cgroup cgroup rw,devices\n")
    found = limits.select_limits(info)
    assert found == V1Limits(tmp_path / "memory", tmp_path / "cpu",
                             devices=tmp_path / "devices")
    assert isinstance(found, V1Limits)
    joins = V1Limits(found.memory, found.cpu, rmdir=fake_rmdir, devices=found.devices).create(
        "a1.s1", limits_for(16, 0, 100))
    assert joins[2] == tmp_path / "devices" / "yurt" / "a1.s1"
    assert found.devices_cgroup("a1.s1") == joins[2]
    assert V1Limits(found.memory, found.cpu).devices_cgroup("a1.s1") is None

"""The resource-limit arithmetic and the cgroup v1 limits over a fake cgroupfs (layer 1: pure
logic and a plain directory tree; no root, no kernel)."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from yurt.runtime.client.drivers import limits
from yurt.runtime.client.drivers.limits import MIB, Limits, V1Limits, limits_for
from yurt.runtime.errors import DriverError

MOUNTINFO = (
    "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    "32 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "33 25 0:29 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n")


def test_memory_max_is_the_hard_limit_and_memory_the_soft_one() -> None:
    assert limits_for(256, 512, 500) == Limits(512 * MIB, 256 * MIB, 500)


def test_without_memory_max_memory_is_the_hard_limit_and_there_is_no_soft_one() -> None:
    assert limits_for(300, 0, 100) == Limits(300 * MIB, 0, 100)


def test_memory_max_minus_one_means_no_hard_limit() -> None:
    assert limits_for(128, -1, 100) == Limits(-1, 128 * MIB, 100)


def test_cpu_shares_are_clamped_to_the_kernels_range() -> None:
    assert limits_for(10, 0, 1).cpu_shares == 2
    assert limits_for(10, 0, 10**7).cpu_shares == 262_144


def test_v1_mounts_find_memory_and_a_shared_cpu_hierarchy() -> None:
    assert limits.v1_mounts(MOUNTINFO) == {"memory": Path("/sys/fs/cgroup/memory"),
                                          "cpu": Path("/sys/fs/cgroup/cpu,cpuacct")}


def test_no_v1_memory_hierarchy_means_no_limits() -> None:
    v2_only = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert limits.select_limits(v2_only) is None
    assert limits.select_limits("") is None


def test_oom_kill_counter() -> None:
    assert limits.oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3
    assert limits.oom_kills("oom_kill_disable 0\nunder_oom 0\n") == 0  # before Linux 4.13


def fake_rmdir(path: Path) -> None:
    """cgroupfs's rmdir: control files do not count, processes in `cgroup.procs` do."""
    if not path.exists():
        raise FileNotFoundError(errno.ENOENT, "gone", str(path))
    procs = path / "cgroup.procs"
    if procs.exists() and procs.read_text().strip():
        raise OSError(errno.EBUSY, "busy", str(path))
    shutil.rmtree(path)


@pytest.fixture
def fake(tmp_path: Path) -> V1Limits:
    (tmp_path / "memory").mkdir()
    (tmp_path / "cpu").mkdir()
    return V1Limits(tmp_path / "memory", tmp_path / "cpu", rmdir=fake_rmdir)


def test_create_writes_nomads_v1_files_under_the_yurt_parent(fake: V1Limits) -> None:
    joins = fake.create("a1.s1", limits_for(64, 128, 250))
    mem, cpu = fake.memory / "yurt" / "a1.s1", fake.cpu / "yurt" / "a1.s1"
    assert joins == [mem, cpu]
    assert (mem / "memory.limit_in_bytes").read_text() == str(128 * MIB)
    assert (mem / "memory.soft_limit_in_bytes").read_text() == str(64 * MIB)
    assert (cpu / "cpu.shares").read_text() == "250"


def test_no_soft_limit_file_without_memory_max(fake: V1Limits) -> None:
    fake.create("a1.s1", limits_for(64, 0, 100))
    assert not (fake.memory / "yurt" / "a1.s1" / "memory.soft_limit_in_bytes").exists()


def test_oom_killed_reads_the_starts_memory_cgroup(fake: V1Limits) -> None:
    fake.create("a1.s1", limits_for(64, 0, 100))
    assert not fake.oom_killed("a1.s1")  # no oom_control yet (nor on a gone cgroup)
    (fake.memory / "yurt" / "a1.s1" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert fake.oom_killed("a1.s1")
    assert not fake.oom_killed("other")


def test_remove_leaves_a_cgroup_with_processes(fake: V1Limits) -> None:
    mem, cpu = fake.create("a1.s1", limits_for(64, 0, 100))
    (mem / "cgroup.procs").write_text("4242\n")
    assert not fake.remove("a1.s1")
    assert mem.exists()
    assert not cpu.exists()
    (mem / "cgroup.procs").write_text("")
    assert fake.remove("a1.s1")
    assert not mem.exists()
    assert fake.remove("a1.s1")  # gone already: done


def test_sweep_removes_only_unknown_empty_cgroups(fake: V1Limits) -> None:
    fake.create("known.s1", limits_for(64, 0, 100))
    busy, _ = fake.create("crashed.busy", limits_for(64, 0, 100))
    (busy / "cgroup.procs").write_text("4242\n")
    fake.create("crashed.done", limits_for(64, 0, 100))
    fake.create("elsewhere.s1", limits_for(64, 0, 100))  # another agent's allocation
    assert fake.sweep({"known.s1"}, {"known", "crashed"}) == ["crashed.done"]
    assert (fake.memory / "yurt" / "elsewhere.s1").exists()
    assert (fake.memory / "yurt" / "known.s1").exists()
    assert busy.exists()


def test_a_failed_write_is_a_recoverable_driver_error_and_leaves_nothing(
        fake: V1Limits) -> None:
    (fake.cpu / "yurt" / "a1.s1" / "cpu.shares").mkdir(parents=True)  # unwritable
    with pytest.raises(DriverError, match="cannot set the task's resource limits") as e:
        fake.create("a1.s1", limits_for(64, 0, 100))
    assert e.value.recoverable
    assert not (fake.memory / "yurt" / "a1.s1").exists()


def test_reserved_cores_get_a_cpuset_cgroup_after_its_parent_is_initialised(
        tmp_path: Path) -> None:
    for hierarchy in ("memory", "cpu", "cpuset"):
        (tmp_path / hierarchy).mkdir()
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-3\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    (tmp_path / "cpuset" / "yurt").mkdir()  # as the kernel makes it: both files empty
    (tmp_path / "cpuset" / "yurt" / "cpuset.cpus").write_text("\n")
    (tmp_path / "cpuset" / "yurt" / "cpuset.mems").write_text("\n")
    fake = V1Limits(tmp_path / "memory", tmp_path / "cpu", rmdir=fake_rmdir,
                    cpuset=tmp_path / "cpuset")
    joins = fake.create("a1.s1", limits_for(64, 0, 100, cores=[3, 1]))
    pinned = tmp_path / "cpuset" / "yurt" / "a1.s1"
    assert joins[-1] == pinned
    assert (pinned / "cpuset.cpus").read_text() == "1,3"
    assert (pinned / "cpuset.mems").read_text() == "0"
    assert (tmp_path / "cpuset" / "yurt" / "cpuset.cpus").read_text() == "0-3"
    # Without cores nothing is pinned; removal takes the cpuset cgroup too.
    assert len(fake.create("a1.s2", limits_for(64, 0, 100))) == 2
    assert fake.remove("a1.s1")
    assert not pinned.exists()

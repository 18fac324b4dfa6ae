"""raw_exec's opt-in resource limits on this host's cgroup v1 hierarchy (layer 2: real
processes, real cgroups, real clock; the agent runs as root here).

A task over its `memory_max` is OOM-killed by the kernel, and the driver reports it as
Nomad's taskrunner does (`ExitResult.OOMKilled`, the `Terminated` event's `oom_killed`);
without `enforce_resource_limits` the same task is not limited; the start's cgroups go with it.
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.agent_support import run_until, running_agent
from tests.runtime_support import eventually
from yurt.runtime.client.drivers import cgroups, limits
from yurt.runtime.client.drivers.limits import MIB, V1Limits
from yurt.runtime.client.drivers.protocol import TaskConfig
from yurt.runtime.client.drivers.rawexec import plugin

pytestmark = pytest.mark.slow

ALLOC = "limi0000-0000-4000-8000-" + uuid.uuid4().hex[:12]
#: Touches 100 MiB: surely past a 32 MiB hard limit (bytes multiplication writes every page).
HOG = 'b = b"x" * (100 << 20); print(len(b))'


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """Whatever a failing test leaves running is killed and its cgroups removed, so it cannot
    disturb other tests."""
    yield
    for root in ("cgroup2", "cgroup1"):
        found = cgroups.select_root(root)
        for cgroup in found.path.glob(f"{ALLOC}.*") if found else ():
            cgroups.destroy_blocking(cgroup)
    host = host_limits()
    for hierarchy in (h for h in (host.memory, host.cpu, host.devices, host.cpuset)
                      if h is not None):
        for cgroup in (hierarchy / "yurt").glob(f"{ALLOC}.*"):
            cgroups.destroy_blocking(cgroup)


#: The raw_exec plugin options that opt into limits.
LIMITED = {"raw_exec": {"enforce_resource_limits": True}}


def host_limits() -> V1Limits:
    found = limits.select_limits()
    assert isinstance(found, V1Limits), "this host has writable v1 memory and cpu hierarchies"
    return found


def config(tmp_path: Path, args: list[str], *, memory: int = 16,
           memory_max: int = 32) -> TaskConfig:
    task_dir = tmp_path / "task"
    task_dir.mkdir(exist_ok=True)
    return TaskConfig(id=f"{ALLOC}/t/{uuid.uuid4().hex[:8]}", name="t", alloc_id=ALLOC,
                      job_id="j", task_group="g",
                      driver_config={"command": sys.executable, "args": args},
                      task_dir=task_dir, memory_mb=memory, memory_max_mb=memory_max,
                      cpu_shares=300)


async def test_a_task_over_memory_max_is_oom_killed_and_its_cgroups_removed(
        tmp_path: Path) -> None:
    driver = plugin({"enforce_resource_limits": True})
    task = config(tmp_path, ["-c", HOG])
    with trio.fail_after(20):
        handle = await driver.start_task(task)
        name = str(handle.driver_state["limits"])
        assert name.startswith(f"{ALLOC}.")
        result = await driver.wait_task(task.id)
        await driver.destroy_task(task.id, force=True)
    assert result.oom_killed
    assert result.err == "OOM Killed"
    assert not result.successful()
    mem, cpu = host_limits().memory / "yurt" / name, host_limits().cpu / "yurt" / name
    assert not mem.exists()
    assert not cpu.exists()


async def test_the_limits_are_set_and_the_task_is_in_its_cgroups(tmp_path: Path) -> None:
    driver = plugin({"enforce_resource_limits": True})
    task = config(tmp_path, ["-c", "import time; time.sleep(1000)"], memory=24, memory_max=48)
    with trio.fail_after(20):
        handle = await driver.start_task(task)
        name, pid = str(handle.driver_state["limits"]), int(handle.driver_state["pid"])
        mem, cpu = host_limits().memory / "yurt" / name, host_limits().cpu / "yurt" / name
        assert (mem / "memory.limit_in_bytes").read_text().strip() == str(48 * MIB)
        assert (mem / "memory.soft_limit_in_bytes").read_text().strip() == str(24 * MIB)
        assert (cpu / "cpu.shares").read_text().strip() == "300"
        # The task joins both itself, right after it reports its pid and before its command.
        for d in (mem, cpu):
            await eventually(lambda d=d: str(pid) in (d / "cgroup.procs").read_text().split())
        await driver.stop_task(task.id, 5 * 10**9, "SIGTERM")
        result = await driver.wait_task(task.id)
        await driver.destroy_task(task.id, force=True)
    assert not result.oom_killed
    assert not mem.exists()
    assert not cpu.exists()


async def test_without_the_opt_in_the_same_task_is_not_limited(tmp_path: Path) -> None:
    driver = plugin({})
    assert driver.limits is None
    task = config(tmp_path, ["-c", HOG])
    with trio.fail_after(20):
        handle = await driver.start_task(task)
        result = await driver.wait_task(task.id)
        await driver.destroy_task(task.id, force=True)
    assert handle.driver_state["limits"] == ""
    assert result.exit_code == 0
    assert not result.oom_killed


async def test_a_new_driver_keeps_a_recovered_tasks_cgroups_and_sweeps_the_rest(
        tmp_path: Path) -> None:
    """An agent restart: the running task's limit cgroups are kept, an empty one that no
    handle names (a crashed agent's) is removed by the orphan reconcile."""
    host = host_limits()
    leftover = f"{ALLOC}.deadbeef"
    host.create(leftover, limits.limits_for(16, 0, 100))
    task = config(tmp_path, ["-c", "import time; time.sleep(1000)"])
    with trio.fail_after(20):
        handle = await plugin({"enforce_resource_limits": True}).start_task(task)
        name = str(handle.driver_state["limits"])
        again = plugin({"enforce_resource_limits": True})
        await again.recover_task(handle)
        (tmp_path / "allocs" / ALLOC).mkdir(parents=True)
        await again.reconcile(tmp_path / "allocs")
        assert not (host.memory / "yurt" / leftover).exists()
        assert (host.memory / "yurt" / name).exists()
        await again.stop_task(task.id, 5 * 10**9, "SIGKILL")
        await again.wait_task(task.id)
        await again.destroy_task(task.id, force=True)
    assert not (host.memory / "yurt" / name).exists()


async def test_the_alloc_reports_the_oom_kill_as_nomad_does(tmp_path: Path) -> None:
    """Through a real agent whose raw_exec plugin config opts in: the task's `Terminated`
    event carries `oom_killed` = "true" and the exit message, and the task fails."""
    job = {"Job": {"ID": "oom", "Type": "batch", "TaskGroups": [{
        "Name": "g", "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Tasks": [{"Name": "t", "Driver": "raw_exec",
                   "Config": {"command": sys.executable, "args": ["-c", HOG]},
                   "Resources": {"CPU": 100, "MemoryMB": 16, "MemoryMaxMB": 32}}]}]}}
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data", driver_config=LIMITED) as run:
            alloc = await run_until(run.client, job, "failed")
    state = alloc["TaskStates"]["t"]
    terminated = [e for e in state["Events"] if e["Type"] == "Terminated"]
    assert terminated, state["Events"]
    assert terminated[-1]["Details"]["oom_killed"] == "true"
    assert terminated[-1]["Details"]["exit_message"] == "OOM Killed"
    assert state["Failed"] is True


async def test_a_task_with_reserved_cores_runs_pinned_to_them(tmp_path: Path) -> None:
    assert host_limits().cpuset is not None, "this host has a writable v1 cpuset hierarchy"
    driver = plugin({"enforce_resource_limits": True})
    task = dataclasses.replace(
        config(tmp_path, ["-c", "import time; time.sleep(1000)"], memory=24, memory_max=48),
        reserved_cores=[1])
    with trio.fail_after(20):
        handle = await driver.start_task(task)
        pid = int(handle.driver_state["pid"])
        await eventually(lambda: Path(f"/proc/{pid}/status").read_text().count(
            "Cpus_allowed_list:\t1\n") == 1)
        await driver.stop_task(task.id, 5 * 10**9, "SIGTERM")
        await driver.wait_task(task.id)
        await driver.destroy_task(task.id, force=True)
    cpuset = host_limits().cpuset
    assert cpuset is not None
    assert not (cpuset / "yurt" / str(handle.driver_state["limits"])).exists()


async def test_a_jobs_cores_reach_the_task_as_its_allowed_cpus(tmp_path: Path) -> None:
    """Through a real agent: `resources { cores = 1 }` is placed on one of the node's cores
    (the allocation's `ReservedCores`), and the task runs allowed on that core alone."""
    script = "grep Cpus_allowed_list /proc/self/status > \"$NOMAD_ALLOC_DIR/cpus\""
    job = {"Job": {"ID": "pinned", "Type": "batch", "TaskGroups": [{
        "Name": "g", "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Tasks": [{"Name": "t", "Driver": "raw_exec",
                   "Config": {"command": "/bin/sh", "args": ["-c", script]},
                   "Resources": {"Cores": 1, "MemoryMB": 16}}]}]}}
    with trio.fail_after(30):
        async with running_agent(tmp_path / "data", driver_config=LIMITED) as run:
            alloc = await run_until(run.client, job, "complete")
            cpus = (await run.client.get(f"/v1/client/fs/cat/{alloc['ID']}",
                                         params={"path": "alloc/cpus"})).text
    (core,) = alloc["AllocatedResources"]["Tasks"]["t"]["Cpu"]["ReservedCores"]
    assert cpus.split() == ["Cpus_allowed_list:", str(core)]

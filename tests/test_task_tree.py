"""A raw_exec task's whole process tree goes with it (layer 2: real processes, real clock).

The task forks a daemon with `setsid` (its own session and process group, out of reach of
`killpg`) through an intermediate shell that exits, so the daemon is an orphan. After the task
is stopped, no process of the tree may be left, whichever way the tree is tracked: a cgroup v2,
a cgroup v1 (freezer), or the subreaper fallback; and also when the agent restarted in between.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.runtime_support import eventually
from yurt.runtime.client.drivers import cgroups
from yurt.runtime.client.drivers.protocol import TaskConfig
from yurt.runtime.client.drivers.rawexec import RawExecDriver, plugin

pytestmark = pytest.mark.slow

MODES = ["cgroup2", "cgroup1", "subreaper"]
ALLOC = "tree0000-0000-4000-8000-" + uuid.uuid4().hex[:12]

# The task: a shell that starts a subshell which forks a `setsid` daemon and exits, then
# records the daemon's pid and waits forever.
DAEMON = ('(setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! >"$1/daemon") ; '
          'exec sleep 1000')
# Two levels of setsid: a daemon (its own session) whose worker is in a session of its own
# too, so neither killing the task's group nor the daemon's reaches the worker; "daemon"
# records the worker.
NESTED = ("(setsid sh -c 'setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! >\"$1/daemon\"; "
          "exec sleep 1000' sh \"$1\" </dev/null >/dev/null 2>&1 &) ; exec sleep 1000")
SHORT = ('(setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! >"$1/daemon") ; exit 0')


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    """Whatever a failing test leaves running is killed, so it cannot disturb other tests."""
    yield
    record = tmp_path / "task" / "daemon"
    if record.exists() and record.read_text().strip().isdigit():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(record.read_text()), signal.SIGKILL)
    for root in ("cgroup2", "cgroup1"):
        found = cgroups.select_root(root)
        for cgroup in found.path.glob(f"{ALLOC}.*") if found else ():
            cgroups.kill(cgroup)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:].split()[0] not in (b"Z", b"X")


def parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def task_config(tmp_path: Path, script: str) -> TaskConfig:
    task_dir = tmp_path / "task"
    task_dir.mkdir(exist_ok=True)
    return TaskConfig(id=f"{ALLOC}/t/{uuid.uuid4().hex[:8]}", name="t", alloc_id=ALLOC,
                      job_id="j", task_group="g",
                      driver_config={"command": "/bin/sh",
                                     "args": ["-c", script, "sh", str(task_dir)]},
                      task_dir=task_dir)


async def daemon_pid(tmp_path: Path) -> int:
    record = tmp_path / "task" / "daemon"
    await eventually(lambda: record.exists() and record.read_text().endswith("\n"))
    return int(record.read_text())


@pytest.mark.parametrize("mode", MODES)
async def test_stop_kills_a_setsid_daemon(tmp_path: Path, mode: str) -> None:
    driver = plugin({"tree_tracking": mode})
    config = task_config(tmp_path, DAEMON)
    with trio.fail_after(20):
        handle = await driver.start_task(config)
        daemon = await daemon_pid(tmp_path)
        assert alive(daemon)
        if mode == "subreaper":  # the orphan went to the shim, not to init
            shim = int(handle.driver_state["shim_pid"])
            await eventually(lambda: parent(daemon) == shim)
        await driver.stop_task(config.id, 5 * 10**9, "SIGTERM")
        await driver.wait_task(config.id)
        await driver.destroy_task(config.id, force=True)
        await eventually(lambda: not alive(daemon))
    cgroup = str(handle.driver_state.get("cgroup", ""))
    assert (mode == "subreaper") == (cgroup == "")
    assert not cgroup or not await trio.Path(cgroup).exists()


@pytest.mark.parametrize("mode", MODES)
async def test_a_daemon_left_by_a_task_that_exited_is_killed(tmp_path: Path,
                                                             mode: str) -> None:
    driver = plugin({"tree_tracking": mode})
    config = task_config(tmp_path, SHORT)
    with trio.fail_after(20):
        await driver.start_task(config)
        result = await driver.wait_task(config.id)
        daemon = await daemon_pid(tmp_path)
        await driver.destroy_task(config.id, force=True)
        await eventually(lambda: not alive(daemon))
    assert result.exit_code == 0


@pytest.mark.parametrize("mode", MODES)
async def test_the_tree_is_killed_after_the_agent_restarted(tmp_path: Path,
                                                            mode: str) -> None:
    config = task_config(tmp_path, DAEMON)
    with trio.fail_after(20):
        handle = await plugin({"tree_tracking": mode}).start_task(config)
        daemon = await daemon_pid(tmp_path)
        # A new driver knows the task only from its persisted handle.
        again = plugin({"tree_tracking": mode})
        await again.recover_task(handle)
        await again.stop_task(config.id, 5 * 10**9, "SIGTERM")
        await again.wait_task(config.id)
        await again.destroy_task(config.id, force=True)
        await eventually(lambda: not alive(daemon))


def test_modes_resolve_on_this_host() -> None:
    v2, v1 = cgroups.mounts(Path("/proc/self/mountinfo").read_text())
    assert v2, "this host has a cgroup v2 tree"
    assert v1, "and a v1 freezer"
    assert cgroups.select_root("subreaper") is None
    root = cgroups.select_root("cgroup1")
    assert root is not None
    assert root.kind == "cgroup1"


def test_mountinfo_parsing() -> None:
    text = ("30 25 0:26 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n"
            "35 25 0:31 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n"
            "36 25 0:32 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
            "37 25 0:33 / /proc rw - proc proc rw\n")
    assert cgroups.mounts(text) == ([Path("/sys/fs/cgroup/unified")],
                                    [Path("/sys/fs/cgroup/freezer")])
    assert cgroups.select_root("auto", mountinfo="") is None
    with pytest.raises(Exception, match="cannot create a cgroup2"):
        cgroups.select_root("cgroup2", mountinfo="")
    with pytest.raises(Exception, match="tree_tracking must be one of"):
        cgroups.select_root("bogus")


def test_unknown_plugin_options_are_refused() -> None:
    with pytest.raises(Exception, match="tree_trackin"):
        plugin({"tree_trackin": "auto"})


def test_the_default_driver_tracks_trees_with_a_cgroup_here() -> None:
    assert os.geteuid() == 0  # the agent here may make cgroups: auto picks one
    assert RawExecDriver().cgroup_root is not None


@pytest.mark.parametrize("mode", MODES)
async def test_a_tree_left_while_the_agent_was_away_is_killed_on_reattach(
        tmp_path: Path, mode: str) -> None:
    config = task_config(tmp_path, SHORT)
    with trio.fail_after(20):
        handle = await plugin({"tree_tracking": mode}).start_task(config)
        daemon = await daemon_pid(tmp_path)
        exit_file = Path(str(handle.driver_state["state_dir"])) / "exit"
        await eventually(exit_file.exists)  # the task ended with no agent watching it
        again = plugin({"tree_tracking": mode})
        await again.recover_task(handle)
        assert (await again.wait_task(config.id)).exit_code == 0
        await eventually(lambda: not alive(daemon))
        await again.destroy_task(config.id, force=True)


@pytest.mark.parametrize(("mode", "script"), [(mode, DAEMON) for mode in MODES]
                         + [("subreaper", NESTED)])
async def test_an_orphan_start_is_reaped_with_its_whole_tree(tmp_path: Path, mode: str,
                                                             script: str) -> None:
    """A start whose handle a crash lost is stopped by the next agent's reconcile, daemon
    included: killing the shim and the task's group alone would leave the setsid daemon
    (in its cgroup, or adopted by the subreaper shim)."""
    alloc_root = tmp_path / "alloc"
    task_dir = alloc_root / ALLOC / "t"
    task_dir.mkdir(parents=True)
    config = TaskConfig(id=f"{ALLOC}/t/{uuid.uuid4().hex[:8]}", name="t", alloc_id=ALLOC,
                        job_id="j", task_group="g",
                        driver_config={"command": "/bin/sh",
                                       "args": ["-c", script, "sh", str(task_dir)]},
                        task_dir=task_dir)
    record = task_dir / "daemon"
    try:
        with trio.fail_after(20):
            handle = await plugin({"tree_tracking": mode}).start_task(config)  # handle lost
            await eventually(lambda: record.exists() and record.read_text().endswith("\n"))
            daemon = int(record.read_text())
            assert alive(daemon)
            assert await plugin({"tree_tracking": mode}).reconcile(alloc_root) == 1
            await eventually(lambda: not alive(daemon))
        cgroup = str(handle.driver_state["cgroup"])
        assert (mode == "subreaper") == (cgroup == "")
        assert not cgroup or not await trio.Path(cgroup).exists()
    finally:
        if record.exists() and record.read_text().strip().isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(record.read_text()), signal.SIGKILL)

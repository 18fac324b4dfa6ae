"""Starts that a crash left without a handle (layer 2: real shims, real clock).

An agent killed between spawning a task and persisting its handle is played by a driver that
starts a task and is then forgotten; the restarted agent is a new driver on the same dirs.
Processes are counted as an operator would: by NOMAD_ALLOC_ID and NOMAD_TASK_NAME in
/proc/PID/environ, shims left out.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from tests.agent_support import running_agent
from tests.proc_support import our_children, processes_with_env
from tests.runtime_support import eventually
from yurt.runtime.client.drivers import rawexec
from yurt.runtime.client.drivers.protocol import TaskConfig, reconcile_drivers
from yurt.runtime.client.drivers.rawexec import SHIM, RawExecDriver
from yurt.runtime.lib.procfs import start_time

pytestmark = pytest.mark.slow

ALLOC = "orphan-test-5f3a"


def task_processes(alloc_id: str, task: str) -> list[int]:
    return processes_with_env(NOMAD_ALLOC_ID=alloc_id, NOMAD_TASK_NAME=task)


@contextmanager
def killing_leftovers(alloc_id: str) -> Iterator[None]:
    try:
        yield
    finally:
        for pid in task_processes(alloc_id, "t") + task_processes(alloc_id, "u"):
            os.kill(pid, signal.SIGKILL)


def config(alloc_root: Path, task: str, invocation: str,
           script: str = "exec sleep 1000") -> TaskConfig:
    task_dir = alloc_root / ALLOC / task
    task_dir.mkdir(parents=True, exist_ok=True)
    return TaskConfig(id=f"{ALLOC}/{task}/{invocation}", name=task, alloc_id=ALLOC, job_id="j",
                      task_group="g", driver_config={"command": "/bin/sh",
                                                     "args": ["-c", script]},
                      env={"NOMAD_ALLOC_ID": ALLOC, "NOMAD_TASK_NAME": task},
                      task_dir=task_dir)


async def test_the_next_start_stops_a_start_that_left_no_handle(tmp_path: Path) -> None:
    root = tmp_path / "alloc"
    with killing_leftovers(ALLOC), trio.fail_after(20):
        await RawExecDriver().start_task(config(root, "t", "00000001"))  # the handle is lost
        assert len(task_processes(ALLOC, "t")) == 1
        driver = RawExecDriver()  # the restarted agent starts the task again
        handle = await driver.start_task(config(root, "t", "00000002"))
        # The first copy is SIGKILLed: it may take a moment to leave /proc.
        await eventually(lambda: task_processes(ALLOC, "t") == [handle.driver_state["pid"]])
        await driver.stop_task(handle.task_id, 0, "SIGKILL")
        await driver.wait_task(handle.task_id)
        await driver.destroy_task(handle.task_id, force=True)
        await eventually(lambda: task_processes(ALLOC, "t") == [])
        assert list((root / ALLOC / "t" / ".shim").iterdir()) == []


async def test_reconcile_stops_what_no_handle_accounts_for(tmp_path: Path) -> None:
    root = tmp_path / "alloc"
    with killing_leftovers(ALLOC), trio.fail_after(20):
        first = RawExecDriver()
        kept = await first.start_task(config(root, "t", "00000001"))  # its handle persisted
        await first.start_task(config(root, "u", "00000002"))  # killed before persisting
        assert len(task_processes(ALLOC, "u")) == 1
        driver = RawExecDriver()
        await driver.recover_task(kept)
        assert await reconcile_drivers([driver], root) == 1
        await eventually(lambda: task_processes(ALLOC, "u") == [])
        assert task_processes(ALLOC, "t") == [kept.driver_state["pid"]]
        assert not (root / ALLOC / "u" / ".shim" / "00000002").exists()
        await driver.stop_task(kept.task_id, 0, "SIGKILL")
        await driver.wait_task(kept.task_id)
        await driver.destroy_task(kept.task_id, force=True)


async def test_a_shim_found_only_in_proc_is_stopped_too(tmp_path: Path) -> None:
    """A shim killed with its agent before it recorded its pid is found by its command line."""
    root = tmp_path / "alloc"
    with killing_leftovers(ALLOC), trio.fail_after(20):
        await RawExecDriver().start_task(config(root, "u", "00000001"))
        state = root / ALLOC / "u" / ".shim" / "00000001"
        (state / "shim").unlink()
        (state / "pid").unlink()
        assert await RawExecDriver().reconcile(root) == 1
        await eventually(lambda: task_processes(ALLOC, "u") == [])


async def test_a_start_cancelled_after_the_spawn_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "alloc"
    driver = RawExecDriver()
    # The real shim, whose task's report goes nowhere while the pipe stays open (fd 9): the
    # task runs and `start_task` waits in its handshake for seconds, so the cancel surely
    # lands there, after the spawn.
    unheard = tmp_path / "shim.sh"
    unheard.write_text(f'exec /bin/sh {SHIM} "$@" 9>&1 >/dev/null\n')
    monkeypatch.setattr(rawexec, "SHIM", unheard)
    cfg = config(root, "t", "00000001")
    with killing_leftovers(ALLOC), trio.fail_after(20):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(driver.start_task, cfg)
                await eventually(lambda: len(task_processes(ALLOC, "t")) == 1)
                scope.cancel()
        await eventually(lambda: task_processes(ALLOC, "t") == [])
        assert not (root / ALLOC / "t" / ".shim" / "00000001").exists()


async def test_a_shim_whose_agent_died_before_its_report_still_runs_its_task(
        tmp_path: Path) -> None:
    """The shim reports on a pipe to the agent; if the agent is gone, the write must not
    kill the shim with SIGPIPE and leave its task behind, unsupervised."""
    state, work = tmp_path / "state", tmp_path / "work"
    state.mkdir()
    work.mkdir()
    read_end, write_end = os.pipe()
    os.close(read_end)  # the agent that would read the report is dead
    with trio.fail_after(10):
        try:
            shim = await trio.lowlevel.open_process(
                ["/bin/sh", str(SHIM), str(state), "/dev/null", "/dev/null", str(work), "",
                 "/bin/sh", "-c", "until [ -e go ]; do sleep 0.01; done; exit 5"],
                stdout=write_end, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(write_end)
        await eventually(lambda: (state / "pid").exists())
        (work / "go").touch()
        assert await shim.wait() == 0
    assert (state / "exit").read_text() == "5\n"


async def test_an_agent_stops_at_start_up_what_its_state_does_not_know(tmp_path: Path) -> None:
    """An allocation dir with a running start and no state at all (the state rows were lost,
    or the handle never written): the agent's restore leaves nothing of it running."""
    data = tmp_path / "data"
    with killing_leftovers(ALLOC), trio.fail_after(30):
        await RawExecDriver().start_task(config(data / "alloc", "t", "00000001"))
        assert len(task_processes(ALLOC, "t")) == 1
        async with running_agent(data):
            await eventually(lambda: task_processes(ALLOC, "t") == [])


async def test_a_start_cancelled_before_the_report_kills_and_reaps_the_launcher(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shim that never reports keeps `start_task` reading; a cancel then must not leave the
    launcher running, nor as a zombie child of the agent."""
    silent = tmp_path / "silent.sh"
    silent.write_text("exec sleep 1000\n")
    monkeypatch.setattr(rawexec, "SHIM", silent)
    driver = RawExecDriver()
    before = our_children()
    with killing_leftovers(ALLOC), trio.fail_after(20):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(driver.start_task, config(tmp_path / "alloc", "t", "0001"))
                await eventually(lambda: len(our_children() - before) == 1)
                scope.cancel()
        assert our_children() - before == set()


async def test_a_planted_state_dir_never_makes_the_agent_kill_a_stranger(
        tmp_path: Path) -> None:
    """A task dir an older yurt left world-writable: a local user plants `.shim/x/pid` naming
    a process of root's (its start time is public in /proc). Neither the sweep nor the next
    start may believe it, and the next start narrows the task dir and replaces the `.shim`."""
    root = tmp_path / "alloc"
    task_dir = root / ALLOC / "t"
    task_dir.mkdir(parents=True)
    task_dir.chmod(0o777)
    victim = await trio.lowlevel.open_process(["sleep", "1000"], start_new_session=True)
    try:
        started = start_time(victim.pid)
        assert started is not None
        planted = task_dir / ".shim" / "deadbeef"
        planted.mkdir(parents=True)
        (planted / "pid").write_text(f"{victim.pid} {started}\n")
        for path in (task_dir / ".shim", planted, planted / "pid"):
            os.chown(path, 65534, 65534)
        with trio.fail_after(20):
            assert await RawExecDriver().reconcile(root) == 0
            assert victim.poll() is None
            driver = RawExecDriver()
            handle = await driver.start_task(config(root, "t", "00000001"))
            assert victim.poll() is None
            assert (task_dir.stat().st_mode & 0o777) == 0o755
            assert (task_dir / ".shim").stat().st_uid == os.geteuid()
            await driver.stop_task(handle.task_id, 10**9, "SIGKILL")
            await driver.destroy_task(handle.task_id, force=True)
    finally:
        victim.kill()
        await victim.wait()

"""How raw_exec starts a task (layer 2: real shims, real clock), in each tree-tracking mode.

The agent spawns the shim itself, as a session leader, and the task reports its own pid from
inside its new session: so when `start_task` returns, the task already leads its process group
with SIGINT at its default (a stop reaches it), the shim is the agent's child (reaped once it
exits, never left as a zombie), and nothing of the agent's fds reached either process.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from pathlib import Path

import pytest
import trio

from tests.proc_support import our_children, zombie
from tests.runtime_support import eventually
from yurt.runtime.client.drivers.protocol import TaskConfig
from yurt.runtime.client.drivers.rawexec import plugin
from yurt.runtime.lib.procfs import stat_fields

pytestmark = pytest.mark.slow

MODES = ["cgroup2", "cgroup1", "subreaper"]
SIGNALS = {"SIGINT": 2, "SIGQUIT": 3, "SIGPIPE": 13, "SIGXFSZ": 25}


def config(tmp_path: Path, *args: str) -> TaskConfig:
    task_dir = tmp_path / "task"
    task_dir.mkdir(exist_ok=True)
    return TaskConfig(id=f"spawn-{uuid.uuid4().hex[:8]}/t/0001", name="t",
                      alloc_id="spawn", job_id="j", task_group="g",
                      driver_config={"command": args[0], "args": list(args[1:])},
                      task_dir=task_dir)


def ignored(pid: int) -> set[str]:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("SigIgn:")), 16)
    return {name for name, number in SIGNALS.items() if mask & (1 << (number - 1))}


def ids(pid: int) -> tuple[int, int, int]:
    """(parent, process group, session) of a live process."""
    fields = stat_fields(pid)
    assert fields is not None
    return int(fields[1]), int(fields[2]), int(fields[3])


@pytest.mark.parametrize("mode", MODES)
async def test_a_started_task_is_on_its_own_and_its_shim_is_reaped(tmp_path: Path,
                                                                   mode: str) -> None:
    driver = plugin({"tree_tracking": mode})
    cfg = config(tmp_path, "/bin/sleep", "1000")
    with trio.fail_after(20):
        handle = await driver.start_task(cfg)
        pid, shim = int(handle.driver_state["pid"]), int(handle.driver_state["shim_pid"])
        # At once, with no waiting: the task reported itself from its own session.
        assert ids(pid) == (shim, pid, pid)
        assert ignored(pid) & {"SIGINT", "SIGQUIT"} == set()
        # The shim is this process's child, in a session of its own (a group signal to the
        # agent's group or the task's never reaches it).
        assert ids(shim) == (os.getpid(), shim, shim)
        # Once the task runs its command, nothing the agent's Python ignores is ignored.
        cmdline = Path(f"/proc/{pid}/cmdline")
        await eventually(lambda: cmdline.read_bytes().startswith(b"/bin/sleep"))
        assert ignored(pid) == set()
        await driver.stop_task(cfg.id, 5 * 10**9, "SIGINT")
        result = await driver.wait_task(cfg.id)
        # Exited (a zombie until this process reaps it, or reaped already).
        await eventually(lambda: zombie(shim) or shim not in our_children())
        await driver.destroy_task(cfg.id, force=True)
        assert shim not in our_children()  # reaped
    assert (result.exit_code, result.signal) == (130, 2)


async def test_the_exit_status_comes_before_the_shims_durable_write(tmp_path: Path) -> None:
    """With a cgroup, the shim sends `$?` down the report pipe before it writes the exit file
    (`dd` with fsync, shim.sh): the wait ends while the shim is still at work. Here its `dd`
    (found on the task's PATH) waits for a file, so only the pipe can end the wait."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "dd").write_text(f"#!/bin/sh\nuntil [ -e {tmp_path}/go ]; do sleep 0.01; done\n"
                              'exec /usr/bin/dd "$@"\n')
    (tools / "dd").chmod(0o755)
    driver = plugin({"tree_tracking": "cgroup1"})
    cfg = config(tmp_path, "/bin/sh", "-c", "exit 7")
    cfg = dataclasses.replace(cfg, env={"PATH": f"{tools}:/usr/bin:/bin"})
    with trio.fail_after(20):
        handle = await driver.start_task(cfg)
        shim = int(handle.driver_state["shim_pid"])
        result = await driver.wait_task(cfg.id)
        assert not zombie(shim)  # still in its `dd`
        (tmp_path / "go").touch()
        await eventually(lambda: zombie(shim))
        await driver.destroy_task(cfg.id, force=True)
        assert shim not in our_children()
    assert result.exit_code == 7


async def test_a_destroy_waits_for_the_shims_last_write(tmp_path: Path) -> None:
    """The shim writes `<state>/exit` after the status went down the pipe: a destroy that
    removed the state dir meanwhile would race that write (and leave what it wrote, and the
    alloc dir, behind). Here the shim's `dd` waits for a file made half a second later."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "dd").write_text(f"#!/bin/sh\nuntil [ -e {tmp_path}/go ]; do sleep 0.01; done\n"
                              'exec /usr/bin/dd "$@"\n')
    (tools / "dd").chmod(0o755)
    driver = plugin({"tree_tracking": "cgroup1"})
    cfg = config(tmp_path, "/bin/sh", "-c", "exit 7")
    cfg = dataclasses.replace(cfg, env={"PATH": f"{tools}:/usr/bin:/bin"})

    async def release() -> None:
        await trio.sleep(0.5)
        (tmp_path / "go").touch()

    with trio.fail_after(20):
        handle = await driver.start_task(cfg)
        shim = int(handle.driver_state["shim_pid"])
        state_dir = Path(str(handle.driver_state["state_dir"]))
        await driver.wait_task(cfg.id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(release)
            await driver.destroy_task(cfg.id, force=True)
            assert (tmp_path / "go").exists()  # it waited for the shim
        assert zombie(shim) or shim not in our_children()  # the shim had exited
        assert not await trio.Path(state_dir).exists()


async def test_the_shim_records_an_exit_durably_with_one_program(tmp_path: Path) -> None:
    """Between the task's exit and its own, the shim runs one program (`dd`, which writes
    and fsyncs the status), not three: with every tool on PATH a logging wrapper, only `dd`
    is logged after the task ran."""
    tools, log = tmp_path / "bin", tmp_path / "programs"
    tools.mkdir()
    for tool in ("setsid", "dd", "sync", "mv", "flock", "cat", "printf"):
        real = shutil.which(tool, path="/usr/bin:/bin")
        (tools / tool).write_text(f'#!/bin/sh\necho {tool} >>{log}\nexec {real} "$@"\n')
        (tools / tool).chmod(0o755)
    driver = plugin({"tree_tracking": "cgroup1"})
    cfg = config(tmp_path, "/bin/sh", "-c", f"echo task >>{log}; exit 7")
    cfg = dataclasses.replace(cfg, env={"PATH": str(tools)})
    with trio.fail_after(20):
        handle = await driver.start_task(cfg)
        state_dir = Path(str(handle.driver_state["state_dir"]))
        assert (await driver.wait_task(cfg.id)).exit_code == 7
        pidfd = os.pidfd_open(int(handle.driver_state["shim_pid"]))
        try:
            await trio.lowlevel.wait_readable(pidfd)  # the shim has exited
        finally:
            os.close(pidfd)
        assert (state_dir / "exit").read_text() == "7\n"
        assert not (state_dir / "exit.tmp").exists()
        await driver.destroy_task(cfg.id, force=True)
    programs = log.read_text().split()
    assert programs[programs.index("task") + 1:] == ["dd"]


async def test_no_fd_of_the_agent_reaches_the_shim_or_the_task(tmp_path: Path) -> None:
    """An fd the agent holds without close-on-exec (hypercorn's listening socket is one) must
    not reach a task: a shim holding the API socket keeps a restarted agent from binding."""
    driver = plugin({})
    cfg = config(tmp_path, "/bin/sleep", "1000")
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, True)
    try:
        with trio.fail_after(20):
            await driver.start_task(cfg)
            os.close(write_end)
            write_end = -1
            os.set_blocking(read_end, False)
            assert os.read(read_end, 1) == b""  # EOF: no process holds the write end
            await driver.stop_task(cfg.id, 0, "SIGKILL")
            await driver.wait_task(cfg.id)
            await driver.destroy_task(cfg.id, force=True)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)



async def test_a_restart_prepares_on_the_event_loop_unless_an_orphan_waits(
        tmp_path: Path, thread_hops: list[str]) -> None:
    """The first start in a task dir prepares it in a worker thread; a restart of the same
    task (no user) does not leave the event loop, unless a start nobody knows is in the task
    dir: then the worker thread reaps it first."""
    driver = plugin({"tree_tracking": "cgroup1"})

    async def run_once() -> Path:
        cfg = config(tmp_path, "/bin/sh", "-c", "exit 3")
        cfg = dataclasses.replace(cfg, id=f"spawn/t/{uuid.uuid4().hex[:8]}")
        handle = await driver.start_task(cfg)
        assert (await driver.wait_task(cfg.id)).exit_code == 3
        await driver.destroy_task(cfg.id, force=True)
        return Path(str(handle.driver_state["state_dir"]))

    with trio.fail_after(20):
        state_dir = await run_once()
        assert [h for h in thread_hops if h == "prepare_start"] == ["prepare_start"]
        await run_once()
        assert [h for h in thread_hops if h == "prepare_start"] == ["prepare_start"]
        orphan = state_dir.with_name("0rphan00")
        orphan.mkdir(mode=0o700)
        await run_once()
        assert [h for h in thread_hops if h == "prepare_start"] == ["prepare_start"] * 2
        assert not orphan.exists()  # reaped by that hop

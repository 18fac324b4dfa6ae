"""raw_exec around an agent's death, with real shims and the real clock (layer 2).

- A cancel that lands together with the pidfd wake-up (the shim has just exited): patching
  `trio.lowlevel.wait_readable` to cancel the caller right after it returns makes that
  interleaving deterministic instead of one run in many.
- Output a task writes and leaves in the pipe while no agent reads it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import trio
import trio.testing

from yurt.runtime.client.drivers.protocol import TaskConfig
from yurt.runtime.client.drivers.rawexec import RawExecDriver
from yurt.runtime.client.logs import spill
from yurt.runtime.client.logs.pump import LogPump, fifo_path, log_base, open_fifo

MIB = 1024 * 1024

pytestmark = pytest.mark.slow


def config(tmp_path: Path, script: str, name: str = "t") -> TaskConfig:
    task_dir = tmp_path / name
    task_dir.mkdir(parents=True, exist_ok=True)
    return TaskConfig(id=f"alloc/{name}/0000abcd", name=name, alloc_id="alloc", job_id="j",
                      task_group="g", driver_config={"command": "/bin/sh",
                                                     "args": ["-c", script]},
                      task_dir=task_dir)


async def test_a_cancel_with_the_exit_wakeup_keeps_the_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    driver = RawExecDriver()
    real_wait_readable = trio.lowlevel.wait_readable
    scope = trio.CancelScope()

    async def wake_then_cancel(fd: int) -> None:
        await real_wait_readable(fd)
        scope.cancel()  # lands in the same step as the wake-up

    with trio.fail_after(20):
        # The task waits for "go", so the shim is surely there when the wait begins.
        handle = await driver.start_task(
            config(tmp_path, "until [ -e go ]; do sleep 0.01; done; exit 7"))
        await trio.Path(tmp_path / "t" / "go").touch()
        monkeypatch.setattr(trio.lowlevel, "wait_readable", wake_then_cancel)
        with scope:
            await driver.wait_task(handle.task_id)
        monkeypatch.undo()
        # The next wait must still know how the task ended, and not take the agent down.
        result = await driver.wait_task(handle.task_id)
    assert result.exit_code == 7
    await driver.destroy_task(handle.task_id, force=True)


async def test_output_of_a_task_that_exits_while_no_agent_reads_is_kept(tmp_path: Path) -> None:
    """The agent "dies" (its pump and keeper go), the task writes 30 numbered lines and
    exits; a new pump after the "restart" finds every line, in order."""
    logs = tmp_path / "alloc" / "logs"
    logs.mkdir(parents=True)
    fifo, base = fifo_path(logs, "t", "stdout"), log_base(logs, "t", "stdout")
    driver = RawExecDriver()
    script = 'until [ -e go ]; do sleep 0.01; done; i=1; ' \
             'while [ $i -le 30 ]; do echo "line $i"; i=$((i+1)); done'
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            read_fd, keep_fd = open_fifo(fifo)
            await nursery.start(LogPump(read_fd, base, file_size=MIB, max_files=2).run)
            cfg = dataclasses.replace(config(tmp_path, script), stdout_path=str(fifo))
            handle = await driver.start_task(cfg)
            os.close(keep_fd)
            nursery.cancel_scope.cancel()  # the agent is gone: nobody reads the FIFO
        await trio.Path(tmp_path / "t" / "go").touch()
        await driver.wait_task(handle.task_id)  # the shim has exited: the pipe is gone
        await driver.destroy_task(handle.task_id, force=True)

        read_fd, keep_fd = open_fifo(fifo)  # the next agent
        async with trio.open_nursery() as nursery:
            await nursery.start(LogPump(read_fd, base, file_size=MIB, max_files=2).run)
            os.close(keep_fd)  # no writer left: the pump ends after what it finds
    text = (logs / "t.stdout.0").read_text() if (logs / "t.stdout.0").exists() else ""
    assert text.splitlines() == [f"line {i}" for i in range(1, 31)]


async def test_a_pump_waits_for_a_draining_shim_and_writes_its_spill_first(
        tmp_path: Path) -> None:
    """While a shim holds the stream's lock (it drains the pipe), a starting pump waits; then
    the spill goes to the log before anything read from the FIFO."""
    logs = tmp_path / "alloc" / "logs"
    logs.mkdir(parents=True)
    fifo, base = fifo_path(logs, "t", "stdout"), log_base(logs, "t", "stdout")
    shim_lock = spill.try_lock(spill.lock_path(base))
    assert shim_lock is not None
    read_fd, keep_fd = open_fifo(fifo)
    os.write(keep_fd, b"after\n")
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(LogPump(read_fd, base, file_size=MIB, max_files=2).run)
            await trio.testing.wait_all_tasks_blocked()  # the pump is waiting for the lock
            spill.spill_path(base).write_bytes(b"before\n")
            os.close(shim_lock)
            os.close(keep_fd)
    assert (logs / "t.stdout.0").read_text() == "before\nafter\n"
    assert not spill.spill_path(base).exists()

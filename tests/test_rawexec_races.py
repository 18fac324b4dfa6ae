"""raw_exec's wait path under cancellation, with real shims and the real clock (layer 2).

The race of interest: a cancel that lands together with the pidfd wake-up (the shim has just
exited). Patching `trio.lowlevel.wait_readable` to cancel the caller right after it returns
makes that interleaving deterministic instead of one run in many.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from yurt.runtime.drivers.protocol import TaskConfig
from yurt.runtime.drivers.rawexec import RawExecDriver

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

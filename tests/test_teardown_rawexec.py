"""A destroy whose deadline ends during a graceful kill, with real processes (layer 2).

The task ignores its kill signal and has a kill timeout longer than the caller's deadline, so
the kill is cut short. The destroy must still SIGKILL it before the destroy hooks delete the
alloc dir, which holds the only record of the start: a task left running then could never be
found again.
"""

from __future__ import annotations

import os
import random
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from tests.proc_support import processes_with_env
from tests.runtime_support import eventually, job_alloc, unix_clock
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.drivers.rawexec import RawExecDriver
from yurt.store import MemoryStateDB

pytestmark = pytest.mark.slow

STUBBORN = '''job "j" {
  type = "service"
  group "g" {
    task "t" {
      driver = "raw_exec"
      kill_timeout = "20s"
      config {
        command = "/bin/sh"
        args = ["-c", "trap '' INT; echo up; while :; do sleep 1; done"]
      }
    }
  }
}'''


async def test_a_destroy_cut_by_its_deadline_leaves_no_process(tmp_path: Path) -> None:
    alloc_id = f"teardown-{uuid.uuid4().hex[:12]}"
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"raw_exec": RawExecDriver()},
                               unix_clock=unix_clock, alloc_root=tmp_path / "alloc",
                               rng=random.Random(7))

    def running() -> list[int]:
        return processes_with_env(NOMAD_ALLOC_ID=alloc_id, NOMAD_TASK_NAME="t")

    try:
        await destroy_cut_short(tmp_path, alloc_id, config, running)
    finally:  # a failing run must not leave its stubborn task to the next tests
        for pid in running():
            os.kill(pid, signal.SIGKILL)


async def destroy_cut_short(tmp_path: Path, alloc_id: str, config: AllocRunnerConfig,
                            running: Callable[[], list[int]]) -> None:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            ar = AllocRunner(job_alloc(STUBBORN, alloc_id), config, nursery=nursery)
            nursery.start_soon(ar.run)
            log = tmp_path / "alloc" / alloc_id / "alloc" / "logs" / "t.stdout.0"
            # "up" is printed after the trap is set: a kill before it would just work.
            await eventually(lambda: log.exists() and log.read_text() == "up\n")
            assert running()  # the shell and its sleep
            with trio.move_on_after(3):  # shorter than the task's kill timeout
                await ar.destroy_and_wait()
            assert ar.destroyed.is_set()
            await eventually(lambda: running() == [])
            assert not (tmp_path / "alloc" / alloc_id).exists()

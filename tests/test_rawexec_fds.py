"""Running out of file descriptors while raw_exec starts a task is recoverable (layer 2: real
processes, real clock; the EMFILE is injected at the spawn, not provoked in the test runner)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.test_rawexec import NODE, alloc_of
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.drivers.rawexec import RawExecDriver
from yurt.store import MemoryStateDB

HCL = '''job "j" {
  type = "batch"
  group "g" {
    restart {
      attempts = 2
      delay    = "100ms"
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/true"
      }
    }
  }
}'''


async def test_emfile_at_spawn_is_a_recoverable_start_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_spawn, calls = os.posix_spawn, []

    def exhausted_once(*args: Any, **kwargs: Any) -> int:
        calls.append(args)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_spawn(*args, **kwargs)

    monkeypatch.setattr(os, "posix_spawn", exhausted_once)
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"raw_exec": RawExecDriver()},
                               unix_clock=time.time_ns, alloc_root=tmp_path / "alloc",
                               node=NODE)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            ar = AllocRunner(alloc_of(HCL), config, nursery=nursery)
            await ar.run()
    events = [(e.type, e.display_message) for e in ar.task_runners["t"].state.events]
    assert any(t == "Driver Failure" and "Too many open files" in m for t, m in events), events
    assert ar.alloc_state().client_status == "complete", events

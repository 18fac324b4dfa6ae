"""Layer 3: the agent dies between spawning a task and persisting its handle.

`yurt run` is started with the raw_exec driver's fault injection (`YURT_TEST_CRASH_AFTER_SPAWN`),
so it SIGKILLs itself in exactly that window: the task runs, and the state has no handle for
it. A second `yurt run` on the same data dir must end with one process for the task, not two,
and with none once the job is stopped. Processes are counted by NOMAD_JOB_ID and
NOMAD_TASK_NAME in /proc/PID/environ (shims left out). Real clock, every wait bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.proc_support import processes_with_env, wait_for
from yurt.runtime.client.drivers.rawexec import CRASH_AFTER_SPAWN

pytestmark = pytest.mark.slow

YURT = str(Path(sys.executable).parent / "yurt")


def job(job_id: str) -> str:
    return f'''job "{job_id}" {{
  group "g" {{
    task "web" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sleep"
        args    = ["1000"]
      }}
    }}
  }}
}}'''


def task_processes(job_id: str, task: str) -> list[int]:
    return processes_with_env(NOMAD_JOB_ID=job_id, NOMAD_TASK_NAME=task)


def events(output: str) -> list[dict[str, Any]]:
    return [e for line in output.splitlines() if line.strip()
            for e in json.loads(line)["Events"]]


def started(records: list[dict[str, Any]]) -> int:
    return sum(1 for e in records
               if e["Topic"] == "Task" and e["Payload"]["Event"]["Type"] == "Started")


def test_a_crash_between_spawn_and_handle_leaves_one_process(tmp_path: Path) -> None:
    job_id = f"crash-start-{uuid.uuid4().hex[:8]}"
    job_file = tmp_path / "job.nomad.hcl"
    job_file.write_text(job(job_id))
    argv = [YURT, "run", "--json", "--data-dir", str(tmp_path / "data"), str(job_file)]
    second: subprocess.Popen[str] | None = None
    try:
        first = subprocess.run(argv, env={**os.environ, CRASH_AFTER_SPAWN: "web"},
                               capture_output=True, text=True, timeout=60)
        assert first.returncode == -signal.SIGKILL, first.stderr
        assert started(events(first.stdout)) == 0  # it died before the handle was persisted
        assert len(task_processes(job_id, "web")) == 1  # the task runs on, unknown

        second = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        assert second.stdout is not None
        seen: list[dict[str, Any]] = []
        for line in second.stdout:
            seen += events(line)
            if started(seen) == 1:
                break
        # The earlier copy was SIGKILLed before the new spawn, but may take a moment to
        # leave /proc; without the fix both copies stay.
        wait_for(lambda: len(task_processes(job_id, "web")) == 1)

        second.send_signal(signal.SIGTERM)  # `yurt run` stops its allocations
        second.communicate(timeout=30)
        assert second.returncode == 0
        wait_for(lambda: task_processes(job_id, "web") == [])
    finally:
        if second is not None and second.poll() is None:
            second.kill()
            second.wait()
        for pid in task_processes(job_id, "web"):
            os.kill(pid, signal.SIGKILL)

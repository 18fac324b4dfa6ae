"""`yurt run` of a service job with an `update` block, as a user runs it (a real `yurt`
process, real clock): its deployment follows the allocations' health as under the agent, and
fails at its progress deadline when nothing becomes healthy.

Each test reads the process's NDJSON records until the deployment event it waits for; a
watchdog kills the process at TIMEOUT, which ends the read (no unbounded wait)."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.test_run_e2e import ROOT, YURT, write_job

pytestmark = pytest.mark.slow

TIMEOUT = 60

JOB = '''job "web" {
  group "g" {
    count = 2
    update {
      max_parallel      = 1
      health_check      = "%s"
      min_healthy_time  = "1s"
      healthy_deadline  = "2s"
      progress_deadline = "3s"
    }
    task "t" {
      driver       = "mock_driver"
      kill_timeout = "1s"  # within the progress deadline, as Nomad's Task.Validate wants
      config { run_for = "1h" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}'''


def run_until_deployment(job: str, status: str) -> list[dict[str, Any]]:
    """The deployment events of `yurt run --json job`, up to the first with `status`."""
    proc = subprocess.Popen([YURT, "run", "--json", job], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    seen: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            events = [e for e in json.loads(line)["Events"] if e["Topic"] == "Deployment"]
            seen += events
            if any(e["Payload"]["Deployment"]["Status"] == status for e in events):
                break
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=TIMEOUT)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return seen


def test_a_healthy_rollout_completes(tmp_path: Path) -> None:
    events = run_until_deployment(write_job(tmp_path, JOB % "task_states"), "successful")
    final = events[-1]["Payload"]["Deployment"]
    assert final["Status"] == "successful", events
    assert final["StatusDescription"] == "Deployment completed successfully"
    assert final["TaskGroups"]["g"]["HealthyAllocs"] == 2


def test_a_rollout_that_never_gets_healthy_fails_at_its_progress_deadline(
        tmp_path: Path) -> None:
    # Manual health: nothing marks the allocations healthy.
    events = run_until_deployment(write_job(tmp_path, JOB % "manual"), "failed")
    final = events[-1]["Payload"]["Deployment"]
    assert final["Status"] == "failed", events
    assert final["StatusDescription"] == "Failed due to progress deadline"

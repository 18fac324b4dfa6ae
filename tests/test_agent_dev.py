"""`yurt agent --dev` (layer 3): a stop kills the tasks it started, where a plain agent's stop
leaves them running for the next start to re-attach."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.agent_support import raw_job
from tests.browser_support import poll, start_ui_agent

pytestmark = pytest.mark.slow


def running(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


@pytest.mark.parametrize("dev", [True, False])
def test_a_dev_agent_stop_kills_its_tasks_and_a_plain_one_does_not(tmp_path: Path,
                                                                   dev: bool) -> None:
    marker = f"sleep 7{uuid.uuid4().int % 10**6}.25"
    try:
        with start_ui_agent(tmp_path, dev=dev) as agent:
            agent.run_job(raw_job("dev", f"exec {marker}"))
            agent.wait_alloc("dev")
            poll(lambda: running(marker), 10, "the task's process")
        if dev:
            poll(lambda: not running(marker), 10, "the task killed by the agent's stop")
        else:
            assert running(marker), "a plain agent's stop left the task running"
    finally:
        subprocess.run(["pkill", "-f", marker], check=False)

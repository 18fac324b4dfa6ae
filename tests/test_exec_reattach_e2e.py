"""An exec task survives `kill -9` of its agent, and the agent that starts next re-attaches to
the one running copy and stops it cleanly (layer 3: real `yurt agent` processes, the real
clock; the agent is root here, as exec needs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.proc_support import wait_for
from tests.test_agent_e2e import YURT, User
from tests.test_execdriver import ROOTFS

pytestmark = pytest.mark.slow


def sleeps(marker: str) -> int:
    """How many `/bin/sleep MARKER` run on the host (the wrapper above one names it too)."""
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        count += args[:2] == [b"/bin/sleep", marker.encode()]
    return count


def sleep_pids(marker: str) -> list[int]:
    return [int(p) for p in filter(str.isdigit, os.listdir("/proc"))
            if Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[:2]
            == [b"/bin/sleep", marker.encode()]]


def start_agent(user: User, config: Path,
                env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`yurt agent` with `config` on the user's data dir and port, once its API is up."""
    agent = subprocess.Popen([YURT, "agent", "--data-dir", str(user.data), "--port",
                              str(user.port), "--config", str(config)],
                             stderr=subprocess.PIPE, text=True, env=env)
    assert agent.stderr is not None
    line = agent.stderr.readline()
    assert "listening on" in line, line
    return agent


def test_exec_task_survives_kill_9_of_its_agent_with_one_copy(tmp_path: Path) -> None:
    marker = str(4000 + int(uuid.uuid4().hex[:4], 16))
    user = User(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(f'[drivers.config.exec]\nrootfs_dir = "{ROOTFS}"\n')
    job = tmp_path / "x.nomad.hcl"
    job.write_text(f'job "x" {{\n  group "g" {{\n    task "t" {{\n      driver = "exec"\n'
                   f'      config {{\n        command = "/bin/sleep"\n'
                   f'        args = ["{marker}"]\n      }}\n      kill_timeout = "1s"\n'
                   f'    }}\n  }}\n}}\n')
    agent = start_agent(user, config)
    try:
        user.yurt("job", "run", str(job))
        wait_for(lambda: user.json("job", "status", "x")["Allocations"][0]["ClientStatus"]
                 == "running")
        wait_for(lambda: sleeps(marker) == 1)
        task = sleep_pids(marker)
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)
        assert sleeps(marker) == 1  # the task outlives its agent
        agent = start_agent(user, config)
        wait_for(lambda: user.json("job", "status", "x")["Allocations"][0]["ClientStatus"]
                 == "running")
        (alloc,) = user.json("job", "status", "x")["Allocations"]
        restarts = user.json("alloc", "status", alloc["ID"])["TaskStates"]["t"]["Restarts"]
        assert (sleep_pids(marker), restarts) == (task, 0)  # re-attached, not started again
        user.yurt("job", "stop", "x")
        wait_for(lambda: sleeps(marker) == 0)
        (alloc,) = user.json("job", "status", "x")["Allocations"]
        assert alloc["ClientStatus"] == "complete"
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)

"""`yurt agent` and the CLI verbs end to end, as a user drives them (layer 3).

Agent in the background, a raw_exec service job run, inspected, its logs followed, restarted,
stopped; then the agent is stopped with SIGTERM and started again on the same data dir: the
stopped job stays stopped and nothing is resent to the server or restarted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.proc_support import wait_for

pytestmark = pytest.mark.slow

YURT = str(Path(sys.executable).parent / "yurt")
JOB = '''job "e2e" {
  group "g" {
    task "web" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "i=0; while :; do i=$((i+1)); echo hello $i; sleep 0.05; done"]
      }
    }
  }
}'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class User:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.env = {**os.environ, "YURT_ADDR": f"http://127.0.0.1:{self.port}"}
        self.data = tmp / "data"

    def start_agent(self) -> subprocess.Popen[str]:
        agent = subprocess.Popen([YURT, "agent", "--data-dir", str(self.data), "--port",
                                  str(self.port)], stderr=subprocess.PIPE, text=True)
        assert agent.stderr is not None
        line = agent.stderr.readline()  # "yurt agent … listening on …": the API is up
        assert "listening on" in line, line
        return agent

    def yurt(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run([YURT, *args], capture_output=True, text=True, env=self.env,
                             timeout=60, check=False)
        if check:
            assert out.returncode == 0, (args, out.stdout, out.stderr)
        return out

    def json(self, *args: str) -> Any:
        return json.loads(self.yurt(*args, "--json").stdout)


def stop_agent(agent: subprocess.Popen[str]) -> None:
    agent.send_signal(signal.SIGTERM)
    agent.wait(timeout=30)
    assert agent.returncode == 0


def test_agent_and_cli_verbs(tmp_path: Path) -> None:
    user = User(tmp_path)
    job_file = tmp_path / "e2e.nomad.hcl"
    job_file.write_text(JOB)
    agent = user.start_agent()
    try:
        run = user.yurt("job", "run", str(job_file))  # returns once placed, as Nomad's
        assert re.search(r'Allocation "[0-9a-f]{8}" created: node "[0-9a-f]{8}", group "g"',
                         run.stdout), run.stdout
        wait_for(lambda: user.json("job", "status", "e2e")["Allocations"][0]["ClientStatus"]
                 == "running")
        (alloc,) = user.json("job", "status", "e2e")["Allocations"]
        alloc_id = alloc["ID"]
        registered_index = alloc["ModifyIndex"]

        status = user.yurt("alloc", "status", alloc_id[:8])
        assert 'Task "web" is "running"' in status.stdout

        follow = subprocess.Popen([YURT, "alloc", "logs", "-f", alloc_id[:8]],
                                  stdout=subprocess.PIPE, text=True, env=user.env)
        assert follow.stdout is not None
        first = [follow.stdout.readline() for _ in range(30)]  # lines keep coming
        follow.terminate()
        follow.wait(timeout=10)
        assert first[0] == "hello 1\n"
        assert first[-1] == "hello 30\n"

        user.yurt("alloc", "restart", alloc_id[:8])
        deadline = time.monotonic() + 20
        while True:
            states = user.json("alloc", "status", alloc_id)["TaskStates"]["web"]
            types = [e["Type"] for e in states["Events"]]
            if types.count("Started") == 2 and states["State"] == "running":
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)

        node = user.json("node", "status")[0]
        assert node["Drivers"]["raw_exec"]["Healthy"] is True

        events = subprocess.Popen([YURT, "events", "--topic", "Task", "--index", "1",
                                   "--json"],
                                  stdout=subprocess.PIPE, text=True, env=user.env)
        assert events.stdout is not None
        user.yurt("alloc", "signal", alloc_id[:8], "web", "-s", "SIGHUP")
        signalled = None
        for line in events.stdout:
            record = json.loads(line)
            types = [e["Payload"]["Event"]["Type"] for e in record["Events"]]
            if "Signaling" in types:
                signalled = record["Events"][types.index("Signaling")]
                break
        events.terminate()
        events.wait(timeout=10)
        assert signalled is not None
        assert signalled["Payload"]["Event"]["Details"] == {"signal": "SIGHUP"}

        user.yurt("job", "stop", "e2e")
        deadline = time.monotonic() + 20
        # The allocation reads complete as soon as its runner is (the client's live status is
        # laid over the server's copy); the job is dead once the server has that update too.
        while (user.json("alloc", "status", alloc_id)["ClientStatus"] != "complete"
               or user.json("job", "status", "e2e")["Job"]["Status"] != "dead"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        before = user.json("alloc", "status", alloc_id)
        # The client's updates did reach the server (so "unchanged" below means something).
        assert before["ModifyIndex"] > registered_index
        stop_agent(agent)

        agent = user.start_agent()
        time.sleep(1.5)  # several sync ticks: time for anything that would be resent
        after = user.json("alloc", "status", alloc_id)
        assert after["ClientStatus"] == "complete"
        assert after["DesiredStatus"] == "stop"
        assert after["ModifyIndex"] == before["ModifyIndex"]  # nothing resent to the server
        assert after["TaskStates"]["web"]["Events"] == before["TaskStates"]["web"]["Events"]
        jobs = user.json("job", "status")
        assert [(j["ID"], j["Stop"]) for j in jobs] == [("e2e", True)]
        missing = user.yurt("alloc", "status", "ffffffff", check=False)
        assert missing.returncode == 1
        assert "No allocation(s) with prefix or id \"ffffffff\" found" in missing.stderr
    finally:
        if agent.poll() is None:
            # A failure above may leave the task running, and an agent's stop leaves its
            # tasks running (for the next start): stop the job first, so none outlives us.
            with contextlib.suppress(Exception):  # the test's own failure is what to report
                user.yurt("job", "stop", "-yes", "e2e", check=False)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and any(
                        a["ClientStatus"] == "running"
                        for a in user.json("job", "status", "e2e").get("Allocations") or []):
                    time.sleep(0.1)
            stop_agent(agent)


def test_node_status_shows_drivers_and_devices(tmp_path: Path) -> None:
    user = User(tmp_path)
    agent = subprocess.Popen([YURT, "agent", "--data-dir", str(user.data), "--port",
                              str(user.port), "--fake-device", "nvidia/gpu/T4=GPU-0,GPU-1"],
                             stderr=subprocess.PIPE, text=True)
    try:
        assert agent.stderr is not None
        assert "listening on" in agent.stderr.readline()
        human = user.yurt("node", "status", "-self").stdout
        assert "raw_exec" in human
        assert "nvidia/gpu/T4" in human
        assert "2/2" in human  # healthy / instances
        node = user.json("node", "status", "-self")
        # How many tasks the open-file limit allows, from the node's attributes.
        max_tasks = node["Attributes"]["yurt.max_tasks"]
        assert int(max_tasks) > 0
        assert f"\nTasks           = up to {max_tasks} (open-file limit" in human
        assert node["Drivers"]["mock_driver"]["Healthy"] is True
        (group,) = node["NodeResources"]["Devices"]
        assert [i["ID"] for i in group["Instances"]] == ["GPU-0", "GPU-1"]
        bad = user.yurt("agent", "--fake-device", "nonsense", check=False)
        assert bad.returncode == 2
    finally:
        stop_agent(agent)

"""An exec session does not outlive its agent, even one killed with -9 (layer 3), while the
task it ran beside does, as every task does; the agent that re-attaches execs in it again."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.proc_support import wait_for
from tests.test_agent_e2e import JOB, YURT, User, stop_agent
from tests.test_restart_e2e import alive
from tests.token_support import AUTH
from yurt.runtime.lib.procfs import stat_fields

pytestmark = pytest.mark.slow


def parent(pid: int) -> int | None:
    fields = stat_fields(pid)
    return None if fields is None else int(fields[1])


def test_exec_is_killed_with_its_agent(tmp_path: Path) -> None:
    user = User(tmp_path)
    job_file = tmp_path / "e2e.nomad.hcl"
    job_file.write_text(JOB)
    agent = user.start_agent()
    try:
        user.yurt("job", "run", str(job_file))  # returns once placed, as Nomad's
        wait_for(lambda: user.json("job", "status", "e2e")["Allocations"][0]["ClientStatus"]
                 == "running")
        (alloc,) = user.json("job", "status", "e2e")["Allocations"]
        session = subprocess.Popen(
            [YURT, "alloc", "exec", "-i=false", alloc["ID"], "/bin/sh", "-c",
             "echo $$; exec sleep 1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=user.env)
        assert session.stdout is not None
        command = int(session.stdout.readline())
        assert alive(command)
        stats_url = f"{user.env['YURT_ADDR']}/v1/client/allocation/{alloc['ID']}/stats"
        request = urllib.request.Request(stats_url, headers=AUTH)
        with urllib.request.urlopen(request, timeout=30) as response:
            pids = set(map(int, json.load(response)["Tasks"]["web"]["Pids"]))
        # The task's process tree (its loop's short-lived `sleep`s too): the task is its root.
        (task,) = (p for p in pids if parent(p) not in (*pids, None))  # None: a sleep gone
        agent.kill()
        agent.wait(timeout=30)
        wait_for(lambda: not alive(command))
        assert session.wait(timeout=30) == 1  # the CLI reports the lost connection
        assert alive(task)

        # The agent that re-attaches to the task execs in it as before: the task's
        # environment is rebuilt, its cgroup found again from the handle.
        agent = user.start_agent()
        again = user.yurt("alloc", "exec", alloc["ID"], "/bin/sh", "-c",
                          "echo $NOMAD_ALLOC_ID; cat /proc/self/cgroup")
        alloc_id, cgroup = again.stdout.split("\n", 1)
        assert alloc_id == alloc["ID"]
        assert cgroup == Path(f"/proc/{task}/cgroup").read_text()
    finally:
        if agent.poll() is not None:  # again, to stop the job: its task outlives the agent
            agent = user.start_agent()
        user.yurt("job", "stop", "e2e", check=False)
        stop_agent(agent)

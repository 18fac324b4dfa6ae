"""docker tasks survive `kill -9` of their agent (layer 3: real `yurt agent` processes, a real
dockerd, the real clock): the agent that starts next re-attaches to the same container, one
copy, whose output keeps reaching `yurt alloc logs`; a container that exited while no agent
ran reports its real exit code; `job stop` stops the container and removes it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.docker_support import IMAGE, DockerDaemon
from tests.proc_support import wait_for
from tests.test_agent_e2e import User
from tests.test_exec_reattach_e2e import start_agent
from yurt.runtime.client.drivers.docker.create import LABEL_ALLOC_ID, LABEL_ALLOC_ROOT
from yurt.runtime.client.drivers.rawexec import CRASH_AFTER_SPAWN

pytestmark = pytest.mark.slow


def kill_9(agent: subprocess.Popen[str]) -> None:
    agent.send_signal(signal.SIGKILL)
    agent.wait(timeout=30)


def job_file(tmp_path: Path, job_id: str, script: str, job_type: str = "service") -> Path:
    path = tmp_path / f"{job_id}.nomad.hcl"
    path.write_text(f'''job "{job_id}" {{
  type = "{job_type}"
  group "g" {{
    restart {{
      attempts = 0
      mode = "fail"
    }}
    task "t" {{
      driver = "docker"
      kill_timeout = "2s"
      config {{
        image = "{IMAGE}"
        command = "/bin/sh"
        args = ["-c", {script!r}]
      }}
    }}
  }}
}}
'''.replace("'", '"'))
    return path


def status(user: User, job_id: str) -> str:
    allocs = user.json("job", "status", job_id)["Allocations"]
    return str(allocs[0]["ClientStatus"]) if allocs else ""


def test_a_container_survives_kill_9_and_is_reattached_once(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    user = User(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(f'[drivers.config.docker]\nendpoint = "{dockerd.host}"\n')
    job = job_file(tmp_path, "web", "i=0; while true; do echo line-$i; i=$((i+1)); "
                                    "sleep 0.2; done")
    agent = start_agent(user, config)
    try:
        user.yurt("job", "run", str(job))
        wait_for(lambda: status(user, "web") == "running")
        (alloc,) = user.json("job", "status", "web")["Allocations"]
        mine = f"label={LABEL_ALLOC_ID}={alloc['ID']}"
        (container,) = dockerd.containers(mine, "status=running")
        kill_9(agent)
        assert dockerd.containers(mine, "status=running") == [container]
        agent = start_agent(user, config)
        wait_for(lambda: status(user, "web") == "running")
        restarts = user.json("alloc", "status", alloc["ID"])["TaskStates"]["t"]["Restarts"]
        assert (dockerd.containers(mine), restarts) == ([container], 0)
        # Output written while no agent ran, and after, is in the logs, in order.
        wait_for(lambda: "line-40" in user.yurt("alloc", "logs", alloc["ID"], "t").stdout,
                 timeout=60)
        lines = user.yurt("alloc", "logs", alloc["ID"], "t").stdout.split()
        numbers = [int(x.removeprefix("line-")) for x in lines]
        assert numbers[:41] == list(range(41)), lines
        user.yurt("job", "stop", "web")
        wait_for(lambda: status(user, "web") == "complete")
        wait_for(lambda: dockerd.containers(mine) == [])
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)


def test_a_container_that_exited_meanwhile_reports_its_real_exit_code(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    user = User(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(f'[drivers.config.docker]\nendpoint = "{dockerd.host}"\n')
    # It exits with 5 once told to, through a file in its task dir: after the agent died.
    job = job_file(tmp_path, "short", "while [ ! -e /local/go ]; do sleep 0.1; done; exit 5",
                   job_type="batch")
    agent = start_agent(user, config)
    try:
        user.yurt("job", "run", str(job))
        wait_for(lambda: status(user, "short") == "running")
        (alloc,) = user.json("job", "status", "short")["Allocations"]
        mine = f"label={LABEL_ALLOC_ID}={alloc['ID']}"
        (container,) = dockerd.containers(mine, "status=running")
        kill_9(agent)
        (user.data / "alloc" / alloc["ID"] / "t" / "local" / "go").touch()
        assert dockerd.cli("wait", container).stdout.strip() == "5"
        agent = start_agent(user, config)
        wait_for(lambda: status(user, "short") == "failed")
        state = user.json("alloc", "status", alloc["ID"])["TaskStates"]["t"]
        terminated = [e for e in state["Events"] if e["Type"] == "Terminated"]
        assert terminated[-1]["Details"]["exit_code"] == "5", state["Events"]
        assert state["Restarts"] == 0
        wait_for(lambda: dockerd.containers(mine) == [])  # collected with its task
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)


def test_a_crash_between_start_and_handle_leaves_one_container(
        dockerd: DockerDaemon, tmp_path: Path) -> None:
    """The agent SIGKILLs itself right after the container started, before the handle is
    persisted (CRASH_AFTER_SPAWN): the next agent has no handle for that container and must
    remove it, so one container runs for the task, and none once the job is stopped."""
    user = User(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(f'[drivers.config.docker]\nendpoint = "{dockerd.host}"\n')
    job = job_file(tmp_path, "crashy", "while true; do sleep 0.2; done")
    crashing = start_agent(user, config, {**os.environ, CRASH_AFTER_SPAWN: "t"})
    agent: subprocess.Popen[str] | None = None
    try:
        user.yurt("job", "run", "-detach", str(job))
        assert crashing.wait(timeout=60) == -signal.SIGKILL
        (first,) = dockerd.containers(f"label={LABEL_ALLOC_ROOT}={user.data / 'alloc'}")
        agent = start_agent(user, config)
        wait_for(lambda: status(user, "crashy") == "running", timeout=60)
        (alloc,) = user.json("job", "status", "crashy")["Allocations"]
        mine = f"label={LABEL_ALLOC_ID}={alloc['ID']}"
        wait_for(lambda: len(dockerd.containers(mine)) == 1)
        assert dockerd.containers(mine) != [first]  # the unaccounted one is gone
        user.yurt("job", "stop", "crashy")
        wait_for(lambda: dockerd.containers(mine) == [])
    finally:
        for process in (crashing, agent):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)

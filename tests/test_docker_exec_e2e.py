"""`yurt alloc exec` into a docker task through a real agent (layer 2: the agent in this
process, the `yurt` CLI as a real process, a real dockerd): stdin in, both streams out, the
task's environment, the exit code."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from tests.agent_support import run_until, running_agent, stop_job
from tests.cli_proc_support import YURT
from tests.docker_support import IMAGE, DockerDaemon

TIMEOUT = 90


async def test_alloc_exec_into_a_container(dockerd: DockerDaemon, tmp_path: Path) -> None:
    job = {"Job": {"ID": "web", "Type": "service", "TaskGroups": [{
        "Name": "g", "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "Tasks": [{"Name": "t", "Driver": "docker", "KillTimeout": 1_000_000_000,
                   "Env": {"GREETING": "hello from the task"},
                   "Config": {"image": IMAGE, "command": "sleep", "args": ["600"]},
                   "Resources": {"CPU": 100, "MemoryMB": 32}}]}]}}
    with trio.fail_after(TIMEOUT):
        async with running_agent(tmp_path / "data",
                                 driver_config={"docker": {"endpoint": dockerd.host}}) as run:
            alloc = await run_until(run.client, job, "running")
            done = await trio.run_process(
                [YURT, "alloc", "exec", "-i", "-t=false", alloc["ID"], "sh", "-c",
                 'cat; echo "$GREETING"; echo oops >&2; exit 7'],
                stdin=b"line one\nline two\n", capture_stdout=True, capture_stderr=True,
                check=False, env={**os.environ, "YURT_ADDR": run.address})
            await stop_job(run.client, "web")
    assert done.returncode == 7, done.stderr
    assert done.stdout == b"line one\nline two\nhello from the task\n"
    assert b"oops" in done.stderr

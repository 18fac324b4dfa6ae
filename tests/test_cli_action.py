"""Job actions (Nomad 1.7) end to end: a task's `action` blocks listed by
/v1/job/:id/actions, and `yurt action` running one in the task over /v1/job/:id/action, the
exec session (layer 2, the installed CLI against a running agent); its flag parsing (layer 0).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import Running, raw_job, running_agent, wait_status
from tests.cli_proc_support import YURT
from yurt.runtime.cli.action import ActionFlags, parse_flags
from yurt.runtime.cli.exec import UsageError


def test_flags_are_nomads() -> None:
    assert parse_flags(["-job", "web", "-alloc=ab", "-task", "t", "hello"]) == (
        ActionFlags(job="web", alloc="ab", task="t"), ["hello"])
    assert parse_flags(["-job=web", "-group", "g", "-i=false", "-e", "none", "x"]) == (
        ActionFlags(job="web", group="g", stdin=False, escape=""), ["x"])
    with pytest.raises(UsageError, match="not defined: -command"):
        parse_flags(["-command", "x"])


async def yurt_action(a: Running, *args: str) -> Any:
    return await trio.run_process([YURT, "action", *args], capture_stdout=True,
                                  capture_stderr=True, check=False,
                                  env={**os.environ, "YURT_ADDR": a.address})


@pytest.mark.slow
async def test_an_action_runs_in_its_task(tmp_path: Path) -> None:
    body = raw_job("web", "exec sleep 1000")
    task = body["Job"]["TaskGroups"][0]["Tasks"][0]
    task["Actions"] = [
        {"Name": "hello", "Command": "/bin/sh",
         "Args": ["-c", "echo hello from $NOMAD_TASK_NAME; exit 3"]},
        {"Name": "pwd", "Command": "/bin/pwd"}]
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=body)).status_code == 200
            alloc_id = str((await wait_status(a.client, "web", "running"))["ID"])
            listed = (await a.client.get("/v1/job/web/actions")).json()
            assert [(x["Name"], x["TaskName"], x["TaskGroupName"]) for x in listed] == [
                ("hello", "t", "g"), ("pwd", "t", "g")]

            out = await yurt_action(a, "-job", "web", "-alloc", alloc_id[:8], "-i=false",
                                    "hello")
            assert (out.returncode, out.stdout) == (3, b"hello from t\n")
            picked = await yurt_action(a, "-job", "web", "-group", "g", "-task", "t",
                                       "-i=false", "pwd")
            assert picked.returncode == 0
            assert picked.stdout.decode().strip().endswith(f"{alloc_id}/t")

            missing = await yurt_action(a, "-job", "web", "-alloc", alloc_id, "-i=false",
                                        "nope")
            assert missing.returncode == 1
            assert b"failed to exec into task: action nope not found in task t" in (
                missing.stderr)
            no_group = await yurt_action(a, "-job", "web", "hello")
            assert no_group.returncode == 2
            assert b"A group name is required if no allocation is provided" in no_group.stderr
            no_name = await yurt_action(a, "-job", "web")
            assert (no_name.returncode, no_name.stderr) == (
                2, b"yurt: An action name is required\n")

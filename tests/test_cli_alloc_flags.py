"""The alloc verbs' flags as Nomad's command/alloc_*.go define them, against an agent on a real
socket (layer 2): `alloc stop -detach -no-shutdown-delay -verbose` (the client skips the
task's `shutdown_delay`, with Nomad's "Skipping shutdown delay" event), `alloc restart|signal
-task -verbose`, `alloc logs -stdout -verbose`, `alloc fs|exec -job -group`; plus the pure
task check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import mock_job, running_agent, wait_status, yurt_cli
from yurt.runtime.cli.alloc_verbs import missing_task_text
from yurt.runtime.cli.exec import UsageError, parse_flags
from yurt.runtime.cli.logs import LogsError, request

DELAY = 60 * 10**9  # far beyond the test's bound: only a skipped delay ends the task in time


def two_groups(delay: int = 0) -> dict[str, Any]:
    doc = mock_job("web", 1)
    group = doc["Job"]["TaskGroups"][0]
    group["Tasks"][0]["ShutdownDelay"] = delay
    other = {**group, "Name": "other",
             "Tasks": [{**group["Tasks"][0], "Name": "o", "ShutdownDelay": 0}]}
    doc["Job"]["TaskGroups"].append(other)
    return doc


async def allocs_of(a: Any, job: str) -> list[dict[str, Any]]:
    return (await a.client.get(f"/v1/job/{job}/allocations")).json()  # type: ignore[no-any-return]


async def test_alloc_stop_no_shutdown_delay_skips_the_tasks_delay(tmp_path: Path) -> None:
    with trio.fail_after(45):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=two_groups(DELAY))).status_code == 200
            await wait_status(a.client, "web", "running")
            first = next(x for x in await allocs_of(a, "web") if x["TaskGroup"] == "g")
            out = await yurt_cli(a.address, "alloc", "stop", "-detach", "-no-shutdown-delay",
                                 first["ID"][:8])
            assert out.exit_code == 0, out.output
            eval_id = out.output.strip()
            assert len(eval_id) == 36  # Nomad's -detach: the evaluation's ID alone
            ev = (await a.client.get(f"/v1/evaluation/{eval_id}")).json()
            assert ev["TriggeredBy"] == "alloc-stop"
            while True:  # the task ends long before its 60 s delay would
                stopped = (await a.client.get(f"/v1/allocation/{first['ID']}")).json()
                if stopped["ClientStatus"] == "complete":
                    break
                await trio.sleep(0.05)
            assert stopped["DesiredTransition"]["NoShutdownDelay"] is True
            types = [e["Type"] for e in stopped["TaskStates"]["t"]["Events"]]
            assert "Skipping shutdown delay" in types, types
            assert "Waiting for shutdown delay" not in types
            bad = await yurt_cli(a.address, "alloc", "stop", "-nosuch", first["ID"])
            assert bad.exit_code == 2


async def test_alloc_stop_monitors_the_evaluation(tmp_path: Path) -> None:
    with trio.fail_after(45):
        async with running_agent(tmp_path) as a:
            doc = mock_job("b", 1)
            doc["Job"]["Type"] = "batch"
            assert (await a.client.post("/v1/jobs", json=doc)).status_code == 200
            alloc = await wait_status(a.client, "b", "running")
            out = await yurt_cli(a.address, "alloc", "stop", "-verbose", alloc["ID"])
            assert out.exit_code == 0, out.output
            lines = out.output.splitlines()
            assert lines[0].startswith("==> ")
            assert "Monitoring evaluation" in lines[0]
            eval_id = lines[0].split('"')[1]
            assert len(eval_id) == 36  # -verbose: whole IDs
            assert any('Evaluation triggered by job "b"' in x for x in lines), out.output
            assert f'Evaluation "{eval_id}" finished with status "complete"' in lines[-1]
            short = await yurt_cli(a.address, "alloc", "stop", alloc["ID"])
            assert short.exit_code == 0, short.output
            assert len(short.output.splitlines()[0].split('"')[1]) == 8


async def test_restart_signal_logs_fs_exec_flags(tmp_path: Path) -> None:
    with trio.fail_after(45):
        async with running_agent(tmp_path) as a:
            assert (await a.client.post("/v1/jobs", json=two_groups())).status_code == 200
            await wait_status(a.client, "web", "running")
            allocs = await allocs_of(a, "web")
            g = next(x for x in allocs if x["TaskGroup"] == "g")
            # -task wins over the argument; an unknown task is Nomad's text, exit 1.
            out = await yurt_cli(a.address, "alloc", "restart", "-task", "t", g["ID"], "nosuch")
            assert out.exit_code == 0, out.output
            out = await yurt_cli(a.address, "alloc", "restart", "-task", "nosuch", g["ID"])
            assert out.exit_code == 1
            assert "Could not find task named: nosuch, found:\nt" in out.output
            out = await yurt_cli(a.address, "alloc", "restart", "--all-tasks", "-task", "t",
                                 g["ID"])
            assert out.exit_code == 2
            assert "-all-tasks option is not allowed" in out.output
            out = await yurt_cli(a.address, "alloc", "signal", "-s", "SIGHUP", "-task", "t",
                                 g["ID"])
            assert out.exit_code == 0, out.output
            assert out.output.strip() == f"Sent SIGHUP to allocation {g['ID'][:8]} task t"
            out = await yurt_cli(a.address, "alloc", "signal", "-verbose", "-task", "t",
                                 g["ID"])
            assert g["ID"] in out.output
            # An ambiguous prefix lists whole IDs with -verbose.
            common = next((n for n in range(8, 0, -1) if len({x["ID"][:n]
                                                              for x in allocs}) == 1), 0)
            if common >= 2:
                prefix = g["ID"][:common]
                out = await yurt_cli(a.address, "alloc", "restart", "-verbose", prefix)
                assert out.exit_code == 2
                assert g["ID"] in out.output
            out = await yurt_cli(a.address, "alloc", "logs", "-stdout", "-verbose", g["ID"])
            assert out.exit_code == 0, out.output
            out = await yurt_cli(a.address, "alloc", "logs", "-stdout", "--stderr", g["ID"])
            assert out.exit_code == 2
            assert "Unable to support both stdout and stderr" in out.output
            # -job -group: an allocation of that group.
            out = await yurt_cli(a.address, "alloc", "fs", "-job", "-group", "other", "web")
            assert out.exit_code == 0, out.output
            assert out.output.split()[:4] == ["Mode", "Size", "Modified", "Time"]
            assert "o/" in out.output.split()
            assert "t/" not in out.output.split()
            out = await yurt_cli(a.address, "alloc", "fs", "-job", "-group", "nosuch", "web")
            assert out.exit_code == 1
            assert 'task group "nosuch" doesn\'t exist or it has no allocations' in out.output
            out = await yurt_cli(a.address, "alloc", "fs", "-group", "g", g["ID"])
            assert out.exit_code == 2
            out = await yurt_cli(a.address, "alloc", "exec", "-job", "-group", "nosuch",
                                 "web", "true")
            assert out.exit_code == 1
            assert 'task group "nosuch"' in out.output


def test_task_check_and_exec_group_flag() -> None:
    alloc = {"TaskGroup": "g", "Job": {"TaskGroups": [
        {"Name": "g", "Tasks": [{"Name": "a"}, {"Name": "b"}]}]}}
    assert missing_task_text("a", alloc) is None
    assert missing_task_text("z", alloc) == "Could not find task named: z, found:\na\nb"
    assert missing_task_text("z", {"TaskGroup": "g"}) is None  # no job: the agent judges
    flags, rest = parse_flags(["-job", "-group=web", "j", "ls", "-group"])
    assert (flags.job, flags.group, rest) == (True, "web", ["j", "ls", "-group"])
    with pytest.raises(UsageError, match="only valid with -job"):
        parse_flags(["-group", "web", "alloc", "ls"])


def test_logs_stdout_flag() -> None:
    def make(**kw: Any) -> Any:
        base = {"follow": False, "stderr": False, "all_streams": False, "tail": False,
                "lines": None, "nbytes": None}
        return request(**{**base, **kw})

    assert make(stdout=True).streams == ("stdout",)
    assert make(stdout=True, follow=True).streams == ("stdout",)
    with pytest.raises(LogsError, match="Unable to support both stdout and stderr"):
        make(stdout=True, stderr=True)
    with pytest.raises(LogsError, match="--all includes stdout"):
        make(stdout=True, all_streams=True)

"""`yurt alloc exec` end to end: the installed CLI against a running agent (layer 2), with a
real pty for `-t`; and its Go-style flag parsing and task choice (layer 0)."""

from __future__ import annotations

import os
import re
import signal
import termios
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.agent_support import Running, raw_job, running_agent, wait_status
from tests.cli_proc_support import YURT
from tests.runtime_support import eventually
from yurt.runtime.cli.exec import ExecFlags, UsageError, choose_task, parse_flags
from yurt.runtime.client.drivers.execstream import set_window_size


def test_flags_are_parsed_as_go_parses_them() -> None:
    assert parse_flags(["-i=false", "--task", "web", "abc", "-t", "x"]) == (
        ExecFlags(stdin=False, task="web"), ["abc", "-t", "x"])
    assert parse_flags(["-t", "-task=db", "-job", "j", "sh"]) == (
        ExecFlags(tty=True, task="db", job=True), ["j", "sh"])
    assert parse_flags(["--", "-abc", "ls"]) == (ExecFlags(), ["-abc", "ls"])
    with pytest.raises(UsageError, match="not defined: -x"):
        parse_flags(["-x", "a"])
    with pytest.raises(UsageError, match="needs an argument"):
        parse_flags(["-task"])
    with pytest.raises(UsageError, match="invalid boolean"):
        parse_flags(["-t=maybe", "a"])
    assert parse_flags(["-e", "none", "a"])[0].escape == ""
    assert parse_flags(["-e=%", "a"])[0].escape == "%"
    with pytest.raises(UsageError, match="'none' or a single character"):
        parse_flags(["-e", "ab", "a"])


def test_the_task_is_the_only_one_or_named() -> None:
    alloc: dict[str, Any] = {"ID": "0123456789", "TaskGroup": "g", "Job": {"TaskGroups": [
        {"Name": "g", "Tasks": [{"Name": "web"}, {"Name": "db"}]}]}}
    assert choose_task(alloc, "db") == "db"
    with pytest.raises(UsageError, match=r'"01234567" is running the following tasks:'
                                         r"\n  \* web\n  \* db\n\nPlease specify the task."):
        choose_task(alloc, "")
    with pytest.raises(UsageError, match="Could not find task named: cache"):
        choose_task(alloc, "cache")
    alloc["Job"]["TaskGroups"][0]["Tasks"] = [{"Name": "web"}]
    assert choose_task(alloc, "") == "web"


async def yurt_exec(a: Running, *args: str, stdin: bytes = b"") -> Any:
    return await trio.run_process([YURT, "alloc", "exec", *args], stdin=stdin,
                                  capture_stdout=True, capture_stderr=True, check=False,
                                  env={**os.environ, "YURT_ADDR": a.address})


async def start_job(a: Running) -> str:
    assert (await a.client.post("/v1/jobs", json=raw_job("web", "exec sleep 1000"))
            ).status_code == 200
    return str((await wait_status(a.client, "web", "running"))["ID"])


@pytest.mark.slow
async def test_cli_exec_pipes_stdin_output_and_exit_code(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            alloc_id = await start_job(a)

            cat = await yurt_exec(a, alloc_id[:8], "cat", stdin=b"abc\n")
            assert (cat.returncode, cat.stdout, cat.stderr) == (0, b"abc\n", b"")

            both = await yurt_exec(a, "-i=false", "-task", "t", alloc_id, "/bin/sh", "-c",
                                   "echo out; echo err >&2; exit 7")
            assert (both.returncode, both.stdout, both.stderr) == (7, b"out\n", b"err\n")

            by_job = await yurt_exec(a, "-job", "web", "/bin/sh", "-c", "echo $NOMAD_JOB_ID")
            assert (by_job.returncode, by_job.stdout) == (0, b"web\n")

            unknown = await yurt_exec(a, "zzzz", "true")
            assert unknown.returncode == 1
            assert b'No allocation(s) with prefix or id "zzzz" found' in unknown.stderr
            no_task = await yurt_exec(a, "-task", "nope", alloc_id, "true")
            assert no_task.returncode == 2
            assert b"Could not find task named: nope" in no_task.stderr
            no_command = await yurt_exec(a, alloc_id)
            assert (no_command.returncode, no_command.stderr) == (
                2, b"yurt: A command is required\n")
            not_tty = await yurt_exec(a, "-t", alloc_id, "true")
            assert not_tty.returncode == 1
            assert b"not a terminal" in not_tty.stderr
            missing = await yurt_exec(a, alloc_id, "no-such-command-here")
            assert missing.returncode == 1
            assert b"failed to exec into task: " in missing.stderr
            assert b"no-such-command-here" in missing.stderr


@pytest.mark.slow
async def test_cli_exec_tty_raw_mode_and_window_size(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with running_agent(tmp_path) as a:
            alloc_id = await start_job(a)
            master, slave = os.openpty()
            set_window_size(slave, 20, 70)
            canonical = termios.tcgetattr(slave)
            script = "trap 'stty size' WINCH; read x; stty size; while :; do sleep 0.05; done"
            term = trio.lowlevel.FdStream(master)
            seen = bytearray()

            async def until(text: bytes) -> None:
                while text not in seen:
                    seen.extend(await term.receive_some(4096))

            async with trio.open_nursery() as nursery:
                process = await nursery.start(partial(
                    trio.run_process, [YURT, "alloc", "exec", "-t", alloc_id, "/bin/sh", "-c",
                                       script],
                    stdin=slave, stdout=slave, stderr=slave, check=False,
                    env={**os.environ, "YURT_ADDR": a.address}))
                await term.send_all(b"go\r")
                await until(b"20 70")
                set_window_size(term.fileno(), 30, 90)
                process.send_signal(signal.SIGWINCH)  # what the terminal's resize sends
                await until(b"30 90")
                # Raw mode: Ctrl-C reaches the remote command instead of stopping the CLI.
                await term.send_all(b"\x03")
                await process.wait()
            assert process.returncode == 130
            # The local terminal is as it was before.
            assert termios.tcgetattr(slave) == canonical

            # `~.` at the start of a line closes the session; the agent ends the command.
            seen.clear()
            async with trio.open_nursery() as nursery:
                process = await nursery.start(partial(
                    trio.run_process, [YURT, "alloc", "exec", "-t", alloc_id, "/bin/sh", "-c",
                                       "echo pid=$$; exec sleep 1000"],
                    stdin=slave, stdout=slave, stderr=slave, check=False,
                    env={**os.environ, "YURT_ADDR": a.address}))
                while (found := re.search(rb"pid=(\d+)\r\n", seen)) is None:
                    seen.extend(await term.receive_some(4096))
                remote = int(found.group(1))
                await term.send_all(b"\r~.")
                await process.wait()
            assert process.returncode == 1
            await until(b"Connection closed")
            assert termios.tcgetattr(slave) == canonical
            await eventually(lambda: not Path(f"/proc/{remote}").exists())
            os.close(slave)
            term.close()

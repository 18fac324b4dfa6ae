"""`alloc exec` over a real socket against real raw_exec allocations (layer 2): Nomad's
websocket frames, the task's environment, working directory and cgroup, stdin, stderr, exit
codes, a pty, the command killed with its session, and Nomad's errors as close frames."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest
import trio
from trio_websocket import open_websocket_url

from tests.agent_support import Running, raw_job, running_agent, wait_status
from tests.exec_support import collect, exec_url, run_exec, stdin
from tests.runtime_support import eventually
from yurt.runtime.client.drivers import execstream

pytestmark = pytest.mark.slow


def task_pid(a: Running, alloc_id: str) -> int:
    handle = a.agent.client.runners[alloc_id].task_runners["t"].handle
    assert handle is not None
    return int(handle.driver_state["pid"])


def environ(raw: bytes) -> dict[str, str]:
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def proc_file(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def exists(pid: int) -> bool:
    """Alive or a zombie: /proc/PID is gone only once the process is reaped."""
    return Path(f"/proc/{pid}").exists()


async def start_job(a: Running, job_id: str = "web") -> str:
    job = raw_job(job_id, "exec sleep 1000")
    job["Job"]["TaskGroups"][0]["Tasks"][0]["Env"] = {"MY_VAR": "from the job"}
    assert (await a.client.post("/v1/jobs", json=job)).status_code == 200
    return str((await wait_status(a.client, job_id, "running"))["ID"])


async def test_exec_env_cwd_cgroup_stdin_stderr_exit_code(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            alloc_id = await start_job(a)
            pid = task_pid(a, alloc_id)

            # A client that waits after the exit frame gets Nomad's normal close.
            env = await run_exec(a, alloc_id, ["cat", "/proc/self/environ"], wait_close=True)
            assert env.exit_code == 0
            assert env.close_code == 1000
            got, task_env = environ(env.data("stdout")), environ(
                proc_file(pid, "environ"))
            assert got["NOMAD_ALLOC_ID"] == alloc_id
            assert got["MY_VAR"] == "from the job"
            # The task's environment, variable for variable (the shell adds only PWD).
            assert {k: v for k, v in got.items() if k != "PWD"} == {
                k: v for k, v in task_env.items() if k != "PWD"}

            where = await run_exec(a, alloc_id, ["/bin/sh", "-c",
                                                 "pwd; cat /proc/self/cgroup; echo oops >&2; "
                                                 "exit 3"])
            cwd, cgroup = where.data("stdout").decode().split("\n", 1)
            assert cwd == os.readlink(f"/proc/{pid}/cwd")
            assert cwd == str(tmp_path / "alloc" / alloc_id / "t")
            assert cgroup == proc_file(pid, "cgroup").decode()
            assert where.data("stderr") == b"oops\n"
            assert where.exit_code == 3
            # Each stream's close, then the exit, then the close: Nomad's order.
            assert [next(iter(f)) for f in where.frames[-3:]] == ["stdout", "stderr", "exited"]
            assert where.frames[-3]["stdout"] == {"close": True}

            cat = await run_exec(a, alloc_id, ["cat"], send=[
                stdin(b"hello "), json.dumps({}), stdin(b"world\n"), stdin(close=True)])
            assert cat.data("stdout") == b"hello world\n"
            assert cat.exit_code == 0

            killed = await run_exec(a, alloc_id, ["/bin/sh", "-c", "kill -TERM $$"])
            assert killed.exit_code == 128 + 15


async def test_exec_tty_has_a_terminal_of_the_sent_size(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            alloc_id = await start_job(a)
            # The size is sent before the line the command waits for: frames are applied in
            # order, so `stty size` sees it.
            session = await run_exec(
                a, alloc_id, ["/bin/sh", "-c", "read x; tty; stty size; exit 4"], tty=True,
                send=[json.dumps({"tty_size": {"height": 33, "width": 101}}), stdin(b"go\n")])
            out = session.data("stdout").decode()
            assert "/dev/pts/" in out
            assert "33 101" in out
            assert session.exit_code == 4
            assert not session.data("stderr")  # one terminal: everything is stdout

            plain = await run_exec(a, alloc_id, ["/bin/sh", "-c", "tty; true"])
            assert plain.data("stdout") == b"not a tty\n"


async def test_closing_the_socket_kills_the_command(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            alloc_id = await start_job(a)
            params = {"task": "t", "command": json.dumps(
                ["/bin/sh", "-c", "sleep 1000 & echo $$ $!; wait"])}
            async with open_websocket_url(exec_url(a, alloc_id, params)) as ws:
                first = json.loads(await ws.get_message())
                pids = [int(p) for p in base64.b64decode(first["stdout"]["data"]).split()]
                assert len(pids) == 2
                assert all(exists(p) for p in pids)
            # The shell and its child are killed and reaped: gone from /proc, not zombies.
            await eventually(lambda: not any(exists(p) for p in pids))
            # The same for a command that floods its output while the client goes away.
            params["command"] = json.dumps(["/bin/sh", "-c", "echo $$; exec yes"])
            async with open_websocket_url(exec_url(a, alloc_id, params)) as ws:
                first = json.loads(await ws.get_message())
                flood = int(base64.b64decode(first["stdout"]["data"]).split(b"\n")[0])
                for _ in range(5):
                    await ws.get_message()
            await eventually(lambda: not exists(flood))
            # The task itself is untouched.
            assert exists(task_pid(a, alloc_id))


async def test_exec_errors_close_as_nomad_does(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            alloc_id = await start_job(a)

            unknown = await run_exec(a, "nope", ["true"])
            assert (unknown.close_code, unknown.close_reason) == (
                1008, 'Unknown allocation "nope"')
            assert unknown.frames == []
            no_task = await run_exec(a, alloc_id, ["true"], task="")
            assert (no_task.close_code, no_task.close_reason) == (1008, "must provide task name")
            bad_task = await run_exec(a, alloc_id, ["true"], task="x")
            assert (bad_task.close_code, bad_task.close_reason) == (
                1008, 'unknown task name "x"')
            empty = await run_exec(a, alloc_id, [])
            assert (empty.close_code, empty.close_reason) == (1008, "command is not present")
            missing = await run_exec(a, alloc_id, ["no-such-command-here"])
            assert missing.close_code == 1011
            assert missing.close_reason is not None
            assert "no-such-command-here" in missing.close_reason
            for params in ({"task": "t", "command": "[not json"},
                           {"task": "t", "command": '{"a": 1}'},
                           {"task": "t", "command": '["true"]', "tty": "maybe"}):
                async with open_websocket_url(exec_url(a, alloc_id, params)) as ws:
                    refused = await collect(ws)
                assert refused.close_code == 1008, params
            async with open_websocket_url(exec_url(a, alloc_id, {
                    "task": "t", "command": '["cat"]'})) as ws:
                await ws.send_message("{not json")
                garbled = await collect(ws)
            assert garbled.close_code == 1008
            assert garbled.close_reason is not None
            assert garbled.close_reason.startswith("invalid exec frame")

            # Nomad's optional handshake frame comes first when `ws_handshake=true`.
            shake = {"task": "t", "command": '["echo", "hi"]', "ws_handshake": "true"}
            async with open_websocket_url(exec_url(a, alloc_id, shake)) as ws:
                await ws.send_message(json.dumps({"version": 1, "auth_token": ""}))
                shaken = await collect(ws)
            assert (shaken.data("stdout"), shaken.exit_code) == (b"hi\n", 0)
            async with open_websocket_url(exec_url(a, alloc_id, shake)) as ws:
                await ws.send_message(json.dumps({"version": 2}))
                wrong = await collect(ws)
            assert (wrong.close_code, wrong.close_reason) == (
                1008, "unexpected handshake value: 2")

            # Without an upgrade: Nomad's websocket upgrader answers 400; other methods 405.
            path = f"/v1/client/allocation/{alloc_id}/exec"
            assert (await a.client.get(path)).status_code == 400
            assert (await a.client.post(path)).status_code == 405

            # The main task waits for a prestart task that never ends: not started yet.
            gated = raw_job("gated", "exec sleep 1000", extra_task={
                "Name": "init", "Driver": "raw_exec", "Lifecycle": {"Hook": "prestart"},
                "Config": {"command": "/bin/sh", "args": ["-c", "exec sleep 1000"]}})
            assert (await a.client.post("/v1/jobs", json=gated)).status_code == 200
            gated_id = (await wait_status(a.client, "gated", "running"))["ID"]
            waiting = await run_exec(a, gated_id, ["true"])
            assert (waiting.close_code, waiting.close_reason) == (
                1008, 'task "t" not started yet.')
            assert (await run_exec(a, gated_id, ["true"], task="init")).exit_code == 0

            batch = raw_job("b", "true", job_type="batch")
            assert (await a.client.post("/v1/jobs", json=batch)).status_code == 200
            done_id = (await wait_status(a.client, "b", "complete"))["ID"]
            done = await run_exec(a, done_id, ["true"])
            assert (done.close_code, done.close_reason) == (1008, 'task "t" is not running.')


async def test_exec_runs_as_the_task_user_and_ends_with_its_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pwd

    # Without the kill of the command's leftovers, the session would wait for this long.
    monkeypatch.setattr(execstream, "DRAIN_TIMEOUT", 3600.0)
    nobody = pwd.getpwnam("nobody")
    with trio.fail_after(60):
        async with running_agent(tmp_path) as a:
            job = raw_job("as-nobody", "exec sleep 1000")
            job["Job"]["TaskGroups"][0]["Tasks"][0]["User"] = "nobody"
            assert (await a.client.post("/v1/jobs", json=job)).status_code == 200
            alloc_id = str((await wait_status(a.client, "as-nobody", "running"))["ID"])
            who = await run_exec(a, alloc_id, ["/bin/sh", "-c", "id -u; echo $HOME $USER"])
            assert who.data("stdout").decode() == (
                f"{nobody.pw_uid}\n{nobody.pw_dir} nobody\n")

            # What the command leaves running in its group ends with it: the session does
            # not wait for it (its output pipe would stay open), and nothing is left.
            left = await run_exec(a, alloc_id, ["/bin/sh", "-c", "sleep 1000 & echo $!"])
            assert left.exit_code == 0
            await eventually(lambda: not exists(int(left.data("stdout"))))


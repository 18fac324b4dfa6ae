"""`alloc exec` into a container against a real dockerd: stdin through `cat`, a tty with its
window size, the container's environment, exit codes, and a cancelled session's command
killed. Real clock, absolute deadlines."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import pytest
import trio

from tests.docker_support import APPLETS, IMAGE, DockerDaemon, busybox_rootfs_tar
from yurt.runtime.client.drivers.docker.engine import DockerEngine, DockerError
from yurt.runtime.client.drivers.docker.execsession import _kill_tree, exec_in_container
from yurt.runtime.client.drivers.protocol import (
    ExecInput,
    ExecOutput,
    ExecRequest,
    ExecResize,
    ExecStdin,
    TaskConfig,
)
from yurt.runtime.lib import procfs

LABEL = "yurt-test=docker-exec"
#: The test image with `stty`, to read a tty's size.
TTY_IMAGE = "yurt-test/busybox-stty:1"


@pytest.fixture
def container(dockerd: DockerDaemon) -> Iterator[str]:
    """A running container with an env var the task would have."""
    if dockerd.cli("image", "inspect", TTY_IMAGE, check=False).returncode != 0:
        dockerd.cli("import", "-", TTY_IMAGE,
                    stdin=busybox_rootfs_tar((*APPLETS, "stty")))
    cid = dockerd.cli("run", "-d", "--label", LABEL, "--network", "none",
                      "-e", "TASK_VAR=from-the-task", TTY_IMAGE, "sleep", "600").stdout.strip()
    yield cid
    dockerd.cli("rm", "-f", cid)


def request(*command: str, tty: bool = False) -> ExecRequest:
    return ExecRequest(command=list(command), tty=tty,
                       task=TaskConfig(id="a/web/1", name="web", alloc_id="a", job_id="j",
                                       task_group="g", driver_config={"image": IMAGE}))


async def session(engine: DockerEngine, cid: str, req: ExecRequest,
                  inputs: list[ExecInput]) -> tuple[int, dict[str, bytes], list[str]]:
    """Run one exec with `inputs` sent in order; its code, its output per stream and the
    order of the closes."""
    in_send, in_recv = trio.open_memory_channel[ExecInput](len(inputs) + 1)
    out_send, out_recv = trio.open_memory_channel[ExecOutput](1000)
    for item in inputs:
        in_send.send_nowait(item)
    code = await exec_in_container(engine, cid, req, in_recv, out_send)
    out_send.close()
    got: dict[str, bytes] = {"stdout": b"", "stderr": b""}
    closes = []
    async for out in out_recv:
        assert out.stream not in closes, "data after its stream's close"
        got[out.stream] += out.data
        if out.close:
            closes.append(out.stream)
    return code, got, closes


async def test_stdin_reaches_cat_and_both_streams_come_back(
        dockerd: DockerDaemon, container: str) -> None:
    engine = DockerEngine(dockerd.host)
    with trio.fail_after(30):
        code, got, closes = await session(
            engine, container,
            request("sh", "-c", "cat; echo to-err >&2; echo $TASK_VAR; exit 3"),
            [ExecStdin(b"hello\n"), ExecStdin(b"world\n"), ExecStdin(close=True)])
    await engine.aclose()
    assert code == 3
    assert got == {"stdout": b"hello\nworld\nfrom-the-task\n", "stderr": b"to-err\n"}
    assert closes == ["stdout", "stderr"]


async def test_a_tty_session_has_a_terminal_of_the_clients_size(
        dockerd: DockerDaemon, container: str) -> None:
    engine = DockerEngine(dockerd.host)
    with trio.fail_after(30):
        code, got, closes = await session(
            engine, container, request("sh", "-c", "read x; tty; stty size", tty=True),
            [ExecResize(height=31, width=101), ExecStdin(b"go\n")])
    await engine.aclose()
    assert code == 0
    lines = got["stdout"].decode().split("\r\n")
    assert lines[:3] == ["go", "/dev/pts/0", "31 101"], lines
    assert got["stderr"] == b""
    assert closes == ["stdout"]


async def test_exit_codes_and_a_killed_command(dockerd: DockerDaemon, container: str) -> None:
    engine = DockerEngine(dockerd.host)
    with trio.fail_after(30):
        assert (await session(engine, container, request("true"), []))[0] == 0
        assert (await session(engine, container, request("false"), []))[0] == 1
        assert (await session(engine, container, request("sh", "-c", "kill -9 $$"),
                              []))[0] == 137
        code, got, _ = await session(engine, container, request("no-such-command"), [])
        assert code in (126, 127)
        assert b"no-such-command" in got["stdout"] + got["stderr"]
    await engine.aclose()


async def test_a_cancelled_session_kills_its_command(
        dockerd: DockerDaemon, container: str) -> None:
    engine = DockerEngine(dockerd.host)
    _in_send, in_recv = trio.open_memory_channel[ExecInput](1)
    out_send, out_recv = trio.open_memory_channel[ExecOutput](100)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(exec_in_container, engine, container,
                               request("sh", "-c",
                                       "sleep 556 & echo started; exec sleep 555"),
                               in_recv, out_send)
            first = await out_recv.receive()
            assert first.data == b"started\n"
            nursery.cancel_scope.cancel()
        top = dockerd.cli("top", container).stdout
    await engine.aclose()
    assert "sleep 555" not in top, top
    assert "sleep 556" not in top, top  # what it started goes with it
    assert "sleep 600" in top  # the task itself is untouched


def _alive(pid: int) -> bool:
    fields = procfs.stat_fields(pid)
    return fields is not None and fields[0] not in (b"Z", b"X")


async def test_the_kill_never_signals_a_pid_that_names_another_process() -> None:
    """execsession.py `_kill_tree`: a pid whose start time is not the one noted (reused) is
    left alone with its children; with the noted start time, the tree is killed."""
    with trio.fail_after(30):
        process = await trio.lowlevel.open_process(
            ["sh", "-c", "sleep 300 & echo $!; exec sleep 301"], stdout=subprocess.PIPE)
        try:
            assert process.stdout is not None
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive_some(64)
            child = int(line)
            started = procfs.start_time(process.pid)
            assert started is not None
            await trio.to_thread.run_sync(_kill_tree, process.pid, started + 1)
            assert _alive(process.pid)
            assert _alive(child)
            child_fd = os.pidfd_open(child)  # readable once the child has exited
            try:
                await trio.to_thread.run_sync(_kill_tree, process.pid, started)
                assert await process.wait() == -signal.SIGKILL
                await trio.lowlevel.wait_readable(child_fd)
            finally:
                os.close(child_fd)
        finally:
            process.kill()
            await process.wait()


async def test_a_stopped_container_refuses_the_exec(dockerd: DockerDaemon,
                                                     container: str) -> None:
    dockerd.cli("kill", container)
    engine = DockerEngine(dockerd.host)
    with trio.fail_after(30), pytest.raises(DockerError, match="is not running"):
        await session(engine, container, request("true"), [])
    await engine.aclose()

"""The docker log copier against a real dockerd: a container's two streams into the task's
log FIFOs, drained by a real `LogPump`, losing nothing when the pump (the agent's side) or the
copier itself is killed mid-stream. Real clock, absolute deadlines."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from tests.docker_support import IMAGE, DockerDaemon, import_image, start_dockerd, stop_dockerd
from tests.runtime_support import eventually
from yurt.runtime.client.drivers.docker import logcopier
from yurt.runtime.client.drivers.docker.engine import DockerError
from yurt.runtime.client.drivers.docker.logs import (
    copier_alive,
    ensure_log_copier,
    start_log_copier,
    stop_log_copier,
)
from yurt.runtime.client.logs.pump import LogPump, fifo_path, log_base, open_fifo

LABEL = "yurt-test=docker-logs"
TASK = "web"


def lines_script(count: int, pause: str) -> str:
    """A shell loop writing `out N` and `err N`, N = 0 … count-1."""
    return (f"i=0; while [ $i -lt {count} ]; do echo out $i; echo err $i >&2; "
            f"i=$((i+1)); sleep {pause}; done")


def expected(stream: str, count: int) -> list[str]:
    return [f"{'out' if stream == 'stdout' else 'err'} {i}" for i in range(count)]


class Layout:
    """An allocation's shared dir with its logs dir, as client/allocdir.py lays them out."""

    def __init__(self, root: Path) -> None:
        self.logs = root / "alloc" / "logs"
        self.logs.mkdir(parents=True)
        self.state = root / "task" / ".docker" / "1"
        self.fifos = {s: fifo_path(self.logs, TASK, s) for s in ("stdout", "stderr")}
        for s in self.fifos:
            os.mkfifo(self.fifos[s], 0o600)

    def read_bytes(self, stream: str) -> bytes:
        base = log_base(self.logs, TASK, stream)
        files = sorted(self.logs.glob(f"{base.name}.*"), key=lambda p: int(p.suffix[1:]))
        return b"".join(p.read_bytes() for p in files)

    def read(self, stream: str) -> list[str]:
        return self.read_bytes(stream).decode().splitlines()


@contextlib.asynccontextmanager
async def pumps(layout: Layout) -> AsyncIterator[None]:
    """Both streams' pumps and keepers, as a task runner holds them; leaving the block is the
    agent going away (the pumps cancelled, their fds closed)."""
    keepers = []
    async with trio.open_nursery() as nursery:
        for stream in ("stdout", "stderr"):
            read_fd, keep_fd = open_fifo(layout.fifos[stream])
            keepers.append(keep_fd)
            pump = LogPump(read_fd, log_base(layout.logs, TASK, stream),
                           file_size=10 * 1024 * 1024, max_files=3)
            await nursery.start(pump.run)
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()
            for fd in keepers:
                os.close(fd)


async def drain_to_end(layout: Layout) -> None:
    """A pump for each stream, run until every writer is gone (end of file)."""
    async with trio.open_nursery() as nursery:
        for stream in ("stdout", "stderr"):
            read_fd, keep_fd = open_fifo(layout.fifos[stream])
            os.close(keep_fd)
            nursery.start_soon(LogPump(read_fd, log_base(layout.logs, TASK, stream),
                                       file_size=10 * 1024 * 1024, max_files=3).run)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            print("log copier RSS:", line)
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def run_container(dockerd: DockerDaemon, script: str, *extra: str) -> str:
    return dockerd.cli("run", "-d", "--label", LABEL, "--network", "none", *extra,
                       IMAGE, "sh", "-c", script).stdout.strip()


@pytest.fixture
def containers(dockerd: DockerDaemon) -> Iterator[None]:
    yield
    ids = dockerd.containers(f"label={LABEL}")
    if ids:
        dockerd.cli("rm", "-f", *ids)


async def wait_gone(identity: dict[str, object]) -> None:
    """Until the copier ends by itself (with its container's stream); then a stop is a
    no-op."""
    await eventually(lambda: not copier_alive(identity))
    await stop_log_copier(identity, drain=True)


async def test_every_line_once_in_order_across_a_pump_restart(
        dockerd: DockerDaemon, containers: None, tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    count = 150
    cid = run_container(dockerd, f"sleep 0.3; {lines_script(count, '0.01')}")
    with trio.fail_after(60):
        async with pumps(layout):
            identity = await start_log_copier(str(dockerd.socket), cid,
                                              str(layout.fifos["stdout"]),
                                              str(layout.fifos["stderr"]), layout.state)
            await eventually(lambda: len(layout.read("stdout")) >= 20)
            # Small, as a shim should be (about 10 MiB: an interpreter without site).
            assert rss_kib(int(identity["pid"])) < 16 * 1024
        # The agent is gone: the container keeps writing, the copier into the pipes.
        await trio.sleep(0.5)
        async with pumps(layout):
            await eventually(lambda: len(layout.read("stderr")) >= count // 2)
            assert copier_alive(identity)
            await wait_gone(identity)
        await drain_to_end(layout)
    assert layout.read("stdout") == expected("stdout", count)
    assert layout.read("stderr") == expected("stderr", count)


async def test_output_left_in_the_pipe_when_no_agent_runs_is_spilled(
        dockerd: DockerDaemon, containers: None, tmp_path: Path) -> None:
    """The container ends, and the copier with it, while no pump runs: what waits in the
    pipes goes to the spill files, which the next pump writes first."""
    layout = Layout(tmp_path)
    count = 100
    cid = run_container(dockerd, f"sleep 0.5; {lines_script(count, '0')}")
    with trio.fail_after(60):
        async with pumps(layout):
            identity = await start_log_copier(str(dockerd.socket), cid,
                                              str(layout.fifos["stdout"]),
                                              str(layout.fifos["stderr"]), layout.state)
        assert layout.read("stdout") == []
        await wait_gone(identity)  # it ends by itself, with its container
        assert (layout.logs.parent / f".{TASK}.stdout.spill").exists()
        await drain_to_end(layout)
    assert layout.read("stdout") == expected("stdout", count)
    assert layout.read("stderr") == expected("stderr", count)
    assert not (layout.logs.parent / f".{TASK}.stdout.spill").exists()


def dedupe(lines: list[str]) -> list[str]:
    """`lines` with every repeat of a line dropped (the lines are unique by design)."""
    out: list[str] = []
    for line in lines:
        if line not in out[-50:]:
            out.append(line)
    return out


async def test_a_killed_copier_is_replaced_without_losing_a_line(
        dockerd: DockerDaemon, containers: None, tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    count = 300
    cid = run_container(dockerd, f"sleep 0.3; {lines_script(count, '0.005')}")
    args = (str(dockerd.socket), cid, str(layout.fifos["stdout"]),
            str(layout.fifos["stderr"]), layout.state)
    with trio.fail_after(60):
        async with pumps(layout):
            first = await start_log_copier(*args)
            assert await ensure_log_copier(*args, first) == first  # alive: kept
            assert await start_log_copier(*args) == first  # one copier per start
            await eventually(lambda: len(layout.read("stdout")) >= 50)
            os.kill(int(first["pid"]), signal.SIGKILL)
            await eventually(lambda: not copier_alive(first))
            second = await ensure_log_copier(*args, first)
            assert second["pid"] != first["pid"]
            await wait_gone(second)
        await drain_to_end(layout)
    for stream in ("stdout", "stderr"):
        lines = layout.read(stream)
        assert dedupe(lines) == expected(stream, count)
        # At most the run of lines the killed copier wrote but had not recorded.
        assert len(lines) - count <= 2, lines
        print(stream, "repeated:", len(lines) - count)


@pytest.mark.parametrize("logging", [
    ("--log-driver", "none"),
    # Docker 20.10 would read a syslog container's logs from its local cache: not without it.
    ("--log-driver", "syslog", "--log-opt", "syslog-address=udp://127.0.0.1:9",
     "--log-opt", "cache-disabled=true")])
async def test_a_log_stream_docker_cannot_read_is_a_clear_error(
        dockerd: DockerDaemon, containers: None, tmp_path: Path,
        logging: tuple[str, ...]) -> None:
    layout = Layout(tmp_path)
    cid = run_container(dockerd, "sleep 30", *logging)
    with trio.fail_after(30), pytest.raises(DockerError, match="logging driver"):
        await start_log_copier(str(dockerd.socket), cid, str(layout.fifos["stdout"]),
                               str(layout.fifos["stderr"]), layout.state)


async def test_a_tty_containers_raw_stream_goes_to_stdout(
        dockerd: DockerDaemon, containers: None, tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    cid = run_container(dockerd, "sleep 0.3; echo one; echo two >&2", "-t")
    with trio.fail_after(30):
        async with pumps(layout):
            identity = await start_log_copier(str(dockerd.socket), cid,
                                              str(layout.fifos["stdout"]),
                                              str(layout.fifos["stderr"]), layout.state)
            await wait_gone(identity)
        await drain_to_end(layout)
    assert layout.read_bytes("stdout") == b"one\r\ntwo\r\n"
    assert layout.read_bytes("stderr") == b""


async def test_a_line_longer_than_dockers_message_size_comes_whole(
        dockerd: DockerDaemon, containers: None, tmp_path: Path) -> None:
    """Docker cuts lines at 16 KiB into messages of their own (each with a timestamp):
    they are written back to back, as the container wrote them."""
    layout = Layout(tmp_path)
    cid = run_container(dockerd, "sleep 0.3; head -c 100000 /dev/zero | tr '\\0' a; "
                                 "echo; echo after")
    with trio.fail_after(30):
        async with pumps(layout):
            identity = await start_log_copier(str(dockerd.socket), cid,
                                              str(layout.fifos["stdout"]),
                                              str(layout.fifos["stderr"]), layout.state)
            await wait_gone(identity)
        await drain_to_end(layout)
    assert layout.read_bytes("stdout") == b"a" * 100000 + b"\nafter\n"


async def test_stop_without_drain_kills_a_copier_whose_container_runs(
        dockerd: DockerDaemon, containers: None, tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    cid = run_container(dockerd, "echo up; sleep 600")
    with trio.fail_after(30):
        async with pumps(layout):
            identity = await start_log_copier(str(dockerd.socket), cid,
                                              str(layout.fifos["stdout"]),
                                              str(layout.fifos["stderr"]), layout.state)
            await eventually(lambda: layout.read("stdout") == ["up"])
            with trio.fail_after(2):  # no drain: not the drain's 5 s
                await stop_log_copier(identity, drain=False)
            assert not copier_alive(identity)
            await stop_log_copier(identity, drain=False)  # gone already: a no-op


def _stop_daemon_keeping_its_root(daemon: DockerDaemon) -> None:
    os.killpg(daemon.process.pid, signal.SIGTERM)
    daemon.process.wait(60)


async def test_the_copier_outlasts_a_daemon_restart(tmp_path: Path) -> None:
    """A private daemon (the session's must stay up). Its shutdown stops the container,
    whose TERM trap writes a last line; the copier, cut off, waits for the daemon, and once
    it is back reads what is left from its cursor: every line once, then it ends."""
    daemon = await trio.to_thread.run_sync(start_dockerd)
    layout = Layout(tmp_path)
    try:
        with trio.fail_after(120):
            await trio.to_thread.run_sync(import_image, daemon)
            cid = run_container(daemon, "trap 'echo bye; exit 0' TERM; sleep 0.3; "
                                        f"{lines_script(20, '0')}; sleep 600 & wait")
            async with pumps(layout):
                identity = await start_log_copier(daemon.host, cid,
                                                  str(layout.fifos["stdout"]),
                                                  str(layout.fifos["stderr"]), layout.state)
                await eventually(lambda: len(layout.read("stderr")) == 20)
                await trio.to_thread.run_sync(_stop_daemon_keeping_its_root, daemon)
                assert copier_alive(identity)  # waiting for the daemon
                daemon = await trio.to_thread.run_sync(start_dockerd, daemon.root)
                await wait_gone(identity)
            await drain_to_end(layout)
    finally:
        await trio.to_thread.run_sync(stop_dockerd, daemon)
    assert layout.read("stdout") == [*expected("stdout", 20), "bye"]
    assert layout.read("stderr") == expected("stderr", 20)


def frame(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def chunked(*pieces: bytes) -> bytes:
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


def answer(body: bytes, *, chunk: int, monkeypatch: pytest.MonkeyPatch) -> logcopier.Http:
    """An `Http` reading `body` after a chunked 200 head, `chunk` bytes per recv."""
    monkeypatch.setattr(logcopier, "CHUNK", chunk)
    ours, theirs = socket.socketpair()
    theirs.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    theirs.shutdown(socket.SHUT_WR)  # the request still goes in (and is dropped)
    http = logcopier.Http("", "/logs", 5.0, sock=ours)
    theirs.close()
    return http


@pytest.mark.parametrize("chunk", [1, 3, 7, 64 * 1024])
def test_a_chunked_multiplexed_body_split_anywhere_decodes_whole(
        chunk: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pure: a multiplexed, chunked log body read a few bytes at a time (every split point
    of the chunk framing and of Docker's frames) gives each message once, in order; a
    cursor of what was written makes a second reading skip exactly those."""
    messages = [(1, b"2026-12-08T00:40:00.000000001Z out 0\n"),
                (2, b"2026-12-08T00:40:00.000000002Z err 0\n"),
                (1, b"2026-12-08T00:40:00.000000003Z " + b"x" * 300 + b"\n"),
                (1, b"2026-12-08T00:40:00.000000004Z out 1\n")]
    # Docker's chunks need not follow its frames: cut the frames' bytes unevenly.
    stream = b"".join(frame(s, m) for s, m in messages)
    body = chunked(stream[:5], stream[5:50], stream[50:51], stream[51:])
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    copier = logcopier.Copier("", "c", {1: out_w, 2: err_w},
                              logcopier.Cursor(str(tmp_path / "cursor")))
    copier.copy(answer(body, chunk=chunk, monkeypatch=monkeypatch))
    assert os.read(out_r, 4096) == b"out 0\n" + b"x" * 300 + b"\nout 1\n"
    assert os.read(err_r, 4096) == b"err 0\n"
    # The same messages again (a copier resumed from the cursor), and one more: only it.
    more = frame(2, b"2026-12-08T00:40:00.000000005Z err 1\n")
    again = logcopier.Copier("", "c", {1: out_w, 2: err_w},
                             logcopier.Cursor(str(tmp_path / "cursor")))
    assert again.cursor.since() == "1796690400.000000001"
    again.copy(answer(chunked(stream + more), chunk=chunk, monkeypatch=monkeypatch))
    os.close(out_w)
    os.close(err_w)
    assert os.read(out_r, 4096) == b""
    assert os.read(err_r, 4096) == b"err 1\n"


def test_docker_timestamps_in_ns() -> None:
    assert logcopier.timestamp_ns(b"1970-01-01T00:00:01.5Z") == 1_500_000_000
    assert logcopier.timestamp_ns(b"2026-12-08T00:40:00.123456789Z") == (
        1796690400 * 1_000_000_000 + 123456789)
    assert logcopier.timestamp_ns(b"2026-12-08T02:40:00.000000001+02:00") == (
        1796690400 * 1_000_000_000 + 1)

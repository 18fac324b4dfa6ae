"""`alloc exec` into a container: the Engine API's exec create, start and inspect, as Nomad's
drivers/docker/driver.go `ExecTaskStreaming`.

Theory of operation. `POST /containers/ID/exec` makes the exec (stdin, stdout and stderr
attached, a tty if asked); `POST /exec/ID/start` with `Connection: Upgrade` / `Upgrade: tcp`
answers `101 Switching Protocols` and the connection becomes the command's stdio (Docker's
"hijacked" stream). Without a tty what comes back is multiplexed (8-byte frame headers:
stream 1 stdout, 2 stderr, then the big-endian size), with a tty it is the terminal's raw
output. The client's stdin goes to the socket; its end is a half-close (`send_eof`), which
Docker turns into the command's end of input, or with a tty a typed ^D (as execstream.py).
A resize is `POST /exec/ID/resize?h=&w=`. Once the stream ends, `GET /exec/ID/json` is
polled until the command is not running, and its `ExitCode` returned (Docker gives
128+N for signal N).

The hijack speaks HTTP/1.1 with h11 over a trio socket of its own, not through httpx2 (the
client `engine.py` uses for everything else): an upgraded connection is a raw bidirectional
stream, which a trio `SocketStream` is, half-close included, while httpx's `network_stream`
extension would tie the session's lifetime and cancellation to the pool's internals.

The command runs with what the task got: the container's environment and user (the exec
inherits `Config.Env` and `Config.User`, which the driver made from the task's env and user),
as Nomad's does; nothing is passed again, so a value the driver translated for the container
(paths under /alloc, /local) is not replaced by the host's.

Invariants: each output stream's `close` is sent, after all of its data, before this returns;
however the session ends (the client went away, the agent stops), a command still running is
SIGKILLed with its descendants (reaper.py `descendants`), by its host pid (from the exec's
inspect; only for a daemon on this host, which a unix socket is) checked against the start
time noted while it ran (procfs.py `start_time`: a reused pid is never signalled), in a
shielded, bounded cleanup: an exec never outlives its session. Docker itself has no way to
end an exec.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Final, Literal

import h11
import trio

from yurt.runtime.client.drivers import reaper
from yurt.runtime.client.drivers.docker.engine import DockerEngine, DockerError, DockerUnreachable
from yurt.runtime.client.drivers.protocol import ExecInput, ExecOutput, ExecRequest, ExecResize
from yurt.runtime.errors import DriverError
from yurt.runtime.lib import procfs

CHUNK: Final = 64 * 1024
#: What a terminal reads as end of input (execstream.py `EOF_CHAR`).
EOF_CHAR: Final = b"\x04"
INSPECT_POLL: Final = 0.05
#: How long the exit code is waited for once the stream ended, and the cleanup's bound.
EXIT_TIMEOUT: Final = 10.0
CLEANUP_TIMEOUT: Final = 5.0
STREAMS: Final[dict[int, Literal["stdout", "stderr"]]] = {1: "stdout", 2: "stderr"}


async def _connect(engine: DockerEngine) -> trio.SocketStream:
    try:
        if engine.socket_path is not None:
            return await trio.open_unix_socket(engine.socket_path)
        host, _, port = engine.endpoint.split("://", 1)[1].rpartition(":")
        return await trio.open_tcp_stream(host, int(port))
    except OSError as e:
        raise DockerUnreachable(engine.endpoint, str(e)) from e


async def _hijack(engine: DockerEngine, exec_id: str, tty: bool
                  ) -> tuple[trio.SocketStream, bytes]:
    """Start the exec on a connection of its own; the upgraded stream and the bytes of it
    that came with the response head."""
    stream = await _connect(engine)
    try:
        body = json.dumps({"Detach": False, "Tty": tty}).encode()
        conn = h11.Connection(h11.CLIENT)
        head = h11.Request(method="POST",
                           target=f"/v{await engine.api_version()}/exec/{exec_id}/start",
                           headers=[("Host", "docker"), ("Content-Type", "application/json"),
                                    ("Content-Length", str(len(body))),
                                    ("Connection", "Upgrade"), ("Upgrade", "tcp")])
        await stream.send_all(b"".join(
            conn.send(event) or b"" for event in (head, h11.Data(data=body),
                                                  h11.EndOfMessage())))
        status, error = 0, b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(CHUNK)
                if not data:
                    raise DockerError(0, "the docker daemon closed the exec connection")
                conn.receive_data(data)
            elif isinstance(event, h11.InformationalResponse) and event.status_code == 101:
                return stream, conn.trailing_data[0]
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                error += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)) or (
                    event is h11.PAUSED):
                break
        try:
            message = str(json.loads(error)["message"])
        except (ValueError, KeyError, TypeError):
            message = error.decode(errors="replace").strip() or f"HTTP {status}"
        raise DockerError(status, message)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise


async def _feed(engine: DockerEngine, exec_id: str, stream: trio.SocketStream, tty: bool,
                inputs: trio.abc.ReceiveChannel[ExecInput]) -> None:
    """The client's input, in order: stdin bytes, its end, window sizes."""
    writable = True
    async for item in inputs:
        if isinstance(item, ExecResize):
            if tty:
                with contextlib.suppress(DockerError):  # the command is gone already
                    await engine.request("POST", f"/exec/{exec_id}/resize",
                                         params={"h": str(item.height), "w": str(item.width)})
            continue
        data = item.data + (EOF_CHAR if item.close and tty else b"")
        try:
            if data and writable:
                await stream.send_all(data)
            if item.close and not tty and writable:
                await stream.send_eof()
                writable = False
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            writable = False  # the command exited: input is dropped


async def _copy_out(stream: trio.SocketStream, first: bytes, tty: bool,
                    outputs: trio.abc.SendChannel[ExecOutput]) -> None:
    """The command's output until the stream ends, demultiplexed unless it is a tty."""
    buf = first
    while True:
        if tty:
            if buf:
                await outputs.send(ExecOutput("stdout", buf))
                buf = b""
        else:
            while len(buf) >= 8:
                size = int.from_bytes(buf[4:8], "big")
                if len(buf) < 8 + size:
                    break
                name = STREAMS.get(buf[0])
                if name is not None and size:
                    await outputs.send(ExecOutput(name, buf[8:8 + size]))
                buf = buf[8 + size:]
        try:
            data = await stream.receive_some(CHUNK)
        except trio.BrokenResourceError:
            return
        if not data:
            return
        buf += data


async def _exit_code(engine: DockerEngine, exec_id: str) -> int:
    while True:
        inspect = await engine.request("GET", f"/exec/{exec_id}/json")
        if not inspect.get("Running"):
            return int(inspect.get("ExitCode") or 0)
        await trio.sleep(INSPECT_POLL)


def _kill_tree(pid: int, started: int) -> None:
    """SIGKILL `pid` and what it started, only while `pid` is still the process that began
    at `started` (procfs.py `start_time`: a reused pid is never signalled, as rawexec.py's
    and orphans.py's kills). The tree is walked before any kill (a killed parent's children
    go to the container's init, out of reach of a later walk); each target is pinned by a
    pidfd and its start time checked again, so the signal reaches the process walked or none.
    """
    if procfs.start_time(pid) != started:
        return
    targets = [(p, procfs.start_time(p)) for p in [pid, *reaper.descendants(pid)]]
    if procfs.start_time(pid) != started:
        return  # reused during the walk: the children found are another process's
    for target, start in targets:
        try:
            fd = os.pidfd_open(target)
        except ProcessLookupError:
            continue
        try:
            if start is not None and procfs.start_time(target) == start:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            os.close(fd)


async def _identify(engine: DockerEngine, exec_id: str) -> tuple[int, int] | None:
    """(host pid, start time) of the exec's command while it runs, else None. The start
    time is read between two inspects that both name the pid as running, so it is the
    command's and not a later process's (a daemon on this host only: its pids are ours)."""
    if engine.socket_path is None:
        await trio.lowlevel.checkpoint()
        return None
    before = await engine.request("GET", f"/exec/{exec_id}/json")
    pid = int(before.get("Pid") or 0)
    if not before.get("Running") or pid <= 0:
        return None
    started = procfs.start_time(pid)
    after = await engine.request("GET", f"/exec/{exec_id}/json")
    if started is None or not after.get("Running") or int(after.get("Pid") or 0) != pid:
        return None
    return pid, started


async def _note_identity(engine: DockerEngine, exec_id: str,
                         identity: list[tuple[int, int]]) -> None:
    """Fill `identity` with the command's once Docker has started it (Docker answers the
    start before it spawns the command), so a later kill knows exactly which process it is.
    """
    with contextlib.suppress(DockerError):
        while not identity:
            found = await _identify(engine, exec_id)
            if found is not None:
                identity.append(found)
                return
            inspect = await engine.request("GET", f"/exec/{exec_id}/json")
            if inspect.get("Pid") and not inspect.get("Running"):
                return  # it ran and ended
            await trio.sleep(INSPECT_POLL)


async def _kill(engine: DockerEngine, exec_id: str, identity: list[tuple[int, int]]) -> None:
    """SIGKILL the command and its descendants if it still runs: by its host pid, checked
    against the start time noted while it ran (noted now if it was not yet: Docker may
    report a running exec with no pid for a moment, so that is waited for)."""
    with contextlib.suppress(DockerError):
        while not identity:
            found = await _identify(engine, exec_id)
            if found is not None:
                identity.append(found)
                break
            inspect = await engine.request("GET", f"/exec/{exec_id}/json")
            if not inspect.get("Running"):
                return
            await trio.sleep(INSPECT_POLL)
        inspect = await engine.request("GET", f"/exec/{exec_id}/json")
        if inspect.get("Running"):
            await trio.to_thread.run_sync(_kill_tree, *identity[0])


async def exec_in_container(engine: DockerEngine, container_id: str, request: ExecRequest,
                            inputs: trio.abc.ReceiveChannel[ExecInput],
                            outputs: trio.abc.SendChannel[ExecOutput]) -> int:
    """The `ExecDriver.exec_task` contract (protocol.py) for a container: `request.command`
    in `container_id` (tty or not), fed `inputs`, its output to `outputs` (then each
    stream's `close`); returns its exit code (128+N for a signal N; Docker's 126/127 when the
    command cannot be run, with Docker's message on the output).

    Raises:
        DriverError: no command, or Docker refused the exec (e.g. the container is not
            running: Docker's message); `DockerUnreachable` when the daemon does not answer.
    """
    if not request.command:
        raise DriverError("command is required but was empty")
    created = await engine.request("POST", f"/containers/{container_id}/exec", body={
        "AttachStdin": True, "AttachStdout": True, "AttachStderr": True,
        "Tty": request.tty, "Cmd": request.command})
    exec_id = str(created["Id"])
    finished = False
    identity: list[tuple[int, int]] = []  # (host pid, start time), once known
    try:
        stream, first = await _hijack(engine, exec_id, request.tty)
        async with stream, trio.open_nursery() as nursery:
            nursery.start_soon(_note_identity, engine, exec_id, identity)
            nursery.start_soon(_feed, engine, exec_id, stream, request.tty, inputs)
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await _copy_out(stream, first, request.tty, outputs)
                await outputs.send(ExecOutput("stdout", close=True))
                if not request.tty:
                    await outputs.send(ExecOutput("stderr", close=True))
            nursery.cancel_scope.cancel()  # no more input for a command that is gone
        with trio.fail_after(EXIT_TIMEOUT):
            code = await _exit_code(engine, exec_id)
        finished = True
        return code
    finally:
        if not finished:
            with trio.CancelScope(shield=True) as cleanup:
                cleanup.deadline = trio.current_time() + CLEANUP_TIMEOUT
                await _kill(engine, exec_id, identity)

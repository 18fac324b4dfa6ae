"""The agent's side of the docker log copier (`logcopier.py`, one process per container that
copies its log stream into the task's log FIFOs and outlives the agent; Nomad's
drivers/docker/docklog, started per task by drivers/docker/driver.go `setupNewDockerLogger`).

The seam with `driver.py`: `start_log_copier` after the container starts, `ensure_log_copier`
on re-attach, `stop_log_copier` when the task is destroyed. A copier's identity (the task
handle's `driver_state["logs"]`) is `{"pid", "start_time", "container_id"}`: the pid with its
start time (/proc field 22) names one process for good, so a reused pid is never taken for it.

Invariants: `start_log_copier` returns only once the copier reads the container's log stream,
or raises `DockerError` with Docker's message (a logging driver that cannot be read, a
container that is gone) — never a copier that hangs unseen. The copier is no child of the
agent once started (it forked away), so nothing here reaps it after the start. Its
process-group id is the pid we spawned (it is the group leader's child), which is how a start
that fails half-way kills it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import trio

from yurt.runtime.client.drivers import spawn
from yurt.runtime.client.drivers.docker import logcopier
from yurt.runtime.client.drivers.docker.engine import DockerError
from yurt.runtime.errors import DriverError
from yurt.runtime.lib.procfs import stat_fields

COPIER: Final = Path(logcopier.__file__)
#: How long a copier may take to open its stream (it inspects, then asks for the logs).
#: How long a start waits to reap the launcher it spawned for the copier.
REAP_TIMEOUT: Final = 5.0
REPORT_TIMEOUT: Final = 30.0
#: How long `stop_log_copier(drain=True)` lets it finish copying before killing it.
DRAIN_TIMEOUT: Final = 5.0


def _alive(pid: int, start_time: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in (b"Z", b"X") and int(fields[19]) == start_time


def copier_alive(identity: Mapping[str, Any] | None) -> bool:
    """Whether the copier `identity` names still runs."""
    if not identity:
        return False
    try:
        return _alive(int(identity["pid"]), int(identity["start_time"]))
    except (KeyError, TypeError, ValueError):
        return False


async def _read_report(fd: int) -> bytes:
    data = b""
    async with trio.lowlevel.FdStream(fd) as stream:
        while b"\n" not in data:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\n", 1)[0]


async def start_log_copier(socket_path: str, container_id: str, stdout_path: str,
                           stderr_path: str, state_dir: Path) -> dict[str, Any]:
    """Spawn the copier for a started container; its identity (JSON-able) for the task
    handle's `driver_state["logs"]`. `socket_path` is the daemon's unix socket (or its
    endpoint, `unix://…` or `tcp://host:port`). The copier keeps its cursor and its log
    (`logcopier.log`) in `state_dir`; a copier started again with the same `state_dir`
    resumes where the last stopped.

    Raises:
        DockerError: the container's logs cannot be read (Docker's message).
        DriverError: the copier could not be started or did not report in time.
    """
    await trio.Path(state_dir).mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-I", "-S", str(COPIER), socket_path, container_id,
            stdout_path, stderr_path, str(state_dir)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    try:
        pid, report_fd = spawn.spawn_shim(argv, env)
    except OSError as e:
        raise DriverError(f"cannot start the log copier of container {container_id[:12]}: "
                          f"{e}", recoverable=True) from e
    ok = reaped = False
    try:
        with trio.move_on_after(REPORT_TIMEOUT):
            report = await _read_report(report_fd)
            # The spawned process forks the copier and exits at once: reap it.
            await trio.to_thread.run_sync(os.waitpid, pid, 0)
            reaped = True
            word, _, rest = report.decode(errors="replace").partition(" ")
            if word == "ok":
                copier = int(rest)
                fields = stat_fields(copier)
                if fields is None:
                    raise DriverError(f"the log copier of container {container_id[:12]} "
                                      f"exited at once; see {state_dir}/logcopier.log")
                ok = True
                return {"pid": copier, "start_time": int(fields[19]),
                        "container_id": container_id}
            if word == "error":
                raise DockerError(500, f"cannot read the logs of container "
                                       f"{container_id[:12]}: {rest}")
            raise DriverError(f"the log copier of container {container_id[:12]} failed; "
                              f"see {state_dir}/logcopier.log")
        raise DriverError(f"the log copier of container {container_id[:12]} did not open "
                          f"the container's log stream within {REPORT_TIMEOUT:.0f}s",
                          recoverable=True)
    finally:
        if not ok:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if not reaped:  # killed just now, or exiting: its exit is at hand (bounded all
            # the same: a thread left waiting reaps it whenever it does exit)
            with trio.CancelScope(shield=True) as cleanup, \
                    contextlib.suppress(ChildProcessError):
                cleanup.deadline = trio.current_time() + REAP_TIMEOUT
                await trio.to_thread.run_sync(os.waitpid, pid, 0, abandon_on_cancel=True)


async def ensure_log_copier(socket_path: str, container_id: str, stdout_path: str,
                            stderr_path: str, state_dir: Path,
                            previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """On re-attach: `previous` if it names a live copier, else a new one that resumes from
    the cursor the last left in `state_dir` (no line lost; at most the one run of lines the
    dead copier wrote but had not recorded repeated, see logcopier.py). A copier that ended
    with its container is started again too: it finds the container stopped, copies what is
    left (nothing, usually) and exits.

    Raises:
        DockerError, DriverError: as `start_log_copier`.
    """
    if previous is not None and copier_alive(previous) and (
            previous.get("container_id") == container_id):
        return dict(previous)
    return await start_log_copier(socket_path, container_id, stdout_path, stderr_path,
                                  state_dir)


async def _wait_exit(pid: int, start_time: int) -> None:
    """Until the process exits (a pidfd: no polling; it need not be our child)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if not _alive(pid, start_time):  # the pid was reused before we opened it
            return
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        os.close(pidfd)


async def stop_log_copier(identity: Mapping[str, Any], *, drain: bool) -> None:
    """When the task is destroyed: with `drain`, give the copier `DRAIN_TIMEOUT` to copy what
    the container wrote last and end with its stream; then (or at once) kill it. Idempotent:
    a copier already gone is fine."""
    if not copier_alive(identity):
        return
    pid, start_time = int(identity["pid"]), int(identity["start_time"])
    if drain:
        with trio.move_on_after(DRAIN_TIMEOUT):
            await _wait_exit(pid, start_time)
    if _alive(pid, start_time):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with trio.move_on_after(DRAIN_TIMEOUT):
            await _wait_exit(pid, start_time)

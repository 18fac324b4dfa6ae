"""The driver protocol: what a task runner asks of a driver, and nothing more.

Shaped after Nomad's `DriverPlugin` task methods. Every method is async and cancellable; a
driver never owns the task runner's timing (the runner wraps calls in its own cancel scopes).
`wait_task` returns only when the task has exited (or raises `PluginShutdownError`, after which
the runner recovers the task from its persisted handle and waits again). `stop_task` asks the
task to stop (signal, then force after `timeout`) and returns; the exit is observed through
`wait_task`, so a kill is always "stop, then wait".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import trio

from yurt.runtime.structs import TaskDeviceNode, TaskHandle, TaskMount

Health = Literal["healthy", "unhealthy", "undetected"]


@dataclass(frozen=True)
class Fingerprint:
    """What a driver says about itself: Nomad's driver health states and attributes."""

    health: Health
    description: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExitResult:
    """How a task's process ended, as `Driver.wait_task` reports it (Nomad's
    `plugins/drivers` `ExitResult`). `signal` is the signal number that killed it (0 if none)."""

    exit_code: int = 0
    signal: int = 0
    oom_killed: bool = False
    err: str = ""

    def successful(self) -> bool:
        return self.exit_code == 0 and self.signal == 0 and not self.err


@dataclass(frozen=True)
class TaskConfig:
    """One start of one task. `id` is the invocation ID `<alloc>/<task>/<8 hex>`, new on
    every start."""

    id: str
    name: str
    alloc_id: str
    job_id: str
    task_group: str
    driver_config: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    #: The jobspec's `user`: run the task as this user ("" = the agent's).
    user: str = ""
    alloc_dir: Path | None = None
    task_dir: Path | None = None
    #: Where the task's output goes: the log FIFOs, or None for /dev/null.
    stdout_path: str | None = None
    stderr_path: str | None = None
    #: What the task hooks asked for (the device hook, from the plugins' reservations).
    #: raw_exec has no isolation and ignores them, as Nomad's does; isolating drivers apply them.
    #: Host volume mounts (hooks/volumes.py) reach only drivers that `supports_mounts`.
    mounts: list[TaskMount] = field(default_factory=list)
    devices: list[TaskDeviceNode] = field(default_factory=list)
    #: The task's `resources`: MiB of `memory` and `memory_max` (0: none, -1: no hard limit)
    #: and `cpu` MHz (Nomad's cpu shares); drivers that enforce limits apply them (limits.py).
    memory_mb: int = 0
    memory_max_mb: int = 0
    cpu_shares: int = 0
    #: The node's cores the task holds alone (`resources { cores }`): pinned where the
    #: driver can (a cpuset cgroup, docker's `CpusetCpus`).
    reserved_cores: list[int] = field(default_factory=list)


class Driver(Protocol):
    @property
    def name(self) -> str: ...

    async def start_task(self, config: TaskConfig) -> TaskHandle:
        """Start the task; raise `DriverError` (recoverable or not) if it cannot start."""

    async def wait_task(self, task_id: str) -> ExitResult:
        """Block until the task exits and return how."""

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        """Send `signal`, and force-kill after `kill_timeout` ns if the task is still there."""

    async def destroy_task(self, task_id: str, *, force: bool) -> None:
        """Forget the task; a running task needs `force`."""

    async def signal_task(self, task_id: str, signal: str) -> None: ...

    async def recover_task(self, handle: TaskHandle) -> None:
        """Re-attach to a task started earlier (after an agent or plugin restart)."""


def supports_mounts(driver: object) -> bool:
    """Whether `driver` applies `TaskConfig.mounts` (Nomad's `Capabilities.MountConfigs`,
    plugins/drivers/driver.go): a driver says so with a true `supports_mounts` attribute;
    any other is Nomad's `MountConfigSupportNone` (raw_exec, mock_driver), for which the
    volume hook (hooks/volumes.py) refuses host volumes."""
    return getattr(driver, "supports_mounts", False) is True


@dataclass(frozen=True)
class ExecStdin:
    """Input for an exec session's command: bytes for its stdin, or (`close`) its end."""

    data: bytes = b""
    close: bool = False


@dataclass(frozen=True)
class ExecResize:
    """The client's terminal size changed (rows, columns): applied to the session's pty."""

    height: int
    width: int


#: What an exec session receives from its client (Nomad's `ExecTaskStreamingRequestMsg`).
ExecInput = ExecStdin | ExecResize


@dataclass(frozen=True)
class ExecOutput:
    """Output of an exec session's command (Nomad's `ExecTaskStreamingIOOperation`): bytes
    of `stream`, or (`close`) its end."""

    stream: Literal["stdout", "stderr"]
    data: bytes = b""
    close: bool = False


@dataclass(frozen=True)
class ExecRequest:
    """One `alloc exec`: the command, whether it gets a pty, and the task it runs beside,
    as the task's start was configured (its environment, user, directories, driver
    config), so that the driver can give the command what the task got."""

    command: list[str]
    tty: bool
    task: TaskConfig


@runtime_checkable
class ExecDriver(Protocol):
    """A driver that can run a command beside a running task (Nomad's optional
    `ExecTaskStreamingDriver`)."""

    async def exec_task(self, task_id: str, request: ExecRequest,
                        inputs: trio.abc.ReceiveChannel[ExecInput],
                        outputs: trio.abc.SendChannel[ExecOutput]) -> int:
        """Run `request.command` in the task's environment until it exits: feed it
        `inputs`, send what it writes to `outputs` (each stream's `close` included, all of
        it before returning), and return its exit code (128+N when signal N killed it).
        Cancelled, the command's process group is killed and reaped before this returns.

        Raises:
            DriverError: the command cannot be started (not found, the task not running).
        """


@runtime_checkable
class Reconciler(Protocol):
    """A driver whose tasks outlive the agent, and can be left behind by a crash mid-start."""

    async def reconcile(self, alloc_root: Path,
                        alloc_ids: Collection[str] | None = None) -> int:
        """Stop every task this driver started under `alloc_root` (only in the allocations
        `alloc_ids`, if given) that no recovered handle accounts for; return how many. Call
        once every allocation has been restored."""


async def reconcile_drivers(drivers: Iterable[object], alloc_root: Path,
                            alloc_ids: Collection[str] | None = None) -> int:
    """`reconcile` every driver that can: after a restore, nothing runs that the state does
    not account for."""
    total = 0
    for driver in drivers:
        if isinstance(driver, Reconciler):
            total += await driver.reconcile(alloc_root, alloc_ids)
    return total


@dataclass(frozen=True)
class TaskUsage:
    """A task's resource usage as its driver measures it (Nomad's `TaskResourceUsage`:
    `MemoryStats` and `CpuStats`, plugins/drivers/driver.go). Memory in bytes, CPU ticks in
    MHz, `cpu_percent` of one core; `measured_*` name what the driver really measured."""

    rss: int = 0
    cache: int = 0
    swap: int = 0
    mapped_file: int = 0
    usage: int = 0
    max_usage: int = 0
    kernel_usage: int = 0
    kernel_max_usage: int = 0
    memory_measured: tuple[str, ...] = ()
    cpu_system_mode: float = 0.0
    cpu_user_mode: float = 0.0
    #: 0: the stats endpoint derives them from `cpu_percent` and one core's MHz, as Nomad's
    #: drivers/docker/util/stats_posix.go does (a driver knows no node speed).
    cpu_total_ticks: float = 0.0
    cpu_throttled_periods: int = 0
    cpu_throttled_time: int = 0
    cpu_percent: float = 0.0
    cpu_measured: tuple[str, ...] = ()
    #: When it was measured (ns since the epoch).
    timestamp: int = 0


@runtime_checkable
class StatsDriver(Protocol):
    """A driver that measures its tasks' usage itself (Nomad's `TaskStats`); the stats
    endpoint falls back to the task's process tree for drivers without it."""

    async def task_usage(self, task_id: str) -> TaskUsage | None:
        """The task's usage now; None when the task is not running here."""

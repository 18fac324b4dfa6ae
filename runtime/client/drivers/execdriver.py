"""exec: raw_exec's supervision (rawexec.py) with the task isolated as Nomad's exec driver does.

What differs from raw_exec is only the task's words (`_task_argv`): taskstart.sh, after joining
the task's cgroups, execs `unshare --mount --uts [--pid] [--ipc]` and a small `sh` (`WRAPPER`),
whose child, pid 1 of the new PID namespace, runs execstart.sh: it builds the task's root on a
tmpfs (the host's chroot_env from chroot.py, read-only; the alloc dir's `alloc/`, `local/`,
`secrets/` at `/alloc`, `/local`, `/secrets`; /tmp, /proc, a small /dev; the task's host
volume mounts, `read_only` honoured) and execs the command chrooted there, as `user`. The
reported task pid is that `sh`: the process group, the exit status (the child's, 128+N for
a fatal signal N), re-attach, lossless logs and the kill signal and
timeout are raw_exec's unchanged. As in Nomad, the task is its PID namespace's init, so a
signal it has no handler for (SIGINT, SIGTERM) does not end it: the stop then SIGKILLs it
at `kill_timeout`.

Invariants: resource limits are always enforced (drivers/exec/driver.go: exec always
configures cgroups), so a host without the v1 memory and cpu cgroups cannot run exec; the
chroot is built once per host (`rootfs_dir`) before the first start, under a lock; mounts live
in the task's mount namespace only (util-linux `unshare` makes them private) and vanish
with it. `alloc exec` enters the task's namespaces and root (`exec_task`). Not yet:
`cap_add`/`cap_drop` (refused with a clear error), device mounts.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, Final

import msgspec
import trio

from yurt.runtime.client.drivers import chroot, execstream, limits
from yurt.runtime.client.drivers.configs import ExecTaskConfig, RawExecTaskConfig
from yurt.runtime.client.drivers.protocol import (
    ExecInput,
    ExecOutput,
    ExecRequest,
    Fingerprint,
    TaskConfig,
)
from yurt.runtime.client.drivers.rawexec import RawExecDriver, RawExecPluginConfig
from yurt.runtime.errors import DriverError
from yurt.runtime.structs import TaskHandle

NAME: Final = "exec"
EXECSTART: Final = Path(__file__).with_name("execstart.sh")
DEFAULT_ROOTFS: Final = "/var/lib/yurt/exec/rootfs"
#: The reported task process, in the new namespaces but not the PID namespace it made:
#: its child, execstart.sh, is that namespace's pid 1. It survives the kill signal (a no-op
#: trap; its child gets the signal with the rest of the process group and handles it or
#: not, as pid 1 does) and exits with the child's status, 128+N for a fatal signal N.
#: (util-linux 2.38's `unshare --fork` exits 1 instead: "sigprocmask unblock failed".)
WRAPPER: Final = 'trap : INT TERM; /bin/sh "$0" "$@"; exit $?'
#: plugins/drivers/driver.go `DriverRequiresRootMessage`.
REQUIRES_ROOT: Final = "Driver must run as root"
#: plugins/drivers/driver.go `NoCgroupMountMessage`, and why here.
NO_CGROUPS: Final = ("Failed to discover cgroup mount point: the v1 memory and cpu "
                     "hierarchies are needed for the resource limits")
FINGERPRINT_PERIOD: Final = 30.0
log = logging.getLogger("yurt.drivers.exec")


class ExecPluginConfig(msgspec.Struct, forbid_unknown_fields=True):
    """exec's plugin options (`[drivers.config.exec]`); Nomad's names where Nomad has them."""

    enabled: bool = True
    #: Where the host's chroot_env is copied once (hard links where it can).
    rootfs_dir: str = DEFAULT_ROOTFS
    #: client `chroot_env`'s host paths (Nomad's is a map host → task path; here the same path).
    chroot_env: list[str] = msgspec.field(
        default_factory=lambda: list(chroot.DEFAULT_CHROOT_ENV))
    default_pid_mode: str = "private"
    default_ipc_mode: str = "private"
    #: Accepted: yurt enters the task root with chroot, never pivot_root.
    no_pivot_root: bool = False


def _namespaces_usable() -> str:
    """"" when this process can make the task namespaces, else why not (blocking)."""
    if os.geteuid() != 0:
        return REQUIRES_ROOT
    unshare = shutil.which("unshare")
    if unshare is None:
        return "unshare (util-linux) is not installed"
    done = subprocess.run([unshare, "--mount", "--uts", "--ipc", "--pid", "--fork", "true"],
                          capture_output=True, check=False, timeout=10)
    if done.returncode != 0:
        return f"cannot create namespaces: {done.stderr.decode(errors='replace').strip()}"
    return ""


def _first_child(pid: int) -> int | None:
    """The first child of `pid` (the wrapper's: the task's pid 1), from /proc."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def in_task_root(path: str, task_dir: Path, alloc_dir: Path | None) -> str:
    """A resolved command's path as the task sees it: its own `local/` and `secrets/` and the
    alloc's `alloc/` at their mount points; anything else (a host program, also in the
    chroot) unchanged."""
    places = [(task_dir / "local", "/local"), (task_dir / "secrets", "/secrets")]
    if alloc_dir is not None:
        places.append((alloc_dir / "alloc", "/alloc"))
    for host, inside in places:
        if Path(path).is_relative_to(host):
            rest = Path(path).relative_to(host).as_posix()
            return inside if rest == "." else f"{inside}/{rest}"
    return path


class ExecDriver(RawExecDriver):
    """The exec driver: healthy when the agent is root and can make the namespaces."""

    DRIVER_NAME: ClassVar[str] = NAME
    TASK_CONFIG: ClassVar[type[RawExecTaskConfig]] = ExecTaskConfig
    fs_isolation: ClassVar[str] = "chroot"
    #: Host volume mounts are bound into the task root (protocol.py `supports_mounts`).
    supports_mounts: ClassVar[bool] = True

    def __init__(self, config: ExecPluginConfig | None = None) -> None:
        self.exec_config = config or ExecPluginConfig()
        super().__init__(RawExecPluginConfig())
        # Always enforced; a host without them is reported by `fingerprint`, and refused at
        # start, rather than failing the agent's start.
        self.limits = limits.select_limits()
        self.unshare = shutil.which("unshare") or "unshare"
        self.rootfs = Path(self.exec_config.rootfs_dir)
        self._rootfs_lock = trio.Lock()
        self._rootfs_ready = False
        #: Seconds the chroot build took in this process (0.0: found built).
        self.build_seconds: float | None = None

    async def _ensure_rootfs(self) -> None:
        async with self._rootfs_lock:
            if not self._rootfs_ready:
                self.build_seconds = await trio.to_thread.run_sync(
                    chroot.build_rootfs, self.rootfs, tuple(self.exec_config.chroot_env))
                if self.build_seconds:
                    log.info("exec: built the task rootfs at %s in %.1fs", self.rootfs,
                             self.build_seconds)
                self._rootfs_ready = True

    async def start_task(self, config: TaskConfig) -> TaskHandle:
        if config.task_dir is None or config.alloc_dir is None:
            raise DriverError("exec needs a task directory and an alloc directory")
        if self.limits is None:
            raise DriverError(f"exec: {NO_CGROUPS}")
        if config.driver_config.get("cap_add") or config.driver_config.get("cap_drop"):
            raise DriverError("exec: cap_add and cap_drop are not supported by this agent yet")
        await self._ensure_rootfs()
        # The task's directories where it sees them (Nomad's taskenv for FSIsolationChroot).
        env = dict(config.env, NOMAD_ALLOC_DIR="/alloc", NOMAD_TASK_DIR="/local",
                   NOMAD_SECRETS_DIR="/secrets")
        return await super().start_task(dataclasses.replace(config, env=env))

    def _task_argv(self, config: TaskConfig, cfg: RawExecTaskConfig, state_dir: Path,
                   prefix: list[str], command: str) -> tuple[str, list[str]]:
        assert isinstance(cfg, ExecTaskConfig)
        assert config.task_dir is not None
        assert config.alloc_dir is not None
        namespaces = ["--mount", "--uts"]
        if (cfg.pid_mode or self.exec_config.default_pid_mode) != "host":
            namespaces.append("--pid")
        if (cfg.ipc_mode or self.exec_config.default_ipc_mode) != "host":
            namespaces.append("--ipc")
        volumes: list[str] = []
        for mount in config.mounts:
            volumes += [mount.host_path, mount.task_path, "ro" if mount.readonly else "rw"]
        argv = [self.unshare, *namespaces, "--", "/bin/sh", "-c", WRAPPER, str(EXECSTART),
                str(self.rootfs), str(state_dir / "root"), str(config.alloc_dir / "alloc"),
                str(config.task_dir / "local"), str(config.task_dir / "secrets"),
                config.name, cfg.work_dir or "/", str(len(config.mounts)), *volumes, "--",
                *prefix, in_task_root(command, config.task_dir, config.alloc_dir), *cfg.args]
        return str(config.task_dir), argv

    async def exec_task(self, task_id: str, request: ExecRequest,
                        inputs: trio.abc.ReceiveChannel[ExecInput],
                        outputs: trio.abc.SendChannel[ExecOutput]) -> int:
        """`alloc exec`: raw_exec's session (execstream.py: the task's environment, user and
        cgroup), entered into the task's namespaces and root with `nsenter`, as Nomad's
        executor runs it in the container (executor_linux_cgo.go `ExecStreaming`)."""
        task = self._task(task_id)
        if not task.task_alive():
            raise DriverError("task is not running")
        init = _first_child(task.pid)
        if init is None:
            raise DriverError("task is not running")
        config = request.task
        assert config.task_dir is not None
        cfg = msgspec.convert(config.driver_config, ExecTaskConfig)
        nsenter = shutil.which("nsenter") or "nsenter"

        def enter(words: list[str], work_dir: str) -> tuple[list[str], str]:
            assert config.task_dir is not None
            command = in_task_root(words[-1], config.task_dir, config.alloc_dir)
            return [nsenter, f"--target={init}", "--mount", "--uts", "--ipc", "--pid",
                    "--root", f"--wd={cfg.work_dir or '/'}", "--", *words[:-1],
                    command], str(config.task_dir)

        plain = dict(config.driver_config)
        for option in ("pid_mode", "ipc_mode", "cap_add", "cap_drop"):
            plain.pop(option, None)  # raw_exec's session reads only command, args, work_dir
        request = dataclasses.replace(request, task=dataclasses.replace(config,
                                                                        driver_config=plain))
        return await execstream.exec_beside(request, env_allow=self.config.env_allow,
                                            cgroup=task.cgroup, inputs=inputs,
                                            outputs=outputs, enter=enter)

    async def fingerprint(self) -> AsyncIterator[Fingerprint]:
        """Healthy while the agent is root and can make the namespaces and limit cgroups;
        undetected otherwise, with the reason (Nomad's exec requires root)."""
        while True:
            self._reap_exited()
            problem = await trio.to_thread.run_sync(_namespaces_usable)
            if problem:
                yield Fingerprint("undetected", problem)
            elif self.limits is None:
                yield Fingerprint("unhealthy", NO_CGROUPS)
            else:
                yield Fingerprint("healthy", "Healthy", {"driver.exec": "true"})
            await trio.sleep(FINGERPRINT_PERIOD)


def plugin(config: dict[str, Any]) -> ExecDriver:
    """Entry point (`yurt.drivers`)."""
    try:
        options = msgspec.convert(config, ExecPluginConfig)
    except msgspec.ValidationError as e:
        raise DriverError(f"invalid exec plugin config: {e}") from None
    if not options.enabled:
        raise DriverError("exec is disabled")
    return ExecDriver(options)

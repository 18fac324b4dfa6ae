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
configures cgroups), so a host without memory and cpu cgroups (limits.py) cannot run exec; the
chroot is built once per host (`rootfs_dir`) before the first start, under a lock; mounts live
in the task's mount namespace only (util-linux `unshare` makes them private) and vanish
with it. `alloc exec` enters the task's namespaces and root (`exec_task`).

Capabilities (capabilities.py, Nomad's `Calculate`): the task's set is Nomad's defaults within
the plugin's `allow_caps`, minus `cap_drop`, plus `cap_add`; a `cap_add` outside `allow_caps`
fails the start. They are applied by util-linux `setpriv` (already the user switch, users.py;
no libcap `capsh` needed), as the last step before the command, for the task and its `alloc
exec` sessions alike: the bounding set always, and for a task with a `user` the inheritable
and ambient sets too, so it keeps them across the switch (executor_linux_cgo.go
`configureCapabilities`). Unlike Nomad, whose root tasks get the legacy full set, a root task
(yurt's default user, where Nomad's is "nobody") is bounded by the same set, so `cap_drop`
holds for it. Device nodes from the device hook (`TaskConfig.devices`) are bound into the task
root; one without "w" in its permissions is bound read-only. On v1 the start's devices cgroup
(limits.py `devices_cgroup`) opens to the task only runc's default devices and its own, with
their permissions (execstart.sh), as Nomad's executor. Where the task has no devices
cgroup (v2, which would need an eBPF device program yurt lacks, or v1 without `devices`),
nothing would stop a task from making and opening any device, so it is secure by default
instead: `mknod` leaves its capability set unless its `cap_add` names it (within
`allow_caps`), and the writable tmpfs of its root (/tmp, /dev/shm) are `nodev` always. Every
mount and device destination is checked before the start (`check_destination`): a bad one
fails it, not recoverable.
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

from yurt.runtime.client.drivers import capabilities, chroot, execstream, limits
from yurt.runtime.client.drivers.configs import ExecTaskConfig, RawExecTaskConfig
from yurt.runtime.client.drivers.protocol import (
    ExecInput,
    ExecOutput,
    ExecRequest,
    Fingerprint,
    TaskConfig,
)
from yurt.runtime.client.drivers.rawexec import RawExecDriver, RawExecPluginConfig
from yurt.runtime.client.drivers.users import SETPRIV
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
#: An exec session's first words inside the task's root: enter its working directory ($1).
INNER_CD: Final = 'cd "$1" || exit 126; shift; exec "$@"'
#: plugins/drivers/driver.go `DriverRequiresRootMessage`.
REQUIRES_ROOT: Final = "Driver must run as root"
#: plugins/drivers/driver.go `NoCgroupMountMessage`, and why here.
NO_CGROUPS: Final = ("Failed to discover cgroup mount point: the v1 memory and cpu "
                     "hierarchies, or a cgroup v2 tree with both controllers, are needed "
                     "for the resource limits")
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
    #: The capabilities a task may have (drivers/exec/driver.go `allow_caps`, Nomad's
    #: default: capabilities.go `NOMAD_DEFAULTS`); names as Nomad accepts them.
    allow_caps: list[str] = msgspec.field(
        default_factory=lambda: sorted(c.upper() for c in capabilities.NOMAD_DEFAULTS))


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


def with_capabilities(prefix: list[str], caps: frozenset[str], *, ambient: bool) -> list[str]:
    """`prefix` (a setpriv user switch ending in "--", or nothing) made to leave the command
    exactly `caps` (capabilities.py `setpriv_options`): one setpriv does both, so the switch
    of user and the ambient set happen in the order that keeps the capabilities."""
    options = capabilities.setpriv_options(caps, ambient=ambient)
    if prefix and Path(prefix[0]).name == SETPRIV and "--" in prefix:
        end = prefix.index("--")
        return [*prefix[:end], *options, *prefix[end:]]
    return [shutil.which(SETPRIV) or SETPRIV, *options, "--", *prefix]


def _host_places(rootfs: Path, task_dir: Path, alloc_dir: Path) -> dict[str, Path | None]:
    """The task root's top-level names and the host directories behind them (None: a fresh
    tmpfs of the task, where any path can be made)."""
    places: dict[str, Path | None] = {"alloc": alloc_dir / "alloc", "local": task_dir / "local",
                                      "secrets": task_dir / "secrets", "tmp": None, "dev": None}
    try:
        for entry in rootfs.iterdir():
            if not entry.name.startswith("."):
                places.setdefault(entry.name, entry)
    except OSError:
        pass
    return places


def check_destination(places: dict[str, Path | None], what: str, destination: str,
                      is_dir: bool) -> None:
    """Refuse a mount or device destination execstart.sh could not make safely: relative,
    with "..", the root or /proc, through a symlink (it would leave the task root), or
    missing under the read-only host part of the root (`places`, from `_host_places`).
    Blocking (lstat): cheap, and only at a start.

    Raises:
        DriverError: (not recoverable) naming `what` and the destination.
    """
    def refuse(why: str) -> DriverError:
        return DriverError(f'{what}: invalid destination "{destination}": {why}')

    if not destination.startswith("/"):
        raise refuse("must be an absolute path inside the task")
    parts = [p for p in destination.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise refuse('must not contain ".."')
    if not parts or parts[0] == "proc":
        raise refuse("cannot mount over the task's root or /proc")
    if parts[0] not in places:
        return  # a new top-level directory on the task root's tmpfs
    host = places[parts[0]]
    if host is None:
        return
    if host.is_symlink():
        raise refuse(f"/{parts[0]} is a symbolic link in the task root")
    writable = parts[0] in ("alloc", "local", "secrets")
    for depth in range(1, len(parts)):
        host = host / parts[depth]
        if host.is_symlink():
            raise refuse(f"/{'/'.join(parts[:depth + 1])} is a symbolic link")
        if not host.exists():
            if writable:
                return
            raise refuse(f"/{parts[0]} is read-only in the task root and "
                         f"/{'/'.join(parts[:depth + 1])} does not exist there")
    if host.is_dir() != is_dir:
        kind = "a directory" if host.is_dir() else "a file"
        raise refuse(f"it is {kind} in the task root")


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

    def _capabilities(self, cfg: ExecTaskConfig) -> frozenset[str]:
        """The task's capability set (capabilities.py `calculate`), without `mknod` where
        the task has no devices cgroup and its `cap_add` does not name it. Raises
        DriverError."""
        system = capabilities.supported()
        for option in ("cap_add", "cap_drop"):
            bad = capabilities.unsupported(getattr(cfg, option), system)
            if bad:  # drivers/exec/driver.go `TaskConfig.validate`
                raise DriverError(f"failed driver config validation: {option} configured with "
                                  "capabilities not supported by system: "
                                  f"{capabilities.text(bad)}")
        caps = capabilities.calculate(self.exec_config.allow_caps, cfg.cap_add, cfg.cap_drop,
                                      system)
        if not self._has_devices_cgroup() and "mknod" not in capabilities.new(cfg.cap_add,
                                                                               system):
            caps -= {"mknod"}  # no devices cgroup to stop it opening what it makes
        return caps

    def _has_devices_cgroup(self) -> bool:
        """Whether a start gets a devices cgroup (limits.py `V1Limits.devices_cgroup`)."""
        return isinstance(self.limits, limits.V1Limits) and self.limits.devices is not None

    def _check_binds(self, config: TaskConfig) -> None:
        """`check_destination` of every mount and device. Blocking (lstat). Raises
        DriverError."""
        assert config.task_dir is not None
        assert config.alloc_dir is not None
        places = _host_places(self.rootfs, config.task_dir, config.alloc_dir)
        for mount in config.mounts:
            check_destination(places, f"volume mount of {mount.host_path}", mount.task_path,
                              Path(mount.host_path).is_dir())
            if mount.propagation_mode not in ("", "private"):
                # The task's mount namespace is private (util-linux `unshare --mount`), so
                # a slave or shared bind would propagate nothing: refused, not pretended.
                raise DriverError(f"volume mount of {mount.host_path}: propagation_mode "
                                  f'"{mount.propagation_mode}" is not supported by the exec '
                                  'driver (only "private")')
        for device in config.devices:
            check_destination(places, f"device {device.host_path}", device.task_path, False)
            if not device.permissions or set(device.permissions) - set("rwm"):
                raise DriverError(f"device {device.host_path}: invalid permissions "
                                  f'"{device.permissions}": expected some of "rwm"')

    async def start_task(self, config: TaskConfig) -> TaskHandle:
        if config.task_dir is None or config.alloc_dir is None:
            raise DriverError("exec needs a task directory and an alloc directory")
        if self.limits is None:
            raise DriverError(f"exec: {NO_CGROUPS}")
        try:
            cfg = msgspec.convert(config.driver_config, ExecTaskConfig)
        except msgspec.ValidationError as e:
            raise DriverError(f"invalid exec config: {e}") from None
        self._capabilities(cfg)  # refused here, before anything of the start exists
        await self._ensure_rootfs()
        await trio.to_thread.run_sync(self._check_binds, config)
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
        binds: list[str] = []
        for mount in config.mounts:
            binds += [mount.host_path, mount.task_path, "ro" if mount.readonly else "rw"]
        for device in config.devices:
            binds += [device.host_path, device.task_path, f"dev-{device.permissions}"]
        prefix = with_capabilities(prefix, self._capabilities(cfg), ambient=bool(config.user))
        devices = (self.limits.devices_cgroup(f"{config.alloc_id}.{state_dir.name}")
                   if isinstance(self.limits, limits.V1Limits) else None)
        argv = [self.unshare, *namespaces, "--", "/bin/sh", "-c", WRAPPER, str(EXECSTART),
                str(self.rootfs), str(state_dir / "root"), str(config.alloc_dir / "alloc"),
                str(config.task_dir / "local"), str(config.task_dir / "secrets"),
                config.name, cfg.work_dir or "/", str(devices or ""),
                str(len(config.mounts) + len(config.devices)),
                *binds, "--", *prefix, in_task_root(command, config.task_dir, config.alloc_dir),
                *cfg.args]
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
        caps = self._capabilities(cfg)
        nsenter = shutil.which("nsenter") or "nsenter"
        # A terminal from the task's own devpts (execstart.sh), where the command sees it,
        # reached through the task's root without following its links (execstream.py
        # `open_task_ptmx`: its /dev is the task's to change); a task started before it
        # had one gets the host's.
        task_root = f"/proc/{init}/root"
        # With a terminal, the command leads its own session in the task's PID namespace
        # and takes the terminal (`setsid --ctty`): the session `nsenter` leads is outside
        # it, so a shell there could not make its job its terminal's foreground.
        takes_tty = [shutil.which("setsid") or "setsid", "--ctty"] if request.tty else []

        def enter(words: list[str], work_dir: str) -> tuple[list[str], str]:
            assert config.task_dir is not None
            command = in_task_root(words[-1], config.task_dir, config.alloc_dir)
            prefix = with_capabilities(words[:-1], caps, ambient=bool(config.user))
            # The working directory is entered inside the root: nsenter's `--wd=PATH`
            # resolves PATH before it enters, outside the task's root; a bare `--wd` starts
            # in the task's own (inside its root), and the `cd` goes to `work_dir`.
            return [nsenter, f"--target={init}", "--mount", "--uts", "--ipc", "--pid",
                    "--root", "--wd", "--", "/bin/sh", "-c", INNER_CD, "yurt-exec",
                    cfg.work_dir or "/", *takes_tty, *prefix, command], str(config.task_dir)

        plain = dict(config.driver_config)
        for option in ("pid_mode", "ipc_mode", "cap_add", "cap_drop"):
            plain.pop(option, None)  # raw_exec's session reads only command, args, work_dir
        request = dataclasses.replace(request, task=dataclasses.replace(config,
                                                                        driver_config=plain))
        return await execstream.exec_beside(request, env_allow=self.config.env_allow,
                                            cgroup=task.cgroup, inputs=inputs,
                                            outputs=outputs, enter=enter,
                                            task_root=task_root if request.tty else None)

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
    bad = capabilities.unsupported(options.allow_caps, capabilities.supported())
    if bad:  # drivers/exec/driver.go `Config.validate`
        raise DriverError("invalid exec plugin config: allow_caps configured with "
                          f"capabilities not supported by system: {capabilities.text(bad)}")
    return ExecDriver(options)

"""Task `config {}` schemas of the built-in drivers, by driver name in `TASK_CONFIG`.

The jobspec validates task configs against them (runtime/jobspec/rules.py): a typo in a driver
option is reported at `yurt job validate` time with its file and line, not when the task first
starts. This is the one module of the client the jobspec may import (tests/test_layers.py).

Field names are the jobspec's (snake_case, as Nomad's drivers declare them). Duration options
stay strings, as in Nomad's driver configs, but are checked to parse here, so a bad one fails
validation too.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

import msgspec

from yurt.runtime.lib.durations import parse_duration


class _Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    #: Options that hold Go duration strings.
    DURATIONS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in self.DURATIONS:
            value = getattr(self, name)
            if value:
                try:
                    parse_duration(value)
                except ValueError as e:
                    raise ValueError(f"{name}: {e}") from None

    def duration(self, name: str) -> int:
        """The named duration option in nanoseconds (0 when empty)."""
        value: str = getattr(self, name)
        return parse_duration(value) if value else 0


class MockTaskConfig(_Config):
    """mock_driver's task config: every field of Nomad's `drivers/mock/driver.go` `TaskConfig`."""

    DURATIONS: ClassVar[tuple[str, ...]] = (
        "run_for", "start_block_for", "kill_after", "plugin_exit_after",
        "stdout_repeat_duration", "stderr_repeat_duration",
    )
    run_for: str = ""
    exit_code: int = 0
    exit_signal: int = 0
    exit_err_msg: str = ""
    start_error: str = ""
    start_error_recoverable: bool = False
    start_block_for: str = ""
    kill_after: str = ""
    plugin_exit_after: str = ""
    signal_error: str = ""
    stdout_string: str = ""
    stdout_repeat: int = 0
    stdout_repeat_duration: str = ""
    stderr_string: str = ""
    stderr_repeat: int = 0
    stderr_repeat_duration: str = ""
    driver_ip: str = ""
    driver_advertise: bool = False
    driver_port_map: str = ""
    exec_command: dict[str, Any] | None = None


class RawExecTaskConfig(_Config):
    """raw_exec's task config: the command, its arguments and working directory."""

    command: str
    args: list[str] = msgspec.field(default_factory=list)
    work_dir: str = ""


class ExecTaskConfig(RawExecTaskConfig):
    """exec's task config (drivers/exec/driver.go `TaskConfig`): raw_exec's, where `work_dir`
    is a path inside the task's root, plus the namespace and capability options."""

    #: "private" (the default) or "host": the task's PID / IPC namespace.
    pid_mode: str = ""
    ipc_mode: str = ""
    cap_add: list[str] = msgspec.field(default_factory=list)
    cap_drop: list[str] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("pid_mode", "ipc_mode"):
            if getattr(self, name) not in ("", "private", "host"):
                raise ValueError(f'{name} must be "private" or "host", '
                                 f"got {getattr(self, name)!r}")
        # drivers/exec/driver.go `TaskConfig.validate`
        if self.work_dir and not self.work_dir.startswith("/"):
            raise ValueError(f'work_dir must be absolute but got relative path "{self.work_dir}"')


class DockerMountOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A `mount` block's `bind_options`, `tmpfs_options` or `volume_options` (one shape for
    the three, as drivers/docker/config.go `DockerMount` reads only its own)."""

    propagation: str = ""
    size: int = 0
    mode: int = 0
    no_copy: bool = False
    labels: list[dict[str, str]] | dict[str, str] = msgspec.field(default_factory=dict)
    driver_config: list[dict[str, Any]] | dict[str, Any] = msgspec.field(default_factory=dict)


class DockerMount(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One `mount` block (drivers/docker/config.go `DockerMount`)."""

    type: str = "volume"
    target: str = ""
    source: str = ""
    readonly: bool = False
    bind_options: list[DockerMountOptions] | DockerMountOptions | None = None
    tmpfs_options: list[DockerMountOptions] | DockerMountOptions | None = None
    volume_options: list[DockerMountOptions] | DockerMountOptions | None = None

    def __post_init__(self) -> None:
        if self.type not in ("bind", "tmpfs", "volume"):
            raise ValueError(f'mount type must be "bind", "tmpfs" or "volume", '
                             f"got {self.type!r}")
        if not self.target:
            raise ValueError("mount needs a target")


class DockerDevice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One `devices` entry (drivers/docker/config.go `DockerDevice`)."""

    host_path: str
    container_path: str = ""
    cgroup_permissions: str = ""


class DockerAuth(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `auth` block: registry credentials for a pull (never logged)."""

    username: str = ""
    password: str = ""
    email: str = ""
    server_address: str = ""


class DockerLogging(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `logging` block: the container's docker log driver."""

    type: str = ""
    driver: str = ""
    config: list[dict[str, str]] | dict[str, str] = msgspec.field(default_factory=dict)


class DockerTaskConfig(_Config):
    """docker's task config: drivers/docker/config.go `TaskConfig`. Blocks arrive as the
    jobspec gives them (a list of maps, or one map from JSON); runtime/client/drivers/docker/
    create.py folds them. Options yurt cannot honour are refused here, at validation."""

    DURATIONS: ClassVar[tuple[str, ...]] = ("image_pull_timeout",)
    image: str
    advertise_ipv6_address: bool = False
    args: list[str] = msgspec.field(default_factory=list)
    auth: list[DockerAuth] | DockerAuth | None = None
    auth_soft_fail: bool = False
    cap_add: list[str] = msgspec.field(default_factory=list)
    cap_drop: list[str] = msgspec.field(default_factory=list)
    cgroupns: str = ""
    command: str = ""
    cpuset_cpus: str = ""
    cpu_hard_limit: bool = False
    cpu_cfs_period: int = 0
    container_exists_attempts: int = 0
    devices: list[DockerDevice] = msgspec.field(default_factory=list)
    dns_search_domains: list[str] = msgspec.field(default_factory=list)
    dns_options: list[str] = msgspec.field(default_factory=list)
    dns_servers: list[str] = msgspec.field(default_factory=list)
    entrypoint: list[str] = msgspec.field(default_factory=list)
    extra_hosts: list[str] = msgspec.field(default_factory=list)
    force_pull: bool = False
    group_add: list[str] = msgspec.field(default_factory=list)
    healthchecks: list[dict[str, Any]] | dict[str, Any] = msgspec.field(default_factory=dict)
    hostname: str = ""
    init: bool = False
    interactive: bool = False
    ipc_mode: str = ""
    ipv4_address: str = ""
    ipv6_address: str = ""
    isolation: str = ""
    labels: list[dict[str, str]] | dict[str, str] = msgspec.field(default_factory=dict)
    load: str = ""
    logging: list[DockerLogging] | DockerLogging | None = None
    mac_address: str = ""
    memory_hard_limit: int = 0
    mount: list[DockerMount] = msgspec.field(default_factory=list)
    mounts: list[DockerMount] = msgspec.field(default_factory=list)
    network_aliases: list[str] = msgspec.field(default_factory=list)
    network_mode: str = ""
    oom_score_adj: int = 0
    runtime: str = ""
    pids_limit: int = 0
    pid_mode: str = ""
    ports: list[str] = msgspec.field(default_factory=list)
    port_map: list[dict[str, int]] | dict[str, int] = msgspec.field(default_factory=dict)
    privileged: bool = False
    image_pull_timeout: str = ""
    readonly_rootfs: bool = False
    security_opt: list[str] = msgspec.field(default_factory=list)
    shm_size: int = 0
    storage_opt: list[dict[str, str]] | dict[str, str] = msgspec.field(default_factory=dict)
    sysctl: list[dict[str, str]] | dict[str, str] = msgspec.field(default_factory=dict)
    tty: bool = False
    ulimit: list[dict[str, str]] | dict[str, str] = msgspec.field(default_factory=dict)
    uts_mode: str = ""
    userns_mode: str = ""
    volumes: list[str] = msgspec.field(default_factory=list)
    volume_driver: str = ""
    work_dir: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.image.strip():
            raise ValueError("image must not be empty")
        if self.isolation not in ("", "default", "process"):
            raise ValueError(f'isolation {self.isolation!r} is for Windows hosts; '
                             f'expected "" or "process"')
        if self.port_map:
            raise ValueError("port_map is not supported: use ports, with the group's network "
                             "ports (Nomad deprecated port_map in 0.12)")
        for name in ("memory_hard_limit", "pids_limit", "shm_size", "cpu_cfs_period"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.cpu_cfs_period > 1_000_000:
            raise ValueError("cpu_cfs_period must be at most 1000000 (1s), "
                             f"got {self.cpu_cfs_period}")


TASK_CONFIG: Final[dict[str, type[msgspec.Struct]]] = {
    "mock_driver": MockTaskConfig,
    "raw_exec": RawExecTaskConfig,
    "exec": ExecTaskConfig,
    "docker": DockerTaskConfig,
}

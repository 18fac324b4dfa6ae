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


TASK_CONFIG: Final[dict[str, type[msgspec.Struct]]] = {
    "mock_driver": MockTaskConfig,
    "raw_exec": RawExecTaskConfig,
    "exec": ExecTaskConfig,
}

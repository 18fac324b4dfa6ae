"""mock_driver: tasks that exist only in Trio memory, driven by their `config {}`.

Nomad's `drivers/mock` (`driver.go`, `handle.go`), so yurt's whole runtime can be exercised
without a process: under `autojump_clock`, an hour of `run_for` passes in microseconds and every
ordering is deterministic.

Nothing here runs in the background. A task is a record of when it started and when it will
exit; `wait_task` sleeps until that moment or until the task is stopped, whichever is first,
so any number of waiters agree on one result and no task outlives its driver. Output
(`stdout_string` repeated `stdout_repeat` times every `stdout_repeat_duration`) is likewise
computed from the clock when asked for.

Behaviour kept from Nomad on purpose: a killed task reports its configured `exit_code` (so a
killed mock task is "successful"); `stop_task` ignores signal and timeout, but first waits
`kill_after` unless the task exits before; `plugin_exit_after` makes `wait_task` raise
`PluginShutdownError` once, as a crashed plugin would; `destroy_task` of a running task needs
`force`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, final

import msgspec
import trio

from yurt.runtime.client.drivers.configs import MockTaskConfig
from yurt.runtime.client.drivers.protocol import (
    ExecInput,
    ExecOutput,
    ExecRequest,
    ExecStdin,
    ExitResult,
    Fingerprint,
    TaskConfig,
)
from yurt.runtime.errors import DriverError, PluginShutdownError, TaskNotFoundError
from yurt.runtime.structs import TaskHandle

NAME = "mock_driver"


@dataclass
class _MockTask:
    config: MockTaskConfig
    started_at: float  # trio clock, seconds
    exit_at: float
    plugin_exit_at: float | None
    stopped: trio.Event = field(default_factory=trio.Event)
    signals: list[str] = field(default_factory=list)

    def result(self) -> ExitResult:
        return ExitResult(exit_code=self.config.exit_code, signal=self.config.exit_signal,
                          err=self.config.exit_err_msg)

    def exited(self, now: float) -> bool:
        return self.stopped.is_set() or now >= self.exit_at


def _seconds(ns: int) -> float:
    return ns / 1e9


@final
class MockDriver:
    """The mock driver. `unix_clock` (ns) stamps handles so a recovered task keeps its age."""

    def __init__(self, unix_clock: Callable[[], int]) -> None:
        self._unix_clock = unix_clock
        self._tasks: dict[str, _MockTask] = {}
        # What happened, in order, for tests: (trio time, "start"|"stop", invocation ID).
        self.log: list[tuple[float, str, str]] = []
        # The whole TaskConfig of every successful start, in order, for tests.
        self.started: list[TaskConfig] = []

    @property
    def name(self) -> str:
        return NAME

    def _task(self, task_id: str) -> _MockTask:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise TaskNotFoundError(f"task {task_id} not found") from None

    async def start_task(self, config: TaskConfig) -> TaskHandle:
        try:
            cfg = msgspec.convert(config.driver_config, MockTaskConfig)
        except msgspec.ValidationError as e:
            raise DriverError(f"failed to decode mock_driver config: {e}") from None
        if cfg.start_block_for:
            await trio.sleep(_seconds(cfg.duration("start_block_for")))
        else:
            await trio.lowlevel.checkpoint()
        if cfg.start_error:
            raise DriverError(cfg.start_error, recoverable=cfg.start_error_recoverable)
        now = trio.current_time()
        plugin_exit = cfg.duration("plugin_exit_after")
        self._tasks[config.id] = _MockTask(
            config=cfg, started_at=now, exit_at=now + _seconds(cfg.duration("run_for")),
            plugin_exit_at=now + _seconds(plugin_exit) if plugin_exit else None)
        self.log.append((now, "start", config.id))
        self.started.append(config)
        return TaskHandle(driver=NAME, task_id=config.id, state="running",
                          driver_state={"started_at_unix_ns": self._unix_clock(),
                                        "config": config.driver_config})

    async def wait_task(self, task_id: str) -> ExitResult:
        task = self._task(task_id)
        deadline = task.exit_at
        if task.plugin_exit_at is not None:
            deadline = min(deadline, task.plugin_exit_at)
        with trio.move_on_at(deadline):
            await task.stopped.wait()
        if not task.stopped.is_set() and task.plugin_exit_at is not None and (
                trio.current_time() < task.exit_at):
            task.plugin_exit_at = None  # the plugin "crashes" once
            raise PluginShutdownError()
        await trio.lowlevel.checkpoint()
        return task.result()

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        task = self._task(task_id)
        if task.config.kill_after:
            with trio.move_on_at(min(task.exit_at,
                                     trio.current_time() + _seconds(task.config.duration(
                                         "kill_after")))):
                await task.stopped.wait()
        else:
            await trio.lowlevel.checkpoint()
        if not task.exited(trio.current_time()):
            self.log.append((trio.current_time(), "stop", task_id))
        task.stopped.set()

    async def destroy_task(self, task_id: str, *, force: bool) -> None:
        task = self._task(task_id)
        await trio.lowlevel.checkpoint()
        if not task.exited(trio.current_time()) and not force:
            raise DriverError("cannot destroy running task")
        del self._tasks[task_id]

    async def signal_task(self, task_id: str, signal: str) -> None:
        task = self._task(task_id)
        await trio.lowlevel.checkpoint()
        if task.config.signal_error:
            raise DriverError(task.config.signal_error)
        task.signals.append(signal)

    async def recover_task(self, handle: TaskHandle) -> None:
        await trio.lowlevel.checkpoint()
        if handle.task_id in self._tasks:
            return
        # A task from before an agent restart: recreate it with what is left of run_for.
        cfg = msgspec.convert(handle.driver_state.get("config", {}), MockTaskConfig)
        elapsed = self._unix_clock() - int(handle.driver_state.get("started_at_unix_ns", 0))
        now = trio.current_time()
        remaining = max(cfg.duration("run_for") - elapsed, 0)
        self._tasks[handle.task_id] = _MockTask(config=cfg, started_at=now,
                                                exit_at=now + _seconds(remaining),
                                                plugin_exit_at=None)

    async def exec_task(self, task_id: str, request: ExecRequest,
                        inputs: trio.abc.ReceiveChannel[ExecInput],
                        outputs: trio.abc.SendChannel[ExecOutput]) -> int:
        """Nomad's mock exec: the command `showinput` answers with the tty flag and all of its
        stdin; any other runs the task's `exec_command` (a mock config: `run_for`,
        `exit_code`, `stdout_string`, `stderr_string`)."""
        task = self._task(task_id)
        if task.exited(trio.current_time()):
            raise DriverError("task is not running")
        if request.command == ["showinput"]:
            stdin = b""
            async for item in inputs:
                if isinstance(item, ExecStdin):
                    stdin += item.data
                    if item.close:
                        break
            config = MockTaskConfig(stdout_string=(
                f"TTY: {str(request.tty).lower()}\nStdin:\n{stdin.decode(errors='replace')}\n"))
        elif task.config.exec_command is None:
            raise DriverError("no exec command is configured")
        else:
            try:
                config = msgspec.convert(task.config.exec_command, MockTaskConfig)
            except msgspec.ValidationError as e:
                raise DriverError(f"failed to decode exec_command: {e}") from None
        await trio.sleep(_seconds(config.duration("run_for")))
        if config.stdout_string:
            await outputs.send(ExecOutput("stdout", config.stdout_string.encode()))
        if config.stderr_string:
            await outputs.send(ExecOutput("stderr", config.stderr_string.encode()))
        await outputs.send(ExecOutput("stdout", close=True))
        await outputs.send(ExecOutput("stderr", close=True))
        return config.exit_code

    async def fingerprint(self) -> AsyncIterator[Fingerprint]:
        """Always healthy (Nomad's mock driver sets `driver.mock_driver`)."""
        yield Fingerprint("healthy", "Healthy", {"driver.mock_driver": "true"})
        await trio.sleep_forever()

    def signals(self, task_id: str) -> list[str]:
        return list(self._task(task_id).signals)

    def stdout(self, task_id: str) -> str:
        """What the task has written to stdout by now."""
        return self._output(task_id, "stdout")

    def stderr(self, task_id: str) -> str:
        return self._output(task_id, "stderr")

    def _output(self, task_id: str, stream: str) -> str:
        task = self._task(task_id)
        cfg = task.config
        text: str = getattr(cfg, f"{stream}_string")
        if not text:
            return ""
        repeat: int = getattr(cfg, f"{stream}_repeat")
        every = cfg.duration(f"{stream}_repeat_duration")
        until = min(trio.current_time(), task.exit_at)
        if task.stopped.is_set():
            until = min(until, trio.current_time())
        if every > 0:
            repeat = min(repeat, int((until - task.started_at) / _seconds(every)))
        return text * (1 + repeat)


def plugin(config: dict[str, Any]) -> MockDriver:
    """Entry point (`yurt.drivers`): the mock driver, on the wall clock."""
    return MockDriver(time.time_ns)

"""Script checks: the check's command run beside its task through the driver's exec path,
as `alloc exec` runs a command (the task's environment, user and directories).

The runner is looked up when the probe runs, not when the check is added: a group's checks
start before its tasks do, and a task restarts under a new handle. A task that is not
running, or whose driver cannot exec, makes the probe fail with a message that says so.

The check knows its alloc runner only as a `ScriptHost`: the task runners by name, each an
`ExecTarget` (what the probe reads of it, and its exec path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import trio

from yurt.runtime.client.checks.probes import ScriptRunner
from yurt.runtime.client.drivers.protocol import (
    Driver,
    ExecDriver,
    ExecInput,
    ExecOutput,
    ExecRequest,
    TaskConfig,
)
from yurt.runtime.structs import TASK_STATE_RUNNING, TaskHandle, TaskState
from yurt.runtime.structs.service import ServiceCheck

#: Output a script check keeps (the rest is read and dropped, so the command never blocks).
MAX_SCRIPT_OUTPUT = 4096


class ExecTarget(Protocol):
    """What a script check needs of its task's runner: whether the task runs, and its exec
    path (`TaskRunner`, client/taskrunner/runner.py)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> TaskState: ...
    @property
    def handle(self) -> TaskHandle | None: ...
    @property
    def driver(self) -> Driver: ...
    def exec_config(self, task_id: str) -> TaskConfig: ...


class ScriptHost(Protocol):
    """What a script check needs of its alloc runner: the task runners by name."""

    @property
    def task_runners(self) -> Mapping[str, ExecTarget]: ...


def script_runner(runner: ScriptHost, check: ServiceCheck) -> ScriptRunner:
    async def run() -> tuple[int, str]:
        tr = runner.task_runners.get(check.task)
        if tr is None:
            raise RuntimeError(f'script check "{check.name}" names no task of the group')
        handle, driver = tr.handle, tr.driver
        if handle is None or tr.state.state != TASK_STATE_RUNNING:
            raise RuntimeError(f'task "{tr.name}" is not running')
        if not isinstance(driver, ExecDriver):
            raise RuntimeError(f'task "{tr.name}": its driver does not support exec')
        request = ExecRequest(command=[check.command, *check.args], tty=False,
                              task=tr.exec_config(handle.task_id))
        inputs_send, inputs = trio.open_memory_channel[ExecInput](0)
        outputs, received = trio.open_memory_channel[ExecOutput](16)
        output = bytearray()

        async def collect() -> None:
            async with received:
                async for item in received:
                    if len(output) < MAX_SCRIPT_OUTPUT:
                        output.extend(item.data[:MAX_SCRIPT_OUTPUT - len(output)])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect)
            await inputs_send.aclose()  # no stdin
            async with outputs:
                code = await driver.exec_task(handle.task_id, request, inputs, outputs)
        return code, output.decode(errors="replace")

    return run

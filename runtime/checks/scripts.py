"""Script checks: the check's command run beside its task through the driver's exec path,
as `alloc exec` runs a command (the task's environment, user and directories).

The runner is looked up when the probe runs, not when the check is added: a group's checks
start before its tasks do, and a task restarts under a new handle. A task that is not
running, or whose driver cannot exec, makes the probe fail with a message that says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from yurt.runtime.checks.probes import ScriptRunner
from yurt.runtime.drivers.protocol import (
    ExecDriver,
    ExecInput,
    ExecOutput,
    ExecRequest,
    TaskConfig,
)
from yurt.runtime.structs import TASK_STATE_RUNNING, Node
from yurt.runtime.structs.service import ServiceCheck
from yurt.runtime.taskenv import interpolate, node_values

if TYPE_CHECKING:
    from yurt.runtime.allocrunner.runner import AllocRunner

#: Output a script check keeps (the rest is read and dropped, so the command never blocks).
MAX_SCRIPT_OUTPUT = 4096


def script_runner(runner: AllocRunner, check: ServiceCheck, node: Node | None) -> ScriptRunner:
    async def run() -> tuple[int, str]:
        tr = runner.task_runners.get(check.task)
        if tr is None:
            raise RuntimeError(f'script check "{check.name}" names no task of the group')
        handle, driver = tr.handle, tr.driver
        if handle is None or tr.state.state != TASK_STATE_RUNNING:
            raise RuntimeError(f'task "{tr.name}" is not running')
        if not isinstance(driver, ExecDriver):
            raise RuntimeError(f'task "{tr.name}": its driver does not support exec')
        alloc_dir = runner.alloc_dir
        env = tr.env
        config = TaskConfig(
            id=handle.task_id, name=tr.name, alloc_id=tr.alloc.id, job_id=tr.alloc.job_id,
            task_group=tr.alloc.task_group,
            driver_config=interpolate(dict(tr.task.config),
                                      {**node_values(node), **env}),
            user=tr.task.user, env=env, alloc_dir=alloc_dir.path if alloc_dir else None,
            task_dir=alloc_dir.task_dir(tr.name) if alloc_dir else None)
        request = ExecRequest(command=[check.command, *check.args], tty=False, task=config)
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

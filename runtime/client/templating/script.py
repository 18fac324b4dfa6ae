"""`change_mode = "script"`: run the template's `change_script` beside the running task, the
way `alloc exec` runs a command (the driver's exec path: the task's environment, directory and
user), bounded by the script's `timeout` (Nomad's `processScript`).

Returns the event text Nomad emits and whether the task must now be killed: a success is a
"Task hook message", a failure a "Task hook failed" event, fatal when `fail_on_error`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from yurt.runtime.client.drivers.protocol import ExecDriver, ExecInput, ExecOutput, ExecRequest
from yurt.runtime.errors import YurtError
from yurt.runtime.structs.template import ChangeScript

if TYPE_CHECKING:
    from yurt.hooks.base import TaskHookContext


def _go_list(items: list[str]) -> str:
    return "[" + " ".join(items) + "]"


async def run_change_script(ctx: TaskHookContext, script: ChangeScript) -> tuple[str, bool | None]:
    """(event text, fatal): fatal is None on success, else whether to kill the task."""
    args = _go_list(script.args)
    code = -1
    error = ""
    lifecycle = ctx.lifecycle
    handle = lifecycle.handle if lifecycle is not None else None
    if lifecycle is None or handle is None:
        error = "task is not running"
    elif not isinstance(lifecycle.driver, ExecDriver):
        error = "driver does not support exec"
    else:
        request = ExecRequest(command=[script.command, *script.args], tty=False,
                              task=lifecycle.exec_config(handle.task_id))
        send_in, receive_in = trio.open_memory_channel[ExecInput](0)
        send_out, receive_out = trio.open_memory_channel[ExecOutput](16)
        driver = lifecycle.driver

        async def drain() -> None:
            async with receive_out:
                async for _ in receive_out:
                    pass

        try:
            with trio.fail_after(script.timeout / 1e9):
                async with trio.open_nursery() as nursery, send_in:
                    nursery.start_soon(drain)
                    async with send_out:
                        code = await driver.exec_task(handle.task_id, request, receive_in,
                                                      send_out)
        except trio.TooSlowError:
            error = "context deadline exceeded"
        except (YurtError, OSError) as e:
            error = str(e)
    if error:
        return (f"Template failed to run script {script.command} with arguments {args} on "
                f"change: {error}. Exit code: {code}", script.fail_on_error)
    if code != 0:
        return (f"Template ran script {script.command} with arguments {args} on change but "
                f"it exited with code: {code}", script.fail_on_error)
    return (f"Template successfully ran script {script.command} with arguments: {args}. "
            "Exit code: 0", None)

"""The mock driver's `exec_task` (Nomad's: `showinput`, `exec_command`) under the mock clock
(layer 1), and the exec websocket driving it in a real agent (layer 2)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import trio
from trio.testing import MockClock
from trio_websocket import open_websocket_url

from tests.agent_support import running_agent, wait_status
from tests.exec_support import collect, exec_url, stdin
from tests.runtime_support import unix_clock
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.drivers.protocol import (
    ExecInput,
    ExecOutput,
    ExecRequest,
    ExecStdin,
    TaskConfig,
)
from yurt.runtime.errors import DriverError


def config(**driver_config: object) -> TaskConfig:
    return TaskConfig(id="a1/t/00000000", name="t", alloc_id="a1", job_id="j", task_group="g",
                      driver_config={"run_for": "1h", **driver_config})


async def run(driver: MockDriver, command: list[str], inputs: list[ExecInput], *,
              tty: bool = False) -> tuple[int, list[ExecOutput]]:
    send_in, receive_in = trio.open_memory_channel[ExecInput](len(inputs) + 1)
    send_out, receive_out = trio.open_memory_channel[ExecOutput](16)
    for item in inputs:
        send_in.send_nowait(item)
    code = await driver.exec_task("a1/t/00000000", ExecRequest(command, tty, config()),
                                  receive_in, send_out)
    send_out.close()
    return code, [o async for o in receive_out]


async def test_mock_exec_showinput_and_exec_command(autojump_clock: MockClock) -> None:
    driver = MockDriver(unix_clock)
    await driver.start_task(config(exec_command={
        "run_for": "5s", "exit_code": 3, "stdout_string": "out", "stderr_string": "err"}))

    code, outputs = await run(driver, ["showinput"],
                              [ExecStdin(b"hello "), ExecStdin(b"there"), ExecStdin(close=True)],
                              tty=True)
    assert code == 0
    assert outputs[0] == ExecOutput("stdout", b"TTY: true\nStdin:\nhello there\n")
    assert outputs[1:] == [ExecOutput("stdout", close=True), ExecOutput("stderr", close=True)]

    before = trio.current_time()
    code, outputs = await run(driver, ["anything"], [])
    assert trio.current_time() - before == pytest.approx(5)  # its run_for, on the mock clock
    assert code == 3
    assert [(o.stream, o.data) for o in outputs if o.data] == [
        ("stdout", b"out"), ("stderr", b"err")]


async def test_mock_exec_refusals(autojump_clock: MockClock) -> None:
    driver = MockDriver(unix_clock)
    with pytest.raises(DriverError, match="not found"):
        await run(driver, ["x"], [])
    await driver.start_task(config())
    with pytest.raises(DriverError, match="no exec command is configured"):
        await run(driver, ["x"], [])
    await driver.stop_task("a1/t/00000000", 0, "SIGINT")
    with pytest.raises(DriverError, match="task is not running"):
        await run(driver, ["showinput"], [])


@pytest.mark.slow
async def test_exec_websocket_with_the_mock_driver(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            job = {"Job": {"ID": "m", "Type": "service", "TaskGroups": [{"Name": "g", "Tasks": [
                {"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "1h"}}]}]}}
            assert (await a.client.post("/v1/jobs", json=job)).status_code == 200
            alloc_id = (await wait_status(a.client, "m", "running"))["ID"]
            params = {"task": "t", "command": json.dumps(["showinput"]), "tty": "false"}
            async with open_websocket_url(exec_url(a, alloc_id, params)) as ws:
                await ws.send_message(stdin(b"abc"))
                await ws.send_message(stdin(close=True))
                session = await collect(ws, wait_close=True)
            assert base64.b64decode(session.frames[0]["stdout"]["data"]) == (
                b"TTY: false\nStdin:\nabc\n")
            assert session.exit_code == 0
            assert session.close_code == 1000
            other = {"task": "t", "command": json.dumps(["ls"])}
            async with open_websocket_url(exec_url(a, alloc_id, other)) as ws:
                refused = await collect(ws)
            assert (refused.close_code, refused.close_reason) == (
                1011, "no exec command is configured")

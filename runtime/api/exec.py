"""/v1/client/allocation/:id/exec: Nomad's `alloc exec` websocket; /v1/job/:id/action, Nomad
1.7's job action, the same session running a task's `action` block's command.

The protocol is Nomad's (command/agent/alloc_endpoint.go, api/allocations_exec.go): the query
names the `task`, the `command` (a JSON array) and `tty`; the client sends JSON frames
`{"stdin": {"data": base64}}`, `{"stdin": {"close": true}}`, `{"tty_size": {"height", "width"}}`
and `{}` heartbeats; the server sends `{"stdout"|"stderr": {"data": base64}}`, each stream's
`{"…": {"close": true}}`, then `{"exited": true, "result": {"exit_code": n}}`, and closes with
1000. As in Nomad, the upgrade is accepted first and every refusal is a close frame whose
reason is Nomad's message: 1008 for what would be a 4xx (unknown allocation 404, no task or
no command 400, a task not started or not running 404), 1011 for a 500 (the command cannot
start).

The session is three tasks in one nursery: the reader turns frames into the driver's inputs,
the driver runs the command (client/drivers/protocol.py `ExecDriver`), the writer sends what it
writes. The buffers between them are small and bounded: a client that does not read stalls
the command's output, as a terminal would. A client that goes away (its disconnect is only
seen by reading) cancels the session, and the driver kills and reaps the command. As in
Nomad, stdin moves at the command's pace: while a command leaves its stdin unread, a client
that keeps sending holds the reader, and its disconnect is seen once the input moves (or the
command exits). After the
exit frame the server lets the client close first (CLOSE_GRACE), then closes itself (see
`_client_closed_within`).

The task's environment is not persisted: it is rebuilt here from the task runner the way its
start built it (`TaskRunner.env`, the interpolated driver config, the task's user and dirs).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from yurt.runtime.api.authz import PERMISSION_DENIED, namespace_visible
from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError
from yurt.runtime.client.drivers.protocol import (
    ExecDriver,
    ExecInput,
    ExecOutput,
    ExecRequest,
    ExecResize,
    ExecStdin,
)
from yurt.runtime.errors import DriverError
from yurt.runtime.lib.goparse import parse_go_bool
from yurt.runtime.structs import TASK_STATE_RUNNING, ZERO_TIME

if TYPE_CHECKING:
    pass

CLOSE_NORMAL: Final = 1000
#: Nomad's `toWsCode`: 500 is an internal error, every other status a policy violation.
CLOSE_POLICY: Final = 1008
CLOSE_INTERNAL: Final = 1011
#: A close frame's reason is at most 123 bytes.
MAX_REASON: Final = 123
BUFFER: Final = 16
#: How long the end of a session waits for the client's close before sending its own.
CLOSE_GRACE: Final = 1.0


class _Refused(Exception):
    """An exec that cannot go on: Nomad's HTTP status for it, and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _IO(msgspec.Struct):
    data: bytes = b""  # base64 in JSON, as Go encodes []byte
    close: bool = False


class _Size(msgspec.Struct):
    height: int = 0
    width: int = 0


class _Frame(msgspec.Struct):
    """Nomad's `ExecTaskStreamingRequestMsg`; a frame with neither field is a heartbeat."""

    stdin: _IO | None = None
    tty_size: _Size | None = None
    setup: Any = None


class _Handshake(msgspec.Struct):
    version: int = 0
    auth_token: str = ""


_FRAME: Final = msgspec.json.Decoder(_Frame)
_HANDSHAKE: Final = msgspec.json.Decoder(_Handshake)


def _bool(value: str | None, name: str) -> bool:
    if value is None or value == "":
        return False
    try:
        return parse_go_bool(value)  # as Nomad parses `tty` and `ws_handshake`
    except ValueError:
        raise _Refused(400, f"{name} value is not a boolean: {value!r}") from None


def _command(value: str | None) -> list[str]:
    """The `command` query parameter: a JSON array of strings (missing: none)."""
    if not value:
        return []
    try:
        command = json.loads(value)
    except ValueError as e:
        raise _Refused(400, f"failed to parse command: {e}") from None
    if not isinstance(command, list) or not all(isinstance(w, str) for w in command):
        raise _Refused(400, "failed to parse command: not a JSON array of strings")
    return command


def output_frame(output: ExecOutput) -> str:
    body: dict[str, Any] = {"close": True} if output.close else {
        "data": base64.b64encode(output.data).decode("ascii")}
    return json.dumps({output.stream: body})


def exit_frame(code: int) -> str:
    return json.dumps({"exited": True, "result": {"exit_code": code}})


@dataclass(frozen=True)
class _Wanted:
    """What a session asks for: the allocation, task and command, or for a job action
    (Nomad 1.7) the job and the action whose command runs."""

    alloc_id: str
    task: str
    command: list[str]
    tty: bool
    job_id: str = ""
    action: str = ""


async def _target(ctx: Context, websocket: WebSocket, wanted: _Wanted
                  ) -> tuple[ExecDriver, str, ExecRequest]:
    """The driver, task id and request of this exec, checked in Nomad's order
    (client/alloc_endpoint.go `execImpl`)."""
    alloc_id, task, command, tty = wanted.alloc_id, wanted.task, wanted.command, wanted.tty
    await ctx.wait_restored(alloc_id)
    from yurt.runtime.client.allocrunner.runner import real

    runner = real(ctx.runners().get(alloc_id))
    if runner is None:
        raise _Refused(404, f'Unknown allocation "{alloc_id}"')
    namespace = runner.alloc.namespace
    # client/alloc_endpoint.go `execImpl`: alloc-exec in the allocation's namespace, and
    # alloc-node-exec where the driver does not isolate the task's filesystem (below: no
    # driver of yurt's does, raw_exec and mock_driver are Nomad's `FSIsolationNone`).
    if not namespace_visible(websocket, namespace, "alloc-exec"):
        raise _Refused(403, PERMISSION_DENIED)
    if not task:
        raise _Refused(400, "must provide task name")
    if wanted.job_id and wanted.job_id != runner.alloc.job_id:
        raise _Refused(400, f"job {wanted.job_id} does not have allocation {alloc_id}")
    if wanted.action:
        group = (runner.alloc.job.lookup_group(runner.alloc.task_group)
                 if runner.alloc.job is not None else None)
        spec = next((t for t in group.tasks if t.name == task), None) if group else None
        if spec is None:
            raise _Refused(400, f"task {task} not found in allocation {alloc_id}")
        action = next((a for a in spec.actions if a.name == wanted.action), None)
        if action is None:
            raise _Refused(400, f"action {wanted.action} not found in task {task}")
        command = [action.command, *action.args]
    if not command:
        raise _Refused(400, "command is not present")
    tr = runner.task_runners.get(task)
    if tr is None:
        raise _Refused(400, f'unknown task name "{task}"')
    if tr.state.started_at == ZERO_TIME:
        raise _Refused(404, f'task "{task}" not started yet.')
    handle = tr.handle
    if handle is None or tr.state.state != TASK_STATE_RUNNING:
        raise _Refused(404, f'task "{task}" is not running.')
    driver = tr.driver
    if not isinstance(driver, ExecDriver):
        raise _Refused(400, f'task "{task}": its driver does not support exec')
    if getattr(driver, "fs_isolation", "none") == "none" and not namespace_visible(
            websocket, namespace, "alloc-node-exec"):
        raise _Refused(403, PERMISSION_DENIED)
    return driver, handle.task_id, ExecRequest(command=command, tty=tty,
                                               task=tr.exec_config(handle.task_id))


async def _close(websocket: WebSocket, status: int, message: str) -> None:
    code = CLOSE_INTERNAL if status == 500 else CLOSE_POLICY
    reason = message.encode()[:MAX_REASON].decode("utf-8", "ignore")
    await websocket.close(code=code, reason=reason)


async def not_upgraded(ctx: Context, request: Request) -> Response:
    """A plain GET of the exec path: Nomad's websocket upgrader refuses it with 400."""
    raise ApiError(400, "websocket: the client is not using the websocket protocol: "
                        "'upgrade' token not found in 'Connection' header")


async def alloc_exec(ctx: Context, websocket: WebSocket) -> None:
    await _serve(ctx, websocket, action=False)


async def job_action(ctx: Context, websocket: WebSocket) -> None:
    """/v1/job/:id/action (Nomad 1.7, command/agent/job_endpoint.go `jobRunAction`): the
    query's `action` of `task` in the allocation `allocID` of the job, run as an exec."""
    await _serve(ctx, websocket, action=True)


async def _serve(ctx: Context, websocket: WebSocket, *, action: bool) -> None:
    await websocket.accept()
    try:
        query = websocket.query_params
        tty = _bool(query.get("tty"), "tty")
        if action:
            wanted = _Wanted(query.get("allocID", ""), query.get("task", ""), [], tty,
                             job_id=websocket.path_params["job_id"],
                             action=query.get("action", ""))
        else:
            wanted = _Wanted(websocket.path_params["id"], query.get("task", ""),
                             _command(query.get("command")), tty)
        if _bool(query.get("ws_handshake"), "ws_handshake"):
            await _read_handshake(websocket)
        if not ctx.agent.ready.is_set():
            await ctx.agent.ready.wait()  # the API is up before the agent's state is loaded
        driver, task_id, request = await _target(ctx, websocket, wanted)
    except _Refused as e:
        await _close(websocket, e.status, str(e))
        return
    except WebSocketDisconnect:
        return
    await _Session(websocket).run(driver, task_id, request)


async def _read_handshake(websocket: WebSocket) -> None:
    """Nomad's optional first frame (`ws_handshake=true`): `{"version": 1, "auth_token"}`.
    The token itself was checked on the upgrade request (authz.py `guard`)."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", CLOSE_NORMAL))
    try:
        handshake = _HANDSHAKE.decode(message.get("text") or message.get("bytes") or b"")
    except msgspec.DecodeError as e:
        raise _Refused(400, str(e)) from None
    if handshake.version != 1:
        raise _Refused(400, f"unexpected handshake value: {handshake.version}")


@dataclass
class _Session:
    websocket: WebSocket
    #: Why the session ended early (Nomad's status and message), if it did.
    failure: _Refused | None = None
    gone: bool = False

    async def run(self, driver: ExecDriver, task_id: str, request: ExecRequest) -> None:
        inputs_send, inputs = trio.open_memory_channel[ExecInput](BUFFER)
        outputs, outputs_receive = trio.open_memory_channel[ExecOutput](BUFFER)
        code: int | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read, inputs_send, nursery.cancel_scope)
            async with trio.open_nursery() as writers:
                writers.start_soon(self._write, outputs_receive, nursery.cancel_scope)
                async with outputs:
                    try:
                        code = await driver.exec_task(task_id, request, inputs, outputs)
                    except DriverError as e:
                        self.failure = _Refused(500, str(e))
            # Every output frame is sent by now: the writer ends with the channel.
            nursery.cancel_scope.cancel()  # the reader: input for a command that is gone
        if self.gone:
            return
        with trio.move_on_after(5) as bounded:
            bounded.shield = True  # the session's end reaches the client even when cancelled
            if self.failure is not None:
                await _close(self.websocket, self.failure.status, str(self.failure))
            elif code is not None:
                await self.websocket.send_text(exit_frame(code))
                if not await self._client_closed_within(CLOSE_GRACE):
                    await self.websocket.close(code=CLOSE_NORMAL)

    async def _client_closed_within(self, seconds: float) -> bool:
        """Whether the client closes within `seconds` (what clients do once they have the
        exit code). Closing at once, as Nomad does, would cross their close: hypercorn then
        sends its end of the connection while it answers theirs, and the clash can take the
        API server down (its `_close` sends outside its send lock)."""
        with trio.move_on_after(seconds):
            while (await self.websocket.receive())["type"] != "websocket.disconnect":
                pass  # input for a command that has exited
            return True
        return False

    async def _read(self, inputs: trio.MemorySendChannel[ExecInput],
                    session: trio.CancelScope) -> None:
        async with inputs:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self.gone = True
                    session.cancel()
                    return
                try:
                    frame = _FRAME.decode(message.get("text") or message.get("bytes") or b"")
                except msgspec.DecodeError as e:
                    self.failure = _Refused(400, f"invalid exec frame: {e}")
                    session.cancel()
                    return
                if frame.stdin is not None:
                    await inputs.send(ExecStdin(frame.stdin.data, frame.stdin.close))
                elif frame.tty_size is not None:
                    await inputs.send(ExecResize(frame.tty_size.height, frame.tty_size.width))
                # else: a heartbeat (or `setup`, which Nomad's drivers ignore too)

    async def _write(self, outputs: trio.MemoryReceiveChannel[ExecOutput],
                     session: trio.CancelScope) -> None:
        async with outputs:
            async for output in outputs:
                try:
                    await self.websocket.send_text(output_frame(output))
                except (WebSocketDisconnect, RuntimeError, OSError):
                    self.gone = True  # the client went away mid-send
                    session.cancel()
                    return

"""`yurt alloc exec`: Nomad's `nomad alloc exec`, over the agent's exec websocket.

    yurt alloc exec [-i] [-t] [-task TASK] [-job] [-group GROUP] [-e CHAR] ALLOC COMMAND ...

Flags are Nomad's, parsed as Go's `flag` package parses them (what Nomad users type):
`-task NAME` or `-task=NAME`, one or two dashes, booleans as `-t` or `-t=false`, and flags
only before ALLOC, so that everything after it is the command's own. `-i` (stdin passed to
the command) is on by default; `-t` (a pseudo-terminal) is on when stdin and stdout are both
terminals. With `-job`, ALLOC is a job ID and one of its allocations is used (of
`-group`'s, at random, a running one if any, as Nomad's `getRandomJobAlloc`).
`-e` is the escape character of a `-t` session (escape.py: `~.` closes it).

With `-t` the local terminal is put in raw mode for the session (every key, Ctrl-C included,
goes to the remote command, whose own terminal interprets it) and restored however the
session ends; its size is sent first, then again on every SIGWINCH. The exit code is the
command's. Errors are Nomad's messages; exit 1 when the exec fails, 2 for bad usage.

Stdin is read in a worker thread rather than as a non-blocking stream: O_NONBLOCK would be
set on the terminal's open file, which the user's shell shares, and a regular file (`< file`)
cannot be waited on. The thread is abandoned, blocked in its read, when the session ends,
and the process exits right after.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import click

from yurt.runtime.cli.escape import EscapeFilter
from yurt.runtime.cli.goflags import GO_FLAG_COMMAND, GoFlagError, parse_session_flags
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    import ssl

    from trio_websocket import WebSocketConnection

HEARTBEAT: Final = 10.0  # Nomad's client sends `{}` this often
STDIN_CHUNK: Final = 2048


class UsageError(Exception):
    """Bad flags or arguments (exit 2)."""


@dataclass
class ExecFlags:
    stdin: bool = True
    tty: bool | None = None  # None: a terminal on both stdin and stdout decides
    task: str = ""
    job: bool = False
    group: str = ""  # with -job: pick among this task group's allocations
    escape: str = "~"  # "" (`-e none`): no escape sequence


def parse_flags(args: Sequence[str]) -> tuple[ExecFlags, list[str]]:
    """Go `flag` parsing of Nomad's exec flags (runtime/cli/goflags.py): (the flags, the
    positional arguments). `-h` prints the usage and ends the command."""
    try:
        given, rest, escape = parse_session_flags(
            args, booleans=("i", "t", "job"), valued=("task", "e", "group"))
    except GoFlagError as e:
        raise UsageError(str(e)) from None
    flags = ExecFlags(escape=escape)
    for name, field in (("i", "stdin"), ("t", "tty"), ("job", "job"), ("task", "task"),
                        ("group", "group")):
        if name in given:
            setattr(flags, field, given[name])
    if flags.group and not flags.job:
        raise UsageError("-group is only valid with -job")
    return flags, rest


def _group_tasks(alloc: dict[str, Any]) -> list[str]:
    for group in (alloc.get("Job") or {}).get("TaskGroups") or []:
        if group.get("Name") == alloc.get("TaskGroup"):
            return [t["Name"] for t in group.get("Tasks") or []]
    return list(alloc.get("TaskStates") or {})


def choose_task(alloc: dict[str, Any], task: str) -> str:
    """The task to exec in: `task`, checked, or the allocation's only task (Nomad's
    messages otherwise). Raises UsageError."""
    names = _group_tasks(alloc)
    if task:
        if task not in names:
            found = "\n".join(f"  * {n}" for n in names)
            raise UsageError(f"Could not find task named: {task}, found:\n{found}")
        return task
    if len(names) == 1:
        return names[0]
    listed = "".join(f"  * {n}\n" for n in names)
    raise UsageError(f'Allocation "{alloc["ID"][:8]}" is running the following tasks:\n'
                     f"{listed}\nPlease specify the task.")


def _resolve_alloc(flags: ExecFlags, ident: str) -> dict[str, Any]:
    """The allocation to exec in, by ID prefix or (`-job`) one of the job's (of `-group`'s)
    at random, a running one if any (Nomad's `getRandomJobAlloc`)."""
    import random
    from urllib.parse import quote

    from yurt.runtime.cli.api_client import api, call, resolve_job
    from yurt.runtime.cli.logs import LogsError, pick_job_alloc
    from yurt.runtime.cli.output import fail

    with api() as client:
        if flags.job:
            ident = resolve_job(client, ident)
            allocs = call(client, "GET", f"/v1/job/{quote(ident, safe='')}/allocations")
            try:
                stub = {"ID": pick_job_alloc(ident, allocs, flags.group, random.choice)}
            except LogsError as e:
                fail(str(e), e.code)
        else:
            if len(ident) == 1:
                fail("Alloc ID must contain at least two characters", EXIT_USAGE)
            allocs = call(client, "GET", "/v1/allocations", params={"prefix": ident})
            if not allocs:
                fail(f'No allocation(s) with prefix or id "{ident}" found')
            if len(allocs) > 1:
                ids = "\n".join(a["ID"] for a in allocs)
                fail(f"Prefix matched multiple allocations\n\n{ids}", EXIT_USAGE)
            stub = allocs[0]
        alloc: dict[str, Any] = call(client, "GET", f"/v1/allocation/{stub['ID']}")
        return alloc


@contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """`fd`'s terminal in raw mode until the block ends, then as it was."""
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSADRAIN)  # not TCSAFLUSH: what was typed ahead is kept
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _terminal_size() -> str:
    size = os.get_terminal_size(sys.stdout.fileno())
    return json.dumps({"tty_size": {"height": size.lines, "width": size.columns}})


class _Failed(Exception):
    """The session ended without an exit code (Nomad: "failed to exec into task")."""


class _Escaped(Exception):
    """The user typed the escape sequence (`~.`): the session was closed."""


async def _session(url: str, headers: list[tuple[bytes, bytes]], *, tty: bool,
                   stdin: bool, escape: str, tls: ssl.SSLContext | None = None) -> int:
    import base64

    import trio
    from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url

    from yurt.runtime.cli.tls import socket_failure, tls_cause

    send_lock = trio.Lock()
    escapes = EscapeFilter(ord(escape)) if tty and escape else None

    async def send(ws: WebSocketConnection, frame: str) -> None:
        async with send_lock:
            # The agent closed the session (it refused the exec, the command ended):
            # `receive` reports why; what was left to send has nobody to read it.
            with contextlib.suppress(ConnectionClosed):
                await ws.send_message(frame)

    async def pump_stdin(ws: WebSocketConnection, session: trio.CancelScope) -> None:
        while True:
            read = await trio.to_thread.run_sync(os.read, sys.stdin.fileno(), STDIN_CHUNK,
                                                 abandon_on_cancel=True)
            data = read
            if escapes is not None:
                data = escapes.feed(read) if read else escapes.end()
            if data:
                await send(ws, json.dumps({"stdin": {"data": base64.b64encode(data).decode()}}))
            if escapes is not None and escapes.closed:
                session.cancel()  # `~.`: leave, and the agent ends the command
                return
            if not read:
                await send(ws, json.dumps({"stdin": {"close": True}}))
                return

    async def heartbeat(ws: WebSocketConnection) -> None:
        while True:
            await trio.sleep(HEARTBEAT)
            await send(ws, "{}")

    async def follow_size(ws: WebSocketConnection,
                          task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                          ) -> None:
        with trio.open_signal_receiver(signal.SIGWINCH) as resized:
            await send(ws, _terminal_size())  # after the receiver: no change is missed
            task_status.started()
            async for _ in resized:
                await send(ws, _terminal_size())

    async def receive(ws: WebSocketConnection) -> int | _Failed:
        """The exit code, or why there is none (returned, not raised: out of the
        nursery, it would arrive wrapped in an exception group)."""
        out, err = sys.stdout.buffer, sys.stderr.buffer
        while True:
            try:
                frame = json.loads(await ws.get_message())
            except ConnectionClosed as e:
                reason = e.reason.reason if e.reason is not None else None
                return _Failed(reason or "websocket closed before receiving exit code")
            for name, stream in (("stdout", out), ("stderr", err)):
                data = (frame.get(name) or {}).get("data")
                if data:
                    stream.write(base64.b64decode(data))
                    stream.flush()
            if frame.get("exited") and frame.get("result") is not None:
                return int(frame["result"].get("exit_code", 0))

    try:
        async with open_websocket_url(url, extra_headers=headers, ssl_context=tls) as ws, \
                trio.open_nursery() as nursery:
            if tty:  # the size first: before any input, so a command reading sees it
                await nursery.start(follow_size, ws)
            if stdin:
                nursery.start_soon(pump_stdin, ws, nursery.cancel_scope)
            nursery.start_soon(heartbeat, ws)
            code = await receive(ws)
            nursery.cancel_scope.cancel()
    except OSError as e:
        raise _Failed(socket_failure(url, e) if tls_cause(e) else str(e)) from None
    except HandshakeError as e:  # no connection (its cause says why), or the upgrade refused
        if tls_cause(e) is not None:  # said with what to set (http.py `tls_hint`)
            raise _Failed(socket_failure(url, e)) from None
        raise _Failed(str(e.__cause__ or "the websocket handshake failed")) from None
    if escapes is not None and escapes.closed:
        raise _Escaped
    if isinstance(code, _Failed):
        raise code
    return code


def run_exec(args: Sequence[str]) -> int:
    """`yurt alloc exec ARGS`: the command's exit code."""

    from yurt.runtime.cli.http import websocket_url
    from yurt.runtime.cli.output import fail

    try:
        flags, rest = parse_flags(args)
        if len(rest) < 1:
            raise UsageError("A job ID is required" if flags.job
                             else "An allocation ID is required")
        if len(rest) < 2:
            raise UsageError("A command is required")
        is_tty = sys.stdin.isatty() and sys.stdout.isatty()
        tty = is_tty if flags.tty is None else flags.tty
        if tty and not flags.stdin:
            raise UsageError("-i must be enabled if running with tty")
        alloc = _resolve_alloc(flags, rest[0])
        task = choose_task(alloc, flags.task)
    except UsageError as e:
        fail(str(e), EXIT_USAGE)
    if tty and not sys.stdin.isatty():
        fail("failed to exec into task: not a terminal")
    url = websocket_url(f"/v1/client/allocation/{alloc['ID']}/exec",
                        {"task": task, "command": json.dumps(rest[1:]),
                         "tty": "true" if tty else "false"})
    return run_session(url, tty=tty, stdin=flags.stdin, escape=flags.escape)


def run_session(url: str, *, tty: bool, stdin: bool, escape: str) -> int:
    """An exec-shaped websocket session at `url` (alloc exec, job actions) run to its end:
    the command's exit code; the terminal in raw mode while it runs with `tty`."""
    import trio

    from yurt.runtime.cli.api_client import client_token
    from yurt.runtime.cli.http import websocket_context
    from yurt.runtime.cli.output import echo, fail

    token = client_token()
    headers = [(b"X-Nomad-Token", token.encode())] if token else []
    session = partial(_session, url, headers, tty=tty, stdin=stdin, escape=escape,
                      tls=websocket_context(url))
    try:
        if tty:
            with raw_terminal(sys.stdin.fileno()):
                return trio.run(session)
        return trio.run(session)
    except _Failed as e:
        fail(f"failed to exec into task: {e}", EXIT_FAILED)
    except _Escaped:  # after the terminal is restored, at the start of a line, as Nomad
        echo("\nConnection closed", err=True)
        return EXIT_FAILED
    except BaseExceptionGroup as group:
        # Ctrl-C lands in one of the session's tasks and leaves its nursery grouped: the
        # caller gets the one KeyboardInterrupt (exit 130), not a group and a traceback.
        if group.subgroup(KeyboardInterrupt) is not None:
            raise KeyboardInterrupt from None
        raise


def register(alloc: click.Group) -> None:
    """Attach `exec` to the `alloc` group."""

    @alloc.command("exec", options_metavar="", context_settings=GO_FLAG_COMMAND)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED,
                    metavar="[-i] [-t] [-task TASK] [-job] [-group GROUP] [-e CHAR] ALLOC "
                            "COMMAND [ARGS]...")
    def alloc_exec(args: tuple[str, ...]) -> None:
        """Run a command in a task's environment, directory and cgroup, as its user.

        -i passes stdin to the command (default; -i=false to disable). -t allocates a
        pseudo-terminal (default when stdin and stdout are terminals; -t=false to disable).
        -task names the task (needed when the allocation has several). -job takes ALLOC as
        a job ID and uses one of its allocations at random, a running one if any (-group: of
        that task group). -e sets the escape character of
        a -t session (default ~; "none" for none): ~. at the start of a line closes it.
        Nomad's general options (-address, -namespace, -region, -ca-cert, ...) as every
        remote verb takes them (`yurt job status --help`). Exits with the command's code."""
        sys.exit(run_exec(args))

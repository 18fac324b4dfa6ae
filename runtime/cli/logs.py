"""`yurt alloc logs`: a task's output from the agent, as Nomad's `alloc logs` prints it.

What the flags mean (Nomad's `-tail -n -c`, with yurt's spelling):
- no flag: the whole stdout; `--stderr` the whole stderr; `--all` both, stdout's first, then
  stderr's (past output carries no timestamps, so it cannot be interleaved).
- `--tail` alone: the last 10 lines; `-n N` the last N lines and `-c BYTES` the last BYTES bytes
  (either implies `--tail`; both at once is a usage error, as in Nomad).
- `-f`: keep printing new output until the allocation is over. The agent ends a followed
  stream once the task's output is complete (runtime/api/logs.py), so `-f` ends by itself
  when the allocation finishes or its job is stopped. With `--all`, both streams are followed
  at once and written to stdout line by line in the order they arrive, never mixed within a
  line.

Lines, as in Nomad, are found from the end by reading a window of bytes: Nomad guesses 120
bytes a line and prints what the window holds; here the window grows (up to `MAX_WINDOW`)
until it holds N whole lines or the whole log, so long lines do not cut the tail short. With
`-f`, the window is read once without following (to learn its size), then the followed stream
starts at the same distance from the end; its first bytes up to that size are the backlog
whose last N lines are printed, everything after is new. Output written between the two
requests shifts the window, never loses or repeats a byte.

Ending: the end of the stream exits 0; Ctrl-C exits 130 (every streaming verb does); a reader
that goes away (`| head`) ends the command quietly with exit 0, as `cat` does, and is never
reported as an unreachable agent; an agent that cannot be reached or breaks the stream off
exits 1; an unknown allocation or task exits 1 or 2 as the API's status says.

Which allocation and task (Nomad's command/alloc_logs.go): ALLOC is an ID or a prefix; with
`-job`, the argument is a job (ID or prefix) and one of its allocations is picked at random,
a running one if there is any (`-group` narrows the pick to a task group: Nomad's
`getRandomJobAlloc`). The task is `-task TASK`, else the second argument, else the
allocation's only task; a `-task` the allocation's group does not have is refused with its
tasks listed (`validateTaskExistsInAllocation`), exit 1.

Streaming runs under Trio with the async HTTP client (two streams at once with `--all`); the
allocation is resolved first with the same synchronous client the other remote verbs use.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from yurt.runtime.cli.http import agent_address
from yurt.runtime.cli.output import fail, quiet_broken_pipe
from yurt.runtime.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE

#: `--tail` without `-n` or `-c`: Nomad's `defaultTailLines`.
DEFAULT_TAIL_LINES: Final = 10
#: The first window read from the end for `-n N`: Nomad's guess of 120 bytes a line.
BYTES_PER_LINE: Final = 120
#: The window never grows beyond this: a log of longer lines gets fewer than N of them.
MAX_WINDOW: Final = 64 * 1024 * 1024

STREAMS: Final = ("stdout", "stderr")

if TYPE_CHECKING:
    import httpx2


class LogsError(Exception):
    """A failure to report on stderr with its exit status (the one boundary: `alloc_logs`)."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class LogsRequest:
    """What to print: which streams, from where, and whether to follow. Built by `request`."""

    streams: tuple[str, ...]
    follow: bool
    lines: int | None = None  # the last N lines
    nbytes: int | None = None  # the last N bytes


def request(
    *,
    follow: bool,
    stderr: bool,
    all_streams: bool,
    tail: bool,
    lines: int | None,
    nbytes: int | None,
    stdout: bool = False,
) -> LogsRequest:
    """The request the flags make (`stdout`: Nomad's `-stdout`, the default stream named
    explicitly). Pure.

    Raises:
        LogsError: contradictory flags (exit 2).
    """
    if stdout and stderr:  # Nomad's text (command/alloc_logs.go `Run`)
        raise LogsError("Unable to support both stdout and stderr", EXIT_USAGE)
    if stdout and all_streams:
        raise LogsError("-stdout and --all cannot be used together (--all includes stdout)",
                        EXIT_USAGE)
    if lines is not None and nbytes is not None:
        raise LogsError("-n and -c cannot be used together: choose lines or bytes", EXIT_USAGE)
    if stderr and all_streams:
        raise LogsError(
            "--stderr and --all cannot be used together (--all includes stderr)", EXIT_USAGE
        )
    for name, value in (("-n", lines), ("-c", nbytes)):
        if value is not None and value < 0:
            raise LogsError(f"{name} must be 0 or more, not {value}", EXIT_USAGE)
    if tail and lines is None and nbytes is None:
        lines = DEFAULT_TAIL_LINES
    streams = STREAMS if all_streams else ("stderr",) if stderr else ("stdout",)
    return LogsRequest(streams, follow, lines, nbytes)


def only_task(alloc: dict[str, Any]) -> str:
    """The allocation's task when its group has one (Nomad's `lookupAllocTask`). Pure.

    Raises:
        LogsError: several tasks, listed as Nomad lists them (exit 2).
    """
    group = next(
        (
            g
            for g in ((alloc.get("Job") or {}).get("TaskGroups") or [])
            if g.get("Name") == alloc.get("TaskGroup")
        ),
        None,
    )
    names = (
        [t["Name"] for t in group.get("Tasks") or []]
        if group is not None
        else sorted(alloc.get("TaskStates") or {})
    )
    if len(names) == 1:
        return str(names[0])
    listed = "".join(f"  * {name}\n" for name in names)
    raise LogsError(
        f'Allocation "{alloc["ID"][:8]}" is running the following tasks:\n'
        f"{listed}\nPlease specify the task.",
        EXIT_USAGE,
    )


def pick_job_alloc(job_id: str, allocs: list[dict[str, Any]], group: str,
                   choose: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> str:
    """The allocation `-job` reads (Nomad's `getRandomJobAlloc`): among the job's
    allocations (of `group`, when given), a running one if any, else any, as `choose` picks
    (random.choice; a test passes its own). Pure.

    Raises:
        LogsError: the job has no allocations, or none of that group (exit 1).
    """
    if not allocs:
        raise LogsError(f'Error fetching allocations: job "{job_id}" doesn\'t exist or '
                        "it has no allocations")
    if group:
        allocs = [a for a in allocs if a.get("TaskGroup") == group]
        if not allocs:
            raise LogsError(f'Error fetching allocations: task group "{group}" '
                            "doesn't exist or it has no allocations")
    running = [a for a in allocs if a.get("ClientStatus") == "running"]
    return str(choose(running or allocs)["ID"])


def check_task(alloc: dict[str, Any], task: str) -> str:
    """`task` if the allocation's group has it (Nomad's `validateTaskExistsInAllocation`).
    Pure.

    Raises:
        LogsError: no such task; the group's tasks are listed (exit 1).
    """
    group = next((g for g in ((alloc.get("Job") or {}).get("TaskGroups") or [])
                  if g.get("Name") == alloc.get("TaskGroup")), None)
    if group is None:
        return task  # no job to check against: the agent answers for the task
    names = [t["Name"] for t in group.get("Tasks") or []]
    if task in names:
        return task
    listed = "\n".join(names)
    raise LogsError(f"Failed to validate task: Could not find task named: {task}, "
                    f"found:\n{listed}")


def last_lines(data: bytes, n: int) -> bytes:
    """The last `n` lines of `data` (a last line without its newline counts). Pure."""
    if n == 0:
        return b""
    return b"".join(data.splitlines(keepends=True)[-n:])


def window_holds(data: bytes, window: int, n: int) -> bool:
    """Whether a read of `window` bytes from the end that returned `data` settles `-n n`: it
    holds n whole lines (n+1 newlines, or n when it starts at the log's start), or it is the
    whole log (shorter than the window), or the window cannot grow. Pure."""
    if len(data) < window or window >= MAX_WINDOW:
        return True
    return data.count(b"\n") > n


@dataclass
class LineJoiner:
    """Writes several streams to one output without mixing them within a line: each stream's
    bytes are held up to their last newline; `flush` writes a stream's unfinished line."""

    write: Callable[[bytes], None]

    def __post_init__(self) -> None:
        self._partial: dict[str, bytes] = {}

    def feed(self, stream: str, data: bytes) -> None:
        held = self._partial.get(stream, b"") + data
        cut = held.rfind(b"\n") + 1
        if cut:
            self.write(held[:cut])
        self._partial[stream] = held[cut:]

    def flush(self, stream: str) -> None:
        rest = self._partial.pop(stream, b"")
        if rest:
            self.write(rest)


def write_stdout(data: bytes) -> None:
    """Blocking, then flushed: a slow reader slows the command, which has nothing else to
    do (the agent's side is bounded by the connection's buffers)."""
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _meaningful(error: BaseException) -> BaseException:
    """The one error a nursery's group stands for: an interrupt first, then a gone reader,
    then a reportable failure, else the first."""
    leaves = list(_leaves(error))
    for kind in (KeyboardInterrupt, BrokenPipeError, LogsError):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return leaves[0]


def alloc_logs(
    alloc_id: str,
    task: str | None,
    *,
    follow: bool,
    stderr: bool,
    all_streams: bool,
    tail: bool,
    lines: int | None,
    nbytes: int | None,
    job: bool = False,
    task_flag: str = "",
    group: str = "",
    stdout: bool = False,
    verbose: bool = False,
) -> None:
    """`yurt alloc logs`: resolve the allocation and task, then stream (module docstring).

    Args:
        alloc_id: the allocation (ID or prefix), or with `job` the job.
        task: the second argument, if given.
        job: Nomad's `-job`: `alloc_id` names a job; one of its allocations is read.
        task_flag: Nomad's `-task`, which wins over `task`.
        group: Nomad's `-group`: with `job`, pick among this group's allocations.
        stdout: Nomad's `-stdout` (stdout, which is the default; refused with `stderr`).
        verbose: Nomad's `-verbose`: an ambiguous prefix's matches with whole IDs.
    """
    import random

    from yurt.runtime.cli import api_client

    try:
        req = request(
            follow=follow,
            stderr=stderr,
            all_streams=all_streams,
            tail=tail,
            lines=lines,
            nbytes=nbytes,
            stdout=stdout,
        )
    except LogsError as e:
        fail(str(e), e.code)
    if group and not job:
        fail("-group is only valid with -job", EXIT_USAGE)
    with api_client.api() as client:
        if job:
            from urllib.parse import quote

            job_id = api_client.resolve_job(client, alloc_id)
            allocs = api_client.call(client, "GET",
                                     f"/v1/job/{quote(job_id, safe='')}/allocations")
            try:
                full_id = pick_job_alloc(job_id, allocs, group, random.choice)
            except LogsError as e:
                fail(str(e), e.code)
        else:
            full_id = api_client.resolve_alloc(client, alloc_id, full_ids=verbose)
        alloc = api_client.call(client, "GET", f"/v1/allocation/{full_id}")
    full_id = alloc["ID"]
    try:
        task_name = (check_task(alloc, task_flag) if task_flag
                     else task or only_task(alloc))
    except LogsError as e:
        fail(str(e), e.code)
    addr = agent_address()
    token = api_client.client_token()
    headers = {"X-Nomad-Token": token} if token else {}
    try:
        run_streams(addr, headers, full_id, task_name, req, write_stdout)
    except LogsError as e:
        fail(str(e), e.code)
    except BrokenPipeError:
        quiet_broken_pipe()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


def run_streams(
    addr: str,
    headers: dict[str, str],
    alloc_id: str,
    task: str,
    req: LogsRequest,
    write: Callable[[bytes], None],
) -> None:
    """Print `req`'s streams through `write` until they end.

    Raises:
        LogsError: the agent refused or broke off (its message and exit status).
        BrokenPipeError: `write`'s reader went away.
        KeyboardInterrupt: Ctrl-C.
    """
    import trio

    try:
        trio.run(_run_streams, addr, headers, alloc_id, task, req, write)
    except BaseExceptionGroup as group:
        raise _meaningful(group) from group


async def _run_streams(
    addr: str,
    headers: dict[str, str],
    alloc_id: str,
    task: str,
    req: LogsRequest,
    write: Callable[[bytes], None],
) -> None:
    import httpx2
    import trio

    from yurt.runtime.cli.general import settings
    from yurt.runtime.cli.tls import tls_context

    timeout = httpx2.Timeout(30, read=None)  # a followed stream may be quiet for hours
    current = settings()  # the general options' TLS and namespace, as api_client.api's
    tls = tls_context(current) if addr.startswith("https:") else True
    try:
        async with httpx2.AsyncClient(base_url=addr, headers=headers, timeout=timeout,
                                      verify=tls, params=dict(current.query())) as client:
            if len(req.streams) == 1:
                await _print_stream(client, alloc_id, task, req.streams[0], req, write)
            elif not req.follow:
                for stream in req.streams:
                    await _print_stream(client, alloc_id, task, stream, req, write)
            else:
                joiner = LineJoiner(write)

                async def one(stream: str) -> None:
                    try:
                        await _print_stream(
                            client,
                            alloc_id,
                            task,
                            stream,
                            req,
                            lambda data: joiner.feed(stream, data),
                        )
                    finally:
                        joiner.flush(stream)

                async with trio.open_nursery() as nursery:
                    for stream in req.streams:
                        nursery.start_soon(one, stream)
    except httpx2.ConnectError:
        raise LogsError(f"cannot reach the agent at {addr}: is `yurt agent` running?") from None
    except (httpx2.ReadError, httpx2.RemoteProtocolError) as e:
        raise LogsError(f"the agent at {addr} broke off the log stream: {e}") from None


async def _get_window(
    client: httpx2.AsyncClient, path: str, params: dict[str, str], n: int
) -> bytes:
    """Read from the end a window that holds `n` lines (`window_holds`), growing it 4x."""
    window = max(n, 1) * BYTES_PER_LINE
    while True:
        data = await _read_all(
            client, path, {**params, "origin": "end", "offset": str(window), "follow": "false"}
        )
        if window_holds(data, window, n):
            return data
        window = min(window * 4, MAX_WINDOW)


async def _read_all(client: httpx2.AsyncClient, path: str, params: dict[str, str]) -> bytes:
    response = await client.get(path, params=params)
    _check(response.status_code, response.text)
    return response.content


def _check(status: int, text: str) -> None:
    if status == 403:
        raise LogsError(
            "permission denied: set NOMAD_TOKEN, YURT_TOKEN or YURT_TOKEN_FILE to the agent's "
            "token"
        )
    if status >= 400:
        raise LogsError(
            text.strip() or f"the agent answered {status}",
            EXIT_USAGE if status == 400 else EXIT_FAILED,
        )


async def _print_stream(
    client: httpx2.AsyncClient,
    alloc_id: str,
    task: str,
    stream: str,
    req: LogsRequest,
    write: Callable[[bytes], None],
) -> None:
    path = f"/v1/client/fs/logs/{alloc_id}"
    params = {"task": task, "type": stream, "plain": "true"}
    backlog = 0  # bytes at the start of the followed stream that `-n` cuts to its last lines
    if req.lines is not None:
        window = await _get_window(client, path, params, req.lines)
        if not req.follow:
            write(last_lines(window, req.lines))
            return
        # Follow from as far from the end as the window reached: its first `backlog` bytes
        # are a window of the same size, ending wherever the log has got to by then.
        backlog = len(window)
        params.update(origin="end", offset=str(backlog))
    elif req.nbytes is not None:
        if req.nbytes == 0 and not req.follow:
            return
        params.update(origin="end", offset=str(req.nbytes))
    params["follow"] = "true" if req.follow else "false"
    async with client.stream("GET", path, params=params) as response:
        if response.status_code >= 400:
            await response.aread()
            _check(response.status_code, response.text)
        held = b""
        async for chunk in response.aiter_bytes():
            if backlog:
                held += chunk
                if len(held) < backlog:
                    continue
                assert req.lines is not None
                write(last_lines(held[:backlog], req.lines) + held[backlog:])
                backlog, held = 0, b""
                continue
            write(chunk)
        if backlog and held:  # the stream ended inside the backlog (rotated away meanwhile)
            assert req.lines is not None
            write(last_lines(held, req.lines))

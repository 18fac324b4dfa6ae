"""`yurt action`: Nomad 1.7's `nomad action`, running a task's `action "name" { … }` block
over the agent's job action websocket (/v1/job/:id/action, an exec session).

    yurt action -job JOB [-alloc ALLOC | -group GROUP -task TASK] [-task TASK] [-i] [-t]
                [-e CHAR] ACTION

Flags are Nomad's (command/job_action.go `Run`), parsed as Go's `flag` package parses them,
before ACTION. Without -alloc, one allocation of the job's GROUP is picked at random (Nomad's
`getRandomJobAlloc`) and -task is needed; with it, the allocation is found by ID prefix and
its only task is used when -task is not given. The session is exec's (exec.py `_session`):
stdin, a terminal with -t, the action's output, and its exit code as ours. Usage errors exit
2, as `yurt alloc exec`'s do; a failed session exits 1 with "failed to exec into task: …".
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import click

from yurt.runtime.cli.exec import UsageError, choose_task, run_session
from yurt.runtime.cli.goflags import GO_FLAG_COMMAND, GoFlagError, parse_session_flags
from yurt.runtime.errors import EXIT_USAGE


@dataclass
class ActionFlags:
    job: str = ""
    alloc: str = ""
    group: str = ""
    task: str = ""
    stdin: bool = True
    tty: bool | None = None  # None: a terminal on both stdin and stdout decides
    escape: str = "~"


def parse_flags(args: Sequence[str]) -> tuple[ActionFlags, list[str]]:
    """Go `flag` parsing of `nomad action`'s flags (runtime/cli/goflags.py): (the flags, the
    positional arguments). `-h` prints the usage and ends the command."""
    try:
        given, rest, escape = parse_session_flags(
            args, booleans=("i", "t"), valued=("job", "alloc", "group", "task", "e"))
    except GoFlagError as e:
        raise UsageError(str(e)) from None
    flags = ActionFlags(escape=escape)
    for name, field in (("i", "stdin"), ("t", "tty"), ("job", "job"), ("alloc", "alloc"),
                        ("group", "group"), ("task", "task")):
        if name in given:
            setattr(flags, field, given[name])
    return flags, rest


def _resolve_alloc(flags: ActionFlags) -> tuple[str, dict[str, Any]]:
    """The job's ID and the allocation the action runs in."""
    from yurt.runtime.cli.api_client import api, call, resolve_job
    from yurt.runtime.cli.output import fail

    with api() as client:
        job_id = resolve_job(client, flags.job)
        if not flags.alloc:
            if not flags.group:
                raise UsageError("A group name is required if no allocation is provided")
            if not flags.task:
                raise UsageError("A task name is required if no allocation is provided")
            allocs = call(client, "GET", f"/v1/job/{quote(job_id, safe='')}/allocations")
            if not allocs:
                fail(f'Error fetching allocations: job "{job_id}" doesn\'t exist or it has no '
                     "allocations")
            in_group = [a for a in allocs if a["TaskGroup"] == flags.group]
            if not in_group:
                fail(f'Error fetching allocations: task group "{flags.group}" doesn\'t exist '
                     "or it has no allocations")
            stub = random.choice(in_group)  # Nomad's getRandomJobAlloc
        else:
            allocs = call(client, "GET", "/v1/allocations", params={"prefix": flags.alloc})
            if not allocs:
                fail(f'No allocation(s) with prefix or id "{flags.alloc}" found')
            if len(allocs) > 1:
                ids = "\n".join(a["ID"] for a in allocs)
                fail(f"Prefix matched multiple allocations\n\n{ids}")
            stub = allocs[0]
        alloc: dict[str, Any] = call(client, "GET", f"/v1/allocation/{stub['ID']}",
                                     params={"namespace": stub.get("Namespace", "default")})
        return job_id, alloc


def run_action(args: Sequence[str]) -> int:
    """`yurt action ARGS`: the action's exit code."""

    from yurt.runtime.cli.http import websocket_url
    from yurt.runtime.cli.output import fail

    try:
        flags, rest = parse_flags(args)
        if not rest:
            raise UsageError("An action name is required")
        if not flags.job:
            raise UsageError("A job ID is required")
        is_tty = sys.stdin.isatty() and sys.stdout.isatty()
        tty = is_tty if flags.tty is None else flags.tty
        if tty and not flags.stdin:
            raise UsageError("-i must be enabled if running with tty")
        job_id, alloc = _resolve_alloc(flags)
        task = choose_task(alloc, flags.task)
    except UsageError as e:
        fail(str(e), EXIT_USAGE)
    if tty and not sys.stdin.isatty():
        fail("failed to exec into task: not a terminal")
    url = websocket_url(f"/v1/job/{quote(job_id, safe='')}/action",
                        {"action": rest[0], "allocID": alloc["ID"], "task": task,
                         "tty": "true" if tty else "false",
                         "namespace": alloc.get("Namespace", "default")})
    return run_session(url, tty=tty, stdin=flags.stdin, escape=flags.escape)


def register(cli: click.Group) -> None:
    """Attach `action` to the top-level group."""

    @cli.command("action", options_metavar="", context_settings=GO_FLAG_COMMAND)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED,
                    metavar="-job JOB [-alloc ALLOC] [-group GROUP] [-task TASK] [-i] [-t] "
                            "[-e CHAR] ACTION")
    def action(args: tuple[str, ...]) -> None:
        """Run an action of a task (its action "name" { command, args } block).

        -job names the job (required). -alloc picks the allocation by ID prefix; without it
        one allocation of -group is picked at random and -task is required. -i, -t and -e
        are alloc exec's, as are Nomad's general options (-address, -namespace, ...).
        Exits with the action's code."""
        sys.exit(run_action(args))

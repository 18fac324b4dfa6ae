"""The work of `yurt job restart JOB` (registered by runtime/cli/job_restart.py, which
imports this module only when the command runs): restart (or, with `-reschedule`, replace)
a job's allocations in batches, as Nomad's command/job_restart.go, through the agent's
allocation restart and stop APIs.

Which allocations: those running or meant to run (`DesiredStatus` run), not yet replaced, of
the `-group`s asked (all by default) and holding one of the `-task`s asked (any by default).
Each is restarted in place (`/v1/client/allocation/<id>/restart`: the running tasks, every
task with `-all-tasks`, or each `-task`), or with `-reschedule` stopped
(`/v1/allocation/<id>/stop`) and its replacement waited for until it runs, or until an
evaluation blocked on its group says why it cannot be placed. `-batch-size` (N or N%, of the
allocations chosen, rounded up) at a time; `-batch-wait` between batches (a duration, or
`ask`); `-on-error` `ask` or `fail`; `-yes` answers every question yes. Before each
allocation the job must have no deployment under way (Nomad's `ensureNoActiveDeployment`).

Nomad's texts throughout (the `==> time:` lines, "Job restarted successfully!", the error
summary "N errors occurred while restarting job:"), and its rule that `ask` needs an
interactive terminal: without one, `-yes` or `-on-error=fail` (and a `-batch-wait` that is
not `ask`) are required. `-no-shutdown-delay` is accepted and changes nothing (the
allocation APIs here take no such option). Not as Nomad: a batch's allocations are
restarted one after the other, not concurrently, and Ctrl-C ends the command at once (Nomad
asks first).

Exit codes: 0 restarted (or nothing to restart, or canceled by the user), 1 an error.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import click

from yurt.runtime.cli.output import echo

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection

POLL: Final = 0.25
_BATCH_SIZE = re.compile(r"^(\d+)%?$")


class RestartError(Exception):
    """One allocation's failure; `recoverable` is False where retrying cannot help."""

    def __init__(self, message: str, recoverable: bool = True) -> None:
        super().__init__(message)
        self.recoverable = recoverable


@dataclass
class Options:
    """The command's parsed flags."""

    all_tasks: bool = False
    yes: bool = False
    batch_size: int = 1
    batch_percent: bool = False
    batch_wait: float = 0.0
    batch_wait_ask: bool = False
    on_error: str = "ask"
    reschedule: bool = False
    groups: frozenset[str] = frozenset()
    tasks: frozenset[str] = frozenset()
    verbose: bool = False
    length: int = 8
    canceled: bool = field(default=False)


def _stamp() -> str:
    from yurt.runtime.cli.job_monitor import now_stamp

    return now_stamp()


def _headline(text: str) -> None:
    echo(f"==> {_stamp()}: {text}")


def _line(text: str) -> None:
    echo(f"    {_stamp()}: {text}")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _go_duration(seconds: float) -> str:
    from yurt.runtime.lib.durations import format_duration

    return format_duration(int(seconds * 1e9))


def parse_options(batch_size: str, batch_wait: str, on_error: str, all_tasks: bool,
                  tasks: tuple[str, ...], groups: tuple[str, ...], reschedule: bool,
                  yes: bool, verbose: bool, interactive: bool) -> Options:
    """Nomad's `parseAndValidate`; a bad value raises `click.UsageError` with Nomad's text."""
    from yurt.runtime.lib.durations import parse_duration

    opts = Options(all_tasks=all_tasks, yes=yes, reschedule=reschedule, verbose=verbose,
                   groups=frozenset(groups), tasks=frozenset(tasks), on_error=on_error,
                   length=36 if verbose else 8)
    match = _BATCH_SIZE.match(batch_size)
    if match is None:
        raise click.UsageError(f'Invalid -batch-size value "{batch_size}": batch size must '
                               "be an integer or a percentage")
    opts.batch_percent, opts.batch_size = batch_size.endswith("%"), int(match.group(1))
    if opts.batch_size == 0:
        raise click.UsageError(f'Invalid -batch-size value "{batch_size}": number value '
                               "must be greater than zero")
    if batch_wait.lower() == "ask":
        if not interactive and not yes:
            raise click.UsageError('Invalid -batch-wait value "ask": "ask" cannot be used '
                                   "when terminal is not interactive")
        opts.batch_wait_ask = True
    else:
        try:
            opts.batch_wait = parse_duration(batch_wait) / 1e9
        except ValueError as e:
            raise click.UsageError(f'Invalid -batch-wait value "{batch_wait}": {e}') from None
    if on_error == "ask":
        if not interactive and not yes:
            raise click.UsageError('Invalid -on-error value "ask": "ask" cannot be used when '
                                   "terminal is not interactive")
    elif on_error != "fail":
        raise click.UsageError(f'Invalid -on-error value "{on_error}": valid options are '
                               '"ask" and "fail"')
    if all_tasks and tasks:
        raise click.UsageError("The -all-tasks option cannot be used with -task")
    if reschedule and tasks:
        raise click.UsageError("The -reschedule option cannot be used with -task")
    return opts


def _has_task(alloc: dict[str, Any], task: str, versions: dict[int, dict[str, Any]]) -> bool:
    """Nomad's `HasTask`: in the task states, else in the group of the alloc's job version."""
    if task in (alloc.get("TaskStates") or {}):
        return True
    job = versions.get(alloc.get("JobVersion", -1)) or {}
    return any(t.get("Name") == task for g in job.get("TaskGroups") or []
               if g.get("Name") == alloc.get("TaskGroup") for t in g.get("Tasks") or [])


def select(allocs: list[dict[str, Any]], opts: Options,
           versions: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Nomad's `filterAllocs`: the allocations to restart, in the order given."""
    chosen = []
    for a in allocs:
        short = a["ID"][:opts.length]
        if not (a["ClientStatus"] == "running" or a["DesiredStatus"] == "run"):
            why = (f'desired status is "{a["ClientStatus"]}" and client status is '
                   f'"{a["DesiredStatus"]}"')  # sic: Nomad's message swaps the two
        elif a.get("NextAllocation"):
            why = f'it has already been replaced by "{a["NextAllocation"][:opts.length]}"'
        elif opts.groups and a.get("TaskGroup") not in opts.groups:
            why = "it doesn't have any of requested groups"
        elif opts.tasks and not any(_has_task(a, t, versions) for t in opts.tasks):
            why = "it doesn't have any of requested tasks"
        else:
            chosen.append(a)
            continue
        if opts.verbose:
            _line(f'Skipping allocation "{short}" because {why}')
    return chosen


def _active_deployment(client: AgentConnection, job_id: str, opts: Options) -> str:
    """Nomad's `ensureNoActiveDeployment`: "" or the error."""
    response = client.request("GET", f"/v1/job/{quote(job_id, safe='')}/deployments",
                              params={"all": "true"})
    if response.status_code >= 400:
        return f'Error retrieving deployments for job "{job_id}": {response.text.strip()}'
    for d in response.json() or []:
        if d["Status"] not in ("failed", "successful", "cancelled"):
            return f'Deployment "{d["ID"][:opts.length]}" is "{d["Status"]}"'
    return ""


def _restart(client: AgentConnection, alloc: dict[str, Any], opts: Options) -> None:
    """Restart one allocation in place (Nomad's `restartAlloc`)."""
    short, group = alloc["ID"][:opts.length], alloc.get("TaskGroup", "")
    path = f"/v1/client/allocation/{quote(alloc['ID'], safe='')}/restart"
    if opts.all_tasks or not opts.tasks:
        what = "all tasks" if opts.all_tasks else "running tasks"
        _line(f'Restarting {what} in allocation "{short}" for group "{group}"')
        response = client.request("PUT", path, json={"AllTasks": opts.all_tasks})
        if response.status_code >= 400:
            raise RestartError(response.text.strip(), response.status_code != 403)
        return
    errors = []
    for task in sorted(opts.tasks):
        if task not in (alloc.get("TaskStates") or {}):
            continue
        _line(f'Restarting task "{task}" in allocation "{short}" for group "{group}"')
        response = client.request("PUT", path, json={"TaskName": task})
        if response.status_code >= 400:
            errors.append(f'Failed to restart task "{task}": {response.text.strip()}')
    if errors:
        raise RestartError("\n".join(errors))


def _reschedule(client: AgentConnection, alloc: dict[str, Any], opts: Options) -> None:
    """Stop one allocation and wait for its replacement to run (Nomad's `stopAlloc`), or for
    an evaluation blocked on its group."""
    from yurt.runtime.cli.evalfmt import format_alloc_metrics

    short, group = alloc["ID"][:opts.length], alloc.get("TaskGroup", "")
    _line(f'Rescheduling allocation "{short}" for group "{group}"')
    response = client.request("PUT", f"/v1/allocation/{quote(alloc['ID'], safe='')}/stop")
    if response.status_code >= 400:
        raise RestartError(f"Failed to stop allocation: {response.text.strip()}")
    since = int(response.headers.get("X-Nomad-Index", 0) or 0)
    if alloc.get("JobType") == "system":  # system allocations are replaced by an evaluation
        client.request("PUT", f"/v1/job/{quote(alloc['JobID'], safe='')}/evaluate",
                       json={"JobID": alloc["JobID"], "EvalOptions": {"ForceReschedule": True}})
    current, last_ping = alloc["ID"], time.monotonic()
    while True:
        evals = client.request("GET", f"/v1/job/{quote(alloc['JobID'], safe='')}/evaluations")
        for ev in evals.json() if evals.status_code < 400 else []:
            failed = (ev.get("FailedTGAllocs") or {}).get(group)
            if ev.get("CreateIndex", 0) >= since and ev["Status"] == "blocked" and failed:
                metrics = "\n".join(format_alloc_metrics(failed, "    "))
                raise RestartError(f'Evaluation "{ev["ID"][:opts.length]}" has placement '
                                   f'failures for group "{group}":\n{metrics}',
                                   recoverable=False)
        info = client.request("GET", f"/v1/allocation/{quote(current, safe='')}")
        if info.status_code >= 400:
            raise RestartError(f'Failed to retrieve allocation "{current[:opts.length]}": '
                               f"{info.text.strip()}")
        a = info.json()
        if a.get("NextAllocation"):
            nxt = a["NextAllocation"][:opts.length]
            _line(f'Allocation "{current[:opts.length]}" replaced by "{nxt}", waiting for '
                  f'"{nxt}" to start running')
            current = a["NextAllocation"]
            continue
        if a["ClientStatus"] == "running" and current != alloc["ID"]:
            _line(f'Allocation "{current[:opts.length]}" is "running"')
            return
        if time.monotonic() - last_ping > 60:
            _line(f'Still waiting for allocation "{short}" to be replaced')
            last_ping = time.monotonic()
        time.sleep(POLL)


def _ask(question: str, default: bool) -> bool | float:
    """A yes/no answer (or, when asked for, a new wait duration in seconds)."""
    from yurt.runtime.lib.durations import parse_duration

    while True:
        try:
            answer = input(f"==> {_stamp()}: {question} ").strip().lower()
        except EOFError:
            return False
        if answer == "":
            return default
        if answer in ("y", "yes"):
            return True
        if answer in ("n", "no"):
            return False
        if "wait duration" in question:
            try:
                return parse_duration(answer) / 1e9
            except ValueError:
                pass
        echo(f'{" " * 31}Invalid answer "{answer}"')


def restart_job(job_ref: str, opts: Options) -> int:
    """Run `job restart` (module header); the exit code."""
    from yurt.runtime.cli.api_client import api, call, resolve_job
    from yurt.runtime.cli.output import fail

    with api() as client:
        job_id = resolve_job(client, job_ref.strip())
        path = f"/v1/job/{quote(job_id, safe='')}"
        job = call(client, "GET", path)
        if opts.reschedule and job["Type"] not in ("batch", "service", "system"):
            fail(f'Jobs of type "{job["Type"]}" are not allowed to be rescheduled.')
        versions = {v["Version"]: v for v in call(client, "GET", f"{path}/versions")["Versions"]}
        allocs = select(call(client, "GET", f"{path}/allocations", params={"all": "true"}),
                        opts, versions)
        if not allocs:
            echo("No allocations to restart")
            return 0
        size = opts.batch_size
        if opts.batch_percent:
            size = max(1, math.ceil(len(allocs) * opts.batch_size / 100))
        _headline(f"Restarting {_plural(len(allocs), 'allocation')}")
        errors: list[RestartError] = []
        for start in range(0, len(allocs), size):
            batch = allocs[start:start + size]
            if size > 1:
                _headline(f"Restarting {_ordinal(start // size + 1)} batch of "
                          f"{len(batch)} allocations")
            batch_errors: list[RestartError] = []
            for alloc in batch:
                active = _active_deployment(client, job_id, opts)
                if active:
                    errors.append(RestartError(active))
                    return _finish(errors, opts)
                try:
                    (_reschedule if opts.reschedule else _restart)(client, alloc, opts)
                except RestartError as e:
                    msg = f'Error restarting allocation "{alloc["ID"][:opts.length]}": {e}'
                    batch_errors.append(RestartError(msg, e.recoverable))
            errors += batch_errors
            if start + size >= len(allocs):
                break
            if batch_errors and opts.on_error == "fail":
                _headline("Stopping job restart due to error")
                break
            if batch_errors and opts.yes and not all(e.recoverable for e in batch_errors):
                _headline("Stopping job restart due to unrecoverable error")
                break
            if not opts.yes and (opts.batch_wait_ask or (opts.on_error == "ask"
                                                         and batch_errors)):
                if batch_errors:
                    echo(f"==> {_stamp()}: {_summary(batch_errors)}", err=True)
                question = ("Proceed with the next batch? [Y/n" if not batch_errors else
                            "Ignore the errors above and proceed with the next batch? [y/N")
                question += "/<wait duration>]" if opts.batch_wait_ask else "]"
                answer = _ask(question, not batch_errors)
                if answer is False:
                    _headline("Job restart canceled")
                    opts.canceled = True
                    break
                if not isinstance(answer, bool):
                    opts.batch_wait, opts.batch_wait_ask = answer, False
                    _headline("Proceeding restarts with new wait time of "
                              f"{_go_duration(answer)}")
            if opts.batch_wait > 0:
                _headline(f"Waiting {_go_duration(opts.batch_wait)} before restarting the "
                          "next batch")
                time.sleep(opts.batch_wait)
    return _finish(errors, opts)


def _summary(errors: list[RestartError]) -> str:
    """Nomad's `errorFormat`."""
    points = "\n".join(f"* {str(e).strip()}" for e in errors)
    return f"{_plural(len(errors), 'error')} occurred while restarting job:\n{points}"


def _finish(errors: list[RestartError], opts: Options) -> int:
    if errors:
        if not opts.canceled:
            _headline("Job restart finished with errors")
        echo(f"\n{_summary(errors)}", err=True)
        return 1
    if not opts.canceled:
        _headline("Job restart finished")
        echo("\nJob restarted successfully!")
    return 0

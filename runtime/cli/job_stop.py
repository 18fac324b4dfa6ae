"""`yurt job stop JOB...`, as Nomad's command/job_stop.go: deregister each job
(`DELETE /v1/job/<id>` with `purge`, `global`, `eval_priority`, `no_shutdown_delay`), then
monitor the stop's evaluation (runtime/cli/job_monitor.py `monitor`) unless `-detach`, which
prints the evaluation's ID alone.

A job named by a prefix (one job given) is stopped only once the user answers exactly `y`
to Nomad's "Are you sure you want to stop job …? [y/N]", asked on stdout and read from
stdin, unless `-yes`; so is a multiregion job without `-global`. Nomad's answers: empty or
`n…` "Cancelling job stop" (exit 0), `y…` "For confirmation, an exact ‘y’ is required."
(exit 0), anything else exit 1, no line at all (stdin closed) "Failed to parse answer: EOF"
(exit 1). `-global` stops a multiregion job in every region; yurt has one region, so, as
Nomad for a single-region job, it changes nothing. `-json` (yurt's) prints the API's answer
and does not monitor.

Exit codes: 0 stopped (and the evaluation complete), 1 an error, or the monitor's code (2
placement failures); with several jobs, the first non-zero one.
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import quote

import click

from yurt.runtime.cli.output import echo
from yurt.runtime.errors import EXIT_FAILED


def answer_code(answer: str | None) -> tuple[int, bool, str]:
    """Nomad's `getConfirmation` in job_stop.go: (exit code, confirmed, what to print) for
    the line read (None: stdin closed before a line). Pure."""
    if answer is None:
        return EXIT_FAILED, False, "Failed to parse answer: EOF"
    if answer == "" or answer.lower().startswith("n"):
        return 0, False, "Cancelling job stop"
    if answer.lower().startswith("y") and len(answer) > 1:
        return 0, False, "For confirmation, an exact ‘y’ is required."
    if answer != "y":
        return EXIT_FAILED, False, ("No confirmation detected. For confirmation, an exact "
                                    "'y' is required.")
    return 0, True, ""


def _confirm(question: str) -> tuple[int, bool]:
    """Ask on stdout (Nomad's `Ui.Ask`: the question and a space), read one line."""
    echo(question + " ", nl=False)  # click.echo flushes
    line = sys.stdin.readline() if sys.stdin is not None else ""
    code, confirmed, text = answer_code(line.rstrip("\r\n") if line.endswith("\n") else None)
    if text:  # Nomad's Ui.Error for an unreadable answer, Ui.Output for the rest
        echo(text, err=not line.endswith("\n"))
    return code, confirmed


def stop_one(client: Any, given: str, *, alone: bool, purge: bool, detach: bool,
             eval_priority: int, global_: bool, no_shutdown_delay: bool, yes: bool,
             verbose: bool, json_output: bool) -> int:
    """Stop the job `given` names; the exit code for it."""
    from yurt.runtime.cli.api_client import call, emit_json, resolve_job
    from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID, monitor

    job_id = resolve_job(client, given)
    path = f"/v1/job/{quote(job_id, safe='')}"
    if alone and not yes and job_id != given:
        code, confirmed = _confirm(f'Are you sure you want to stop job "{job_id}"? [y/N]')
        if not confirmed:
            return code
    if alone and not yes and not global_ and call(client, "GET", path).get("Multiregion"):
        code, confirmed = _confirm(f'Are you sure you want to stop multi-region job '
                                   f'"{job_id}" in a single region? [y/N]')
        if not confirmed:
            return code
    params = {k: v for k, v in (("purge", "true" if purge else ""),
                                ("global", "true" if global_ else ""),
                                ("eval_priority", str(eval_priority) if eval_priority else ""),
                                ("no_shutdown_delay", "true" if no_shutdown_delay else ""))
              if v}
    response = client.request("DELETE", path, params=params)
    if response.status_code >= 400:
        echo(f"yurt: Error deregistering job with id {given} err: {response.text.strip()}",
             err=True)
        return EXIT_FAILED
    result = response.json()
    if json_output:
        emit_json(result)
        return 0
    eval_id = result.get("EvalID") or ""
    if not eval_id:  # a periodic or parameterized job: nothing to evaluate
        return 0
    if detach:
        echo(eval_id)
        return 0
    return monitor(client, eval_id, FULL_ID if verbose else SHORT_ID)


def register(job: click.Group) -> None:
    """Attach `stop` to the `job` group."""

    @job.command("stop")
    @click.argument("job_ids", nargs=-1, required=True, metavar="JOB...")
    @click.option("--purge", is_flag=True, default=False,
                  help="Also remove the job and its history from the server.")
    @click.option("--detach", is_flag=True,
                  help="Return at once, printing the evaluation ID, instead of monitoring.")
    @click.option("--eval-priority", "eval_priority", type=click.IntRange(0, 100), default=0,
                  help="The priority of the stop's evaluation (default: the job's).")
    @click.option("--global", "global_", is_flag=True,
                  help="Stop a multiregion job in all its regions (yurt has one region: "
                       "like Nomad for a single-region job, nothing more is stopped).")
    @click.option("--no-shutdown-delay", "no_shutdown_delay", is_flag=True,
                  help="Kill the tasks without waiting for the group's and tasks' "
                       "shutdown_delay.")
    @click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
    @click.option("--verbose", is_flag=True, help="Show full IDs.")
    @click.option("--json", "json_output", is_flag=True,
                  help="Print the API's answer instead of monitoring.")
    def job_stop(job_ids: tuple[str, ...], purge: bool, detach: bool, eval_priority: int,
                 global_: bool, no_shutdown_delay: bool, yes: bool, verbose: bool,
                 json_output: bool) -> None:
        """Stop jobs: every allocation is stopped (poststop tasks run), and the stop's
        evaluation is monitored (Nomad's `job stop`)."""
        from yurt.runtime.cli.api_client import api

        codes = []
        with api() as client:
            for given in job_ids:
                codes.append(stop_one(
                    client, given.strip(), alone=len(job_ids) == 1, purge=purge,
                    detach=detach, eval_priority=eval_priority, global_=global_,
                    no_shutdown_delay=no_shutdown_delay, yes=yes, verbose=verbose,
                    json_output=json_output))
        sys.exit(next((c for c in codes if c), 0))

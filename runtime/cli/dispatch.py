"""`yurt job dispatch` and `yurt job periodic force`: run a parameterized job, launch a
periodic one now, through the agent at `$YURT_ADDR` (Nomad's verbs and flags), then monitor
the evaluation (runtime/cli/job_monitor.py `monitor`) unless `-detach`.

`register(job)` attaches the verbs to the `job` group (called once from
runtime/cli/job_group.py). The HTTP client is imported inside the commands, so `yurt agent`
never loads it. Exit codes: 0 ok, 1 the request failed (unknown job, agent unreachable) or
dispatch's monitor did not return 0 (Nomad's), 2 bad input (a flag, a payload file, or a
dispatch the job refuses), or periodic force's monitor code, or `dispatch -wait`'s (2: an
allocation failed).
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from yurt.runtime.cli.output import echo
from yurt.runtime.cli.ui_hint import ui_option
from yurt.runtime.errors import EXIT_USAGE


def _meta(pairs: tuple[str, ...]) -> dict[str, str]:
    meta: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f'-meta expects key=value, got "{pair}"')
        meta[key] = value
    return meta


def _payload(source: str | None) -> bytes:
    if source is None:
        return b""
    if source == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(source).read_bytes()
    except OSError as e:
        from yurt.runtime.cli.output import fail

        fail(f"error reading payload file {source}: {e.strerror or e}", EXIT_USAGE)


def dispatch(job_id: str, source: str | None, meta_pairs: tuple[str, ...],
             priority: int | None, token: str, json_output: bool, *, prefix_template: str = "",
             detach: bool = False, verbose: bool = False, wait: bool = False) -> None:
    """Nomad's `job dispatch`: the child's ID and evaluation, then the evaluation monitored
    unless `-detach` (exit 1 when the monitor is not 0), then with `-wait` the child's
    allocations until it is dead (runtime/cli/dispatch_wait.py)."""
    from yurt.runtime.cli.api_client import api, call, emit_json, resolve_job
    from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID, monitor

    body: dict[str, Any] = {"Meta": _meta(meta_pairs),
                            "Payload": base64.b64encode(_payload(source)).decode()}
    if priority is not None:
        body["Priority"] = priority
    if token:
        body["IdempotencyToken"] = token
    if prefix_template:
        body["IdPrefixTemplate"] = prefix_template
    length = FULL_ID if verbose else SHORT_ID
    with api() as client:
        job_id = resolve_job(client, job_id, kind="parameterized",
                             only=lambda j: not j["ParentID"] and j["ParameterizedJob"])
        out = call(client, "PUT", f"/v1/job/{quote(job_id, safe='')}/dispatch", json=body)
        if json_output:
            emit_json(out)
            return
        from yurt.runtime.cli.output import format_kv

        rows = [("Dispatched Job ID", out["DispatchedJobID"])]
        if out.get("EvalID"):
            rows.append(("Evaluation ID", out["EvalID"][:length]))
        echo(format_kv(rows))
        _ui_hint(out["DispatchedJobID"])
        if detach or not out.get("EvalID"):
            return
        echo()
        if monitor(client, out["EvalID"], length) != 0:
            sys.exit(1)
        if wait:
            from yurt.runtime.cli.dispatch_wait import follow_child

            sys.exit(follow_child(client, out["DispatchedJobID"], verbose, length))


def _ui_hint(child: str) -> None:
    """Nomad's hint and `-ui` (command/job_dispatch.go): the child, in the namespace asked."""
    from yurt.runtime.cli.general import settings
    from yurt.runtime.cli.ui_hint import job_ref, ui_hint

    namespace = settings().namespace
    ui_hint("job dispatch", job=job_ref(child, "" if namespace == "*" else namespace))


def periodic_force(job_id: str, json_output: bool, *, detach: bool = False,
                   verbose: bool = False) -> None:
    """Nomad's `job periodic force`: the launch's evaluation monitored, or with `-detach`
    "Force periodic successful" and its ID."""
    from yurt.runtime.cli.api_client import api, call, emit_json, resolve_job
    from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID, monitor

    with api() as client:
        job_id = resolve_job(client, job_id, kind="periodic", only=lambda j: j["Periodic"])
        out = call(client, "PUT", f"/v1/job/{quote(job_id, safe='')}/periodic/force")
        if json_output:
            emit_json(out)
            return
        if detach or not out.get("EvalID"):
            echo("Force periodic successful")
            echo(f"Evaluation ID: {out.get('EvalID') or ''}")
            return
        sys.exit(monitor(client, out["EvalID"], FULL_ID if verbose else SHORT_ID))


def register(job: click.Group) -> None:
    """Attach `dispatch` and `periodic force` to the `job` group."""
    json_flag = click.option("--json", "json_output", is_flag=True,
                             help="Print the API's JSON instead of text.")

    @job.command("dispatch")
    @click.argument("job_id", metavar="JOB")
    @click.argument("payload", metavar="[PAYLOAD|-]", required=False)
    @click.option("-meta", "meta", multiple=True, metavar="KEY=VALUE",
                  help="Meta for the dispatched job (repeatable).")
    @click.option("-priority", "priority", type=click.IntRange(1, 100), default=None,
                  help="Priority of the dispatched job (default: the parent's).")
    @click.option("-idempotency-token", "token", default="",
                  help="Dispatch at most once for this token (a retry answers the same job).")
    @click.option("-id-prefix-template", "prefix_template", default="", metavar="PREFIX",
                  help="A prefix for the dispatched job's ID, after `dispatch-`.")
    @click.option("-detach", "detach", is_flag=True,
                  help="Return once dispatched instead of monitoring the evaluation.")
    @click.option("-verbose", "verbose", is_flag=True, help="Show full IDs.")
    @click.option("-wait", "wait", is_flag=True,
                  help="After the evaluation, wait until every allocation of the "
                       "dispatched job is terminal (exit 2 if one failed).")
    @ui_option
    @json_flag
    def job_dispatch(job_id: str, payload: str | None, meta: tuple[str, ...],
                     priority: int | None, token: str, prefix_template: str, detach: bool,
                     verbose: bool, wait: bool, json_output: bool) -> None:
        """Dispatch a parameterized job: PAYLOAD is a file, or - for standard input; then
        monitor the dispatched job's evaluation (Nomad's `job dispatch`)."""
        dispatch(job_id, payload, meta, priority, token, json_output,
                 prefix_template=prefix_template, detach=detach, verbose=verbose, wait=wait)

    @job.group("periodic")
    def job_periodic() -> None:
        """Interact with periodic jobs."""

    @job_periodic.command("force")
    @click.argument("job_id", metavar="JOB")
    @click.option("-detach", "detach", is_flag=True,
                  help="Return once launched instead of monitoring the evaluation.")
    @click.option("-verbose", "verbose", is_flag=True, help="Show full IDs.")
    @json_flag
    def job_periodic_force(job_id: str, detach: bool, verbose: bool,
                           json_output: bool) -> None:
        """Launch a periodic job's child now, whatever its schedule; then monitor its
        evaluation (Nomad's `job periodic force`)."""
        periodic_force(job_id, json_output, detach=detach, verbose=verbose)

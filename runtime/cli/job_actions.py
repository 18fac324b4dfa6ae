"""`yurt job revert|scale|eval`: the job verbs that start an evaluation, as Nomad's
command/job_revert.go, job_scale.go and job_eval.go do them: the request, then the
evaluation monitored (runtime/cli/job_monitor.py `monitor`, full IDs with `-verbose`) unless
`-detach`, which prints Nomad's line for the evaluation instead. `-json` (yurt's) prints the
API's answer and does not monitor. runtime/cli/jobs.py declares the commands and calls these.

Exit codes: 0 done (the evaluation complete, or detached), 1 an error, 2 bad input (yurt's
usage code) or the monitor's placement failure.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn
from urllib.parse import quote

from yurt.runtime.cli.output import echo, fail
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

#: The message a scale request records with its scaling event (Nomad's, for its CLI).
SCALE_MESSAGE = "submitted using the yurt CLI"


def _finish(client: Any, eval_id: str, verbose: bool) -> NoReturn:
    from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID, monitor

    sys.exit(monitor(client, eval_id, FULL_ID if verbose else SHORT_ID))


def revert(job_id: str, version: int, *, detach: bool, verbose: bool,
           json_output: bool) -> None:
    """Nomad's `job revert`: no evaluation (a periodic job): nothing printed; `-detach`:
    "Evaluation ID: <id>"; else the monitor."""
    from yurt.runtime.cli.api_client import api, call, emit_json, resolve_job

    with api() as client:
        job_id = resolve_job(client, job_id)
        result = call(client, "PUT", f"/v1/job/{quote(job_id, safe='')}/revert",
                      json={"JobID": job_id, "JobVersion": version})
        if json_output:
            emit_json(result)
            return
        if not result.get("EvalID"):
            return
        if detach:
            echo("Evaluation ID: " + result["EvalID"])
            return
        _finish(client, result["EvalID"], verbose)


def group_to_scale(groups: dict[str, Any], group: str) -> str:
    """Nomad's `performGroupCheck`: the group named, or the job's only one; an error's text
    (exit 1) otherwise. Pure."""
    if len(groups) > 1 and not group:
        fail("Group name required", EXIT_FAILED)
    if not group and len(groups) == 1:
        return next(iter(groups))
    if group not in groups:
        fail(f"Group {group} not found within job", EXIT_FAILED)
    return group


def scale(job_id: str, args: tuple[str, ...], *, check_index: int, detach: bool,
          verbose: bool, json_output: bool) -> None:
    """Nomad's `job scale JOB [GROUP] COUNT [-check-index N]`: warnings, then the monitor;
    `-detach` (or a periodic or parameterized job, which has no evaluation to follow):
    "Job scale successful" and "Evaluation ID: <id>"."""
    from yurt.runtime.cli.api_client import api, call, emit_json, resolve_job

    if len(args) not in (1, 2):
        fail("Command requires at least two arguments and no more than three", EXIT_USAGE)
    text = args[-1]
    if not text.lstrip("-").isdigit():
        fail(f'Failed to convert count string to int: strconv.Atoi: parsing "{text}": '
             "invalid syntax", EXIT_USAGE)
    count = int(text)
    with api() as client:
        job_id = resolve_job(client, job_id)
        path = f"/v1/job/{quote(job_id, safe='')}"
        groups = call(client, "GET", f"{path}/scale")["TaskGroups"] or {}
        group = group_to_scale(groups, args[0] if len(args) == 2 else "")
        body = {"Count": count, "Target": {"Job": job_id, "Group": group},
                "Message": SCALE_MESSAGE, "JobModifyIndex": check_index}
        response = client.request("POST", f"{path}/scale", json=body)
        if response.status_code >= 400:
            fail(f"Error submitting scaling request: {response.text.strip()}",
                 EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)
        result = response.json()
        if json_output:
            emit_json(result)
            return
        if result.get("Warnings"):
            echo(f"Job Warnings:\n{result['Warnings']}\n")
        job = call(client, "GET", path)
        template = bool(job.get("Periodic")) or (bool(job.get("ParameterizedJob"))
                                                 and not job.get("Dispatched"))
        if detach or template or not result.get("EvalID"):
            echo("Job scale successful")
            if result.get("EvalID"):
                echo("Evaluation ID: " + result["EvalID"])
            return
        _finish(client, result["EvalID"], verbose)


def evaluate(job_id: str, *, force_reschedule: bool, detach: bool, verbose: bool,
             json_output: bool) -> None:
    """Nomad's `job eval`: a new evaluation (`EvalOptions.ForceReschedule` with
    `-force-reschedule`), then the monitor; `-detach`: `Created eval ID: "<id>" `."""
    from yurt.runtime.cli.api_client import api, call, emit_json, resolve_job
    from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID

    with api() as client:
        job_id = resolve_job(client, job_id)
        result = call(client, "PUT", f"/v1/job/{quote(job_id, safe='')}/evaluate",
                      json={"JobID": job_id,
                            "EvalOptions": {"ForceReschedule": force_reschedule}})
        if json_output:
            emit_json(call(client, "GET", f"/v1/evaluation/{result['EvalID']}"))
            return
        if detach:
            length = FULL_ID if verbose else SHORT_ID
            echo(f'Created eval ID: "{result["EvalID"][:length]}" ')
            return
        _finish(client, result["EvalID"], verbose)

"""`yurt job allocs|deployments|promote`, in the shape of Nomad's command/job_allocs.go,
command/job_deployments.go and command/job_promote.go.

`job allocs JOB`: Nomad's allocation list (`formatAllocListStubs`: ID, Node ID, Task Group,
Version, Desired, Status, Created, Modified; with `-verbose` full IDs and Eval ID, Node Name
and absolute times), `-all` for an older instance's too, `-json`, `-t`.
`job deployments JOB`: Nomad's deployments list (`formatDeployments`), `-latest` for the
latest one's status (runtime/cli/deployment.py `status_text`), `-all`, `-json`, `-t`,
`-verbose`. `job promote JOB`: promotes the latest deployment's canaries (every group, or
each `-group`) through `/v1/deployment/promote/<id>`, then monitors the evaluation it created
(runtime/cli/job_monitor.py) unless `-detach`.

Exit codes, Nomad's: 0 ok; 1 an error (no such job, no deployment to promote, a refused
promotion); promote's monitor returns the monitor's (2 placement failures).
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import quote

import click

from yurt.runtime.cli.output import check_format, echo, emit, fail, output_options
from yurt.runtime.cli.statusfmt import alloc_list


def _verbose_flag(f: Any) -> Any:
    return click.option("--verbose", is_flag=True, help="Show full IDs.")(f)


def register(job: click.Group) -> None:
    """Attach `allocs`, `deployments` and `promote` to yurt's `job` group."""

    @job.command("allocs")
    @click.argument("job_id", metavar="JOB")
    @click.option("--all", "every", is_flag=True,
                  help="Also the allocations of an older instance of the job.")
    @output_options
    @_verbose_flag
    def job_allocs(job_id: str, every: bool, json_output: bool, template: str,
                   verbose: bool) -> None:
        """The job's allocations (Nomad's `job allocs`)."""
        from yurt.runtime.cli.api_client import api, call, resolve_job
        from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID

        check_format(json_output, template)
        with api() as client:
            job_id = resolve_job(client, job_id.strip())
            allocs = call(client, "GET", f"/v1/job/{quote(job_id, safe='')}/allocations",
                          params={"all": "true"} if every else {})
        length = FULL_ID if verbose else SHORT_ID
        emit(allocs, json_output, template,
             lambda: echo(alloc_list(allocs, verbose, length)))

    @job.command("deployments")
    @click.argument("job_id", metavar="JOB")
    @click.option("--latest", is_flag=True, help="Only the latest deployment.")
    @click.option("--all", "every", is_flag=True,
                  help="Also the deployments of an older instance of the job.")
    @output_options
    @_verbose_flag
    def job_deployments(job_id: str, latest: bool, every: bool, json_output: bool,
                        template: str, verbose: bool) -> None:
        """The job's deployments, newest first (Nomad's `job deployments`)."""
        from yurt.runtime.cli.api_client import api, call, resolve_job
        from yurt.runtime.cli.deployfmt import list_table, status_text
        from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID

        check_format(json_output, template)
        length = FULL_ID if verbose else SHORT_ID
        params = {"all": "true"} if every else {}
        with api() as client:
            job_id = resolve_job(client, job_id.strip())
            path = f"/v1/job/{quote(job_id, safe='')}"
            if latest:
                d = call(client, "GET", f"{path}/deployment", params=params)
                emit(d, json_output, template, lambda: echo(
                    status_text(d, length) if d else "No deployment found"))
                return
            found = call(client, "GET", f"{path}/deployments", params=params)
        emit(found, json_output, template, lambda: echo(list_table(found, length)))

    @job.command("promote")
    @click.argument("job_id", metavar="JOB")
    @click.option("--group", "groups", multiple=True, metavar="GROUP",
                  help="Promote only this group's canaries (repeatable; default all).")
    @click.option("--detach", is_flag=True,
                  help="Return once promoted, printing the evaluation ID.")
    @_verbose_flag
    def job_promote(job_id: str, groups: tuple[str, ...], detach: bool,
                    verbose: bool) -> None:
        """Promote the canaries of the job's latest deployment, then monitor the rollout's
        evaluation (Nomad's `job promote`)."""
        from yurt.runtime.cli.api_client import api, call, resolve_job
        from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID, monitor

        with api() as client:
            job_id = resolve_job(client, job_id.strip())
            d = call(client, "GET", f"/v1/job/{quote(job_id, safe='')}/deployment")
            if not d:
                fail(f'Job "{job_id}" has no deployment to promote')
            body: dict[str, Any] = {"DeploymentID": d["ID"]}
            body.update({"Groups": list(groups)} if groups else {"All": True})
            response = client.request("PUT", f"/v1/deployment/promote/{quote(d['ID'])}",
                                      json=body)
            if response.status_code >= 400:
                fail(f'Error promoting deployment "{d["ID"]}" for job "{job_id}": '
                     f"{response.text.strip()}")
            eval_id = (response.json() or {}).get("EvalID") or ""
            if not eval_id:
                return
            if detach:
                echo(f"Evaluation ID: {eval_id}")
                return
            code = monitor(client, eval_id, FULL_ID if verbose else SHORT_ID)
        sys.exit(code)

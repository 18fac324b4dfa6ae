"""`yurt job run` as Nomad's (command/job_run.go), and `yurt job status`.

`job run FILE` (`-` reads stdin) registers the job and its submission, then enters Nomad's
monitor (runtime/cli/job_monitor.py): the evaluation until the job is placed, then a service
job's deployment until it is terminal. It never waits for a task to run or end. Exit codes,
Nomad's: 0 placed (deployment successful), 2 placement failures, 1 anything else (a failed
deployment, a refused register, an unreachable agent); a bad job file is 2 (yurt's rule for
every job file, runtime/cli/jobfile.py) where Nomad says 1.

Flags, Nomad's: `-detach` (print "Job registration successful" and the evaluation ID, judge
nothing), `-check-index N` (register only if the job's modify index is N, 0: only if it does
not exist; the agent refuses with Nomad's "Enforcing job modify index …", printed with "Job
not updated", exit 1), `-verbose` (full IDs), `-json` (the input is JSON), `-output` (print
the API payload `{"Job": …}` and register nothing), `-hcl2-strict`, `-var`, `-var-file`,
`-policy-override` (accepted: yurt has no Sentinel), `-preserve-counts` (keep the groups'
current counts), `-preserve-resources` (keep the tasks' current resources),
`-eval-priority` (1-100, checked; one node runs one evaluation at a time). Refused, with a
message: `-consul-namespace` and `-vault-namespace` (yurt has neither Consul nor Vault). `-ui`
opens the job's web UI page (runtime/cli/ui_hint.py). A periodic or parameterized job is
registered and said so, as Nomad's.

`job status JOB` shows Nomad's "Placement Failure" section whenever the job has a blocked
evaluation: the failures of its latest evaluation that had any, so the reason is visible long
after `job run` returned. A batch job whose allocations are all terminal is `dead` (the
server's status, Nomad's `getJobStatus`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from yurt.runtime.cli.output import echo, fail
from yurt.runtime.cli.ui_hint import ui_option
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    from yurt.runtime.structs import Job

#: The register's refusal of a stale `-check-index` (api/jobs.go `RegisterEnforceIndexErrPrefix`).
ENFORCE_PREFIX = "Enforcing job modify index"


def _refuse(flag: str, why: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def check(_ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        if value:
            fail(f"-{flag} is not supported: {why}", EXIT_USAGE)
        return value
    return check


def register(job: click.Group) -> None:
    """Attach `job run` to yurt's `job` group."""
    from yurt.runtime.cli.jobfile import var_options

    @job.command("run")
    @click.argument("file", metavar="FILE")
    @click.option("--detach", is_flag=True,
                  help="Return once the job is registered, printing the evaluation ID.")
    @click.option("--check-index", "check_index", default=None,
                  metavar="INDEX", help="Register only if the job's modify index is INDEX "
                  "(0: only if the job does not exist yet).")
    @click.option("--verbose", is_flag=True, help="Show full IDs.")
    @click.option("--json", "as_json", is_flag=True,
                  help="Parse the job file as JSON (a {\"Job\": …} wrapper is taken).")
    @click.option("--output", is_flag=True,
                  help="Print the JSON that would be submitted, and submit nothing.")
    @click.option("--hcl2-strict", "strict", default=True, is_flag=False,
                  flag_value=True, type=click.BOOL, metavar="[=BOOL]",
                  help="Refuse -var values for variables the file does not declare.")
    @click.option("--policy-override", is_flag=True,
                  help="Accepted for Nomad's scripts (yurt has no Sentinel policies).")
    @click.option("--preserve-counts", is_flag=True,
                  help="Keep the task groups' current counts when updating the job.")
    @click.option("--preserve-resources", is_flag=True,
                  help="Keep the tasks' current resources when updating the job.")
    @click.option("--eval-priority", type=click.IntRange(0, 100),
                  default=0, help="The priority of the register's evaluation (1-100).")
    @click.option("--consul-namespace", default="", expose_value=False, metavar="NAMESPACE",
                  callback=_refuse("consul-namespace", "yurt has no Consul"),
                  help="Refused: yurt has no Consul.")
    @click.option("--vault-namespace", default="", expose_value=False, metavar="NAMESPACE",
                  callback=_refuse("vault-namespace", "yurt has no Vault"),
                  help="Refused: yurt has no Vault.")
    @ui_option
    @var_options
    def job_run_command(file: str, detach: bool, check_index: str | None, verbose: bool,
                        as_json: bool, output: bool, strict: bool, policy_override: bool,
                        preserve_counts: bool, preserve_resources: bool,
                        eval_priority: int) -> None:
        """Register a job with the agent and monitor it until it is placed (Nomad's
        `job run`). FILE `-` reads the job from stdin.

        Exit 0: placed (and a service job's deployment successful); 2: placement
        failures (or a bad job file); 1: any other error.
        """
        del policy_override  # no Sentinel: nothing to override
        index: int | None = None
        if check_index is not None:
            if not (check_index.isascii() and check_index.isdigit()):
                fail(f'Error parsing check-index value "{check_index}": strconv.ParseUint: '
                     f'parsing "{check_index}": invalid syntax')
            index = int(check_index)
        job_run(file, detach=detach, verbose=verbose, as_json=as_json, output=output,
                strict=strict, check_index=index, preserve_counts=preserve_counts,
                preserve_resources=preserve_resources, eval_priority=eval_priority)


def _job_warnings(text: str) -> str:
    """The register's warnings about the job itself: yurt's register also warns of each
    group it could not place (runtime/api/jobs.py), which the monitor explains as Nomad does."""
    return "; ".join(w for w in text.split("; ")
                     if not (w.startswith("group '") and " not placed: " in w))


def _templated(job: Job) -> bool:
    """A periodic or parameterized parent: nothing of its own runs (its children do)."""
    return job.periodic is not None or (job.parameterized is not None and not job.dispatched)


def job_run(path: str, *, detach: bool = False, verbose: bool = False, as_json: bool = False,
            output: bool = False, strict: bool = True, check_index: int | None = None,
            preserve_counts: bool = False, preserve_resources: bool = False,
            eval_priority: int = 0) -> None:
    """`yurt job run` (see the module docstring); exits with Nomad's code."""
    import json

    import msgspec

    from yurt.runtime.cli.api_client import api, fail_on_error
    from yurt.runtime.cli.general import into_namespace
    from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID, monitor
    from yurt.runtime.cli.jobfile import load_job_with_submission, read_options
    from yurt.runtime.cli.output import echo_raw
    from yurt.runtime.cli.ui_hint import hints_setting, job_ref, ui_hint

    read_options(as_json=as_json, strict=strict)
    job, submission = load_job_with_submission(path)
    job = into_namespace(job)  # -namespace, NOMAD_NAMESPACE: unless the file names one
    body: dict[str, Any] = {"Job": job}
    if output:  # command/job_run.go: the request's Job, indented, nothing submitted
        encoded = json.loads(msgspec.json.encode(body))
        echo_raw(json.dumps(encoded, indent=4))
        return
    body["Submission"] = submission
    if check_index is not None:
        body.update(EnforceIndex=True, JobModifyIndex=check_index)
    if preserve_counts:
        body["PreserveCounts"] = True
    if preserve_resources:
        body["PreserveResources"] = True
    if eval_priority:
        body["EvalPriority"] = eval_priority
    length = FULL_ID if verbose else SHORT_ID
    with api() as client:
        response = client.request("PUT", "/v1/jobs", content=msgspec.json.encode(body))
        if response.status_code >= 400 and ENFORCE_PREFIX in response.text:
            echo(response.text.strip(), err=True)
            echo("Job not updated", err=True)
            sys.exit(EXIT_FAILED)
        if response.status_code >= 400:
            fail_on_error(response, "Error submitting job")
        result = response.json()
        warnings = _job_warnings(result.get("Warnings") or "")
        if warnings:
            echo(f"Job Warnings:\n{warnings}\n")
        if detach or _templated(job):
            echo("Job registration successful")
            if job.periodic is not None and job.parameterized is None:
                echo(f'Periodic job: children launch on "{", ".join(job.periodic.specs())}" '
                     f"({job.periodic.time_zone}); `yurt job periodic force {job.id}` "
                     "launches one now")
            elif job.parameterized is not None and not job.dispatched:
                echo(f"Parameterized job: run it with `yurt job dispatch {job.id}`")
            else:
                echo(f"Evaluation ID: {result.get('EvalID') or ''}")
            ui_hint("job run", job=job_ref(job.id, job.namespace))
            return
        if ui_hint("job run", job=job_ref(job.id, job.namespace)) and hints_setting() is not False:
            echo("", err=True)  # command/job_run.go: apart from the monitor's lines
        code = monitor(client, result.get("EvalID") or "", length)
    sys.exit(code)

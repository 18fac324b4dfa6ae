"""`yurt job run` and `yurt job status` against the agent, with Nomad's placement failures.

A job that cannot be placed must say why and end, never wait for allocations that will not
come. Nomad's `job run` monitors the registration's evaluation until it is terminal; if it
left task groups unplaced (`FailedTGAllocs`), it prints "Evaluation … finished with status …
but failed to place all allocations", each group's metrics as `formatAllocMetrics` words them
(no eligible node, constraints and classes that filtered nodes, exhausted resources and
dimensions), names the blocked evaluation that waits for capacity, and exits 2. The server
here fills the same `AllocMetric` (runtime/server/scheduler/placement.py), and
runtime/cli/evalfmt.py words it as Nomad does.

`--detach` prints Nomad's "Job registration successful" and the evaluation's ID (for `yurt
eval status ID`) and, as Nomad's, neither waits for nor judges the outcome: exit 0 once the
job is registered.

Without `--detach`, once the evaluation placed everything the command waits (bounded by
`SETTLE_TIMEOUT`) until each allocation has settled: complete or failed, or running for a
service, and exits 1 if one failed.

`job status JOB` shows Nomad's "Placement Failure" section whenever the job has a blocked
evaluation: the failures of its latest evaluation that had any, so the reason is visible long
after `job run` returned. A batch job whose allocations are all terminal is `dead` (the
server's status, Nomad's `getJobStatus`).

Exit codes: 0 placed (and settled), 1 an allocation failed or the agent cannot be reached,
2 a bad job file or a placement failure.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Final

from yurt.runtime.cli.evalfmt import evaluation_failures, placement_failure_section
from yurt.runtime.cli.output import echo, print_table
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection

#: Evaluation statuses after which it changes no more (Nomad's monitor stops on these).
EVAL_TERMINAL: Final = frozenset({"complete", "failed", "canceled", "cancelled"})
#: How long `job run` waits for its evaluation to finish (the embedded server finishes it
#: within the register call; this bounds a wait that should never happen).
EVAL_TIMEOUT: Final = 30.0
#: How long `job run` waits for placed allocations to settle.
SETTLE_TIMEOUT: Final = 60.0
POLL: Final = 0.25


def _finished_eval(client: AgentConnection, eval_id: str) -> dict[str, Any]:
    """The evaluation once terminal (or as it is after `EVAL_TIMEOUT`)."""
    from yurt.runtime.cli.api_client import call

    deadline = time.monotonic() + EVAL_TIMEOUT
    while True:
        ev: dict[str, Any] = call(client, "GET", f"/v1/evaluation/{eval_id}")
        if ev.get("Status") in EVAL_TERMINAL or time.monotonic() > deadline:
            return ev
        time.sleep(POLL)


def job_run(path: str, detach: bool, json_output: bool) -> None:
    """`yurt job run` (see the module docstring)."""
    import msgspec

    from yurt.runtime.cli.api_client import ALLOC_HEADER, alloc_rows, api, call, emit_json
    from yurt.runtime.cli.general import into_namespace
    from yurt.runtime.cli.jobfile import load_job_with_submission

    job, submission = load_job_with_submission(path)
    job = into_namespace(job)  # -namespace, NOMAD_NAMESPACE: unless the file names one
    with api() as client:
        # The job and the file it came from, as Nomad's `job run` registers (api/jobs.go
        # `RegisterOpts`, Submission): kept with the version, read back by /submission.
        result = call(client, "POST", "/v1/jobs",
                      content=msgspec.json.encode({"Job": job, "Submission": submission}))
        eval_id = result.get("EvalID") or ""
        templated = job.periodic is not None or (
            job.parameterized is not None and not job.dispatched
        )
        if (templated or detach) and result.get("Warnings"):
            echo(f"warning: {result['Warnings']}", err=True)
        if templated:
            # Nothing of its own runs: its children do (periodic launches, dispatches).
            if json_output:
                emit_json(result)
                return
            echo("Job registration successful")
            if job.periodic is not None:
                echo(
                    f'Periodic job: children launch on "{", ".join(job.periodic.specs())}" '
                    f"({job.periodic.time_zone}); `yurt job periodic force {job.id}` "
                    "launches one now"
                )
            else:
                echo(f"Parameterized job: run it with `yurt job dispatch {job.id}`")
            return
        if detach:
            # Nomad's `-detach`: the registration and its evaluation, nothing waited for or
            # judged (`yurt eval status ID` and `yurt job status` tell the outcome).
            if json_output:
                emit_json(result)
            else:
                echo(f"Job registration successful\nEvaluation ID: {eval_id}")
            return
        if not json_output:
            echo(f'==> Job "{job.id}" registered; evaluation "{eval_id[:8]}"')
        # A group that cannot be placed ends the run with Nomad's explanation (its blocked
        # evaluation places it once capacity frees up), not with a wait for nothing.
        ev = _finished_eval(client, eval_id) if eval_id else {}
        explanation = evaluation_failures(ev)
        if explanation:
            if json_output:  # stdout stays JSON; the explanation is for the reader
                emit_json(ev)
                echo(explanation, err=True)
            else:  # on stdout, as Nomad's monitor prints it
                echo(explanation)
            sys.exit(EXIT_USAGE)
        if result.get("Warnings"):  # a placement failure's warning repeats the explanation
            echo(f"warning: {result['Warnings']}", err=True)
        if not json_output:
            echo("==> Waiting for its allocations")
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while True:
            allocs = [
                a
                for a in call(client, "GET", f"/v1/job/{job.id}/allocations")
                if a["DesiredStatus"] == "run"
            ]
            expected = sum(g.count for g in job.task_groups)  # a count of 0 waits for none
            settled = (bool(allocs) or expected == 0) and all(
                a["ClientStatus"] in ("complete", "failed", "lost")
                or (job.type in ("service", "system") and a["ClientStatus"] == "running")
                for a in allocs
            )
            if settled or time.monotonic() > deadline:
                break
            time.sleep(POLL)
    if json_output:
        emit_json(allocs)
    else:
        print_table(ALLOC_HEADER, alloc_rows(allocs), title="Allocations")
    if any(a["ClientStatus"] in ("failed", "lost") for a in allocs):
        sys.exit(EXIT_FAILED)
    if not settled:
        echo(
            f"yurt: allocations did not settle within {SETTLE_TIMEOUT:.0f}s; "
            f"see `yurt job status {job.id}`",
            err=True,
        )
        sys.exit(EXIT_FAILED)


def job_status(job_id: str | None, json_output: bool, template: str = "") -> None:
    """`yurt job status [JOB]`: the jobs, or one job (an ID or a unique prefix of one), its
    placement failures and allocations; `--json` or `-t TEMPLATE` for scripts."""
    from urllib.parse import quote

    from yurt.runtime.cli.api_client import (
        api,
        call,
        format_kv,
        job_status_text,
        print_allocs,
        print_jobs,
        resolve_job,
    )
    from yurt.runtime.cli.output import check_format, emit

    check_format(json_output, template)
    with api() as client:
        if job_id is None:
            jobs = call(client, "GET", "/v1/jobs")
            emit(jobs, json_output, template, lambda: print_jobs(jobs))
            return
        job_id = resolve_job(client, job_id)
        path = f"/v1/job/{quote(job_id, safe='')}"
        job = call(client, "GET", path)
        allocs = call(client, "GET", f"{path}/allocations")
        evals = call(client, "GET", f"{path}/evaluations")

    def human() -> None:
        echo(format_kv([("ID", job["ID"]), ("Type", job["Type"]),
                              ("Priority", str(job["Priority"])),
                              # command/job_status.go `Run`: "" when the job has none
                              ("Node Pool", job.get("NodePool") or ""),
                              ("Status", job_status_text(job)),
                              ("Version", str(job["Version"]))]))
        failures = placement_failure_section(evals)
        if failures:
            echo(f"\n{failures}")
        echo()
        print_allocs(allocs)

    emit({"Job": job, "Allocations": allocs, "Evaluations": evals}, json_output, template, human)

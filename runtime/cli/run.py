"""`yurt run JOBFILE`: load the job, run it in the foreground (runtime/agent/foreground.py), exit.

This is the command's shell only: argument checks, the job file's errors (exit 2, rendered as
`file:line:col: field: message`, runtime/cli/jobfile.py), the open-file limit (raised by
runtime/lib/nofile.py, the agent's policy), and the state store's errors (exit 1).
What the run prints, where it keeps things and how it stops is agent/foreground.py's.

Jobs that do not run when registered are refused, exit 2, before anything is made
(`foreground_refusal`), where they used to end at once with an empty table:
- A periodic job only launches children on its schedule (nomad/periodic.go); `nomad job run`
  registers it and returns. Refused rather than run on its schedule until Ctrl-C: `yurt run`
  means "run this job now, in front of me, until it ends", and a schedule that lives only as
  long as one terminal is not what a cron job is written for (its launches would stop
  silently with the session, and overlap and catch-up rules would differ from the agent's).
  The message says how to run it under an agent, and how to launch one child now.
- A parameterized job runs only when dispatched, with its payload and meta (nomad/
  job_endpoint.go `Dispatch`): the message points to an agent and `yurt job dispatch`.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from yurt.runtime.cli.output import echo
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE, StateError

if TYPE_CHECKING:
    from yurt.runtime.structs import Job


def foreground_refusal(job: Job, jobfile: str) -> str | None:
    """Why `yurt run` will not run `job` (see the module header), in words for the user;
    None when it runs. Pure."""
    under_agent = (f"run it under an agent: `yurt agent -dev` (or `yurt agent`), then "
                   f"`yurt job run {jobfile}`")
    if job.parameterized is not None:
        return (f"job {job.id!r} is parameterized: it runs only when dispatched, with a "
                f"payload and meta, and `yurt run` has nothing to dispatch; {under_agent}, "
                f"and `yurt job dispatch {job.id} [PAYLOAD]` for each run")
    if job.periodic is not None:
        specs = ", ".join(job.periodic.specs()) or "no schedule"
        state = "" if job.periodic.enabled else ", disabled"
        return (f"job {job.id!r} is periodic (cron {specs!r}{state}): it only launches "
                f"children on its schedule, and `yurt run` runs a job once, until it ends; "
                f"{under_agent}, which launches them on schedule "
                f"(`yurt job periodic force {job.id}` launches one now)")
    return None


def run(jobfile: str, data_dir: Path | None, json_output: bool, quiet: bool) -> None:
    """Run the job in `jobfile` and exit with its status (agent/foreground.py's module
    docstring)."""
    import trio

    from yurt.runtime.agent.foreground import run_job
    from yurt.runtime.cli.jobfile import load_job_file
    from yurt.runtime.lib.nofile import raise_nofile_limit

    parsed = load_job_file(jobfile)
    refusal = foreground_refusal(parsed, jobfile)
    if refusal is not None:
        echo(f"yurt run: {refusal}", err=True)
        sys.exit(EXIT_USAGE)
    raise_nofile_limit()
    try:
        status = trio.run(
            partial(run_job, parsed, data_dir=data_dir, json_output=json_output, quiet=quiet)
        )
    except StateError as e:
        echo(f"yurt: {e}", err=True)
        sys.exit(EXIT_FAILED)
    sys.exit(status)

"""`yurt run JOBFILE`: load the job, run it in the foreground (runtime/agent/foreground.py), exit.

This is the command's shell only: argument checks, the job file's errors (exit 2, rendered as
`file:line:col: field: message`, runtime/cli/jobfile.py), the open-file limit (raised by
runtime/lib/nofile.py, the agent's policy), and the state store's errors (exit 1).
What the run prints, where it keeps things and how it stops is agent/foreground.py's.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

from yurt.runtime.cli.output import echo
from yurt.runtime.errors import EXIT_FAILED, StateError


def run(jobfile: str, data_dir: Path | None, json_output: bool, quiet: bool) -> None:
    """Run the job in `jobfile` and exit with its status (agent/foreground.py's module
    docstring)."""
    import trio

    from yurt.runtime.agent.foreground import run_job
    from yurt.runtime.cli.jobfile import load_job_file
    from yurt.runtime.lib.nofile import raise_nofile_limit

    parsed = load_job_file(jobfile)
    raise_nofile_limit()
    try:
        status = trio.run(
            partial(run_job, parsed, data_dir=data_dir, json_output=json_output, quiet=quiet)
        )
    except StateError as e:
        echo(f"yurt: {e}", err=True)
        sys.exit(EXIT_FAILED)
    sys.exit(status)

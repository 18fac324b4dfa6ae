"""A job file as the commands read it: `yurt job run|plan|parse` and `yurt run`.

One rule for every command that takes a job file: its problems end the command with exit 2
(`EXIT_USAGE`), printed as `JobSpecError.render()` words them (`file:line:col: field:
message`, runtime/errors.py), before anything is sent or started.

A leaf of the CLI: it imports the jobspec (and with it python-hcl2 and lark) only when a file
is read, so the command tree stays light (tests/test_import_weight.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from yurt.runtime.cli.output import echo
from yurt.runtime.errors import EXIT_USAGE

if TYPE_CHECKING:
    from yurt.runtime.structs import Job


def load_job_file(path: str) -> Job:
    """The job in the file at `path`; its problems, if any, end the command (exit 2)."""
    from yurt.runtime.errors import JobSpecError
    from yurt.runtime.jobspec import load_job

    try:
        return load_job(path)
    except JobSpecError as e:
        echo(e.render(), err=True)
        sys.exit(EXIT_USAGE)

"""`yurt job` and `yurt eval`: the job group, its local verbs (`validate`, `parse`), and
where every other job verb joins it (the modules named in `register`; `stop` is
runtime/cli/job_stop.py's).

Loaded only when a `job` or `eval` command runs (runtime/cli/lazy.py): `yurt --help` imports
none of it. Like every module here it imports only click and the command tree at module
level (tests/test_import_weight.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from yurt.runtime.cli.jobfile import var_options
from yurt.runtime.cli.output import echo, echo_raw, print_table
from yurt.runtime.errors import EXIT_OK, EXIT_USAGE, JobSpecError

if TYPE_CHECKING:
    from yurt.runtime.structs import Job


@click.group("job")
def job() -> None:
    """Check, inspect and run job files (Nomad HCL2 or Nomad JSON)."""


def _summary(path: str, job: Job) -> str:
    groups = len(job.task_groups)
    tasks = sum(len(g.tasks) for g in job.task_groups)
    allocs = sum(g.count for g in job.task_groups)

    def plural(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    return (f'{path}: job "{job.id}" ({job.type}, priority {job.priority}): '
            f"{plural(groups, 'group')}, {plural(tasks, 'task')}, "
            f"{plural(allocs, 'allocation')} — valid")


def _print_task_table(job: Job) -> None:
    from yurt.runtime.lib.durations import format_duration

    rows = []
    for group in job.task_groups:
        for task in group.tasks:
            stage = "main"
            if task.lifecycle is not None:
                stage = task.lifecycle.hook + (" sidecar" if task.lifecycle.sidecar else "")
            if task.leader:
                stage += " (leader)"
            rp = task.restart_policy
            restart = "-" if rp is None else (
                f"{rp.attempts}/{format_duration(rp.interval or 0)}/"
                f"{format_duration(rp.delay or 0)}/{rp.mode}")
            kill = f"{task.kill_signal or 'SIGINT'} +{format_duration(task.kill_timeout)}"
            rows.append([group.name, str(group.count), task.name, task.driver, stage, restart,
                         kill])
    print_table(("group", "count", "task", "driver", "stage", "restart", "kill"), rows,
                title=f'job "{job.id}": tasks as they will run '
                      "(restart = attempts/interval/delay/mode)", id_columns=())


@job.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option("--verbose", is_flag=True, help="Also show each job's tasks as they will run.")
@click.option("--json", "as_json", is_flag=True,
              help="Parse the job files as JSON (a {\"Job\": ...} wrapper is unwrapped).")
@click.option("--hcl2-strict", "strict", default=True, is_flag=False, flag_value=True,
              type=click.BOOL, metavar="[=BOOL]",
              help="Refuse -var values for variables the file does not declare (default "
                   "true).")
@var_options
def validate(files: Sequence[str], verbose: bool, as_json: bool, strict: bool) -> None:
    """Check job files; print one summary line per valid job.

    Every problem is printed as FILE:LINE:COL: FIELD: MESSAGE on stderr, and the exit status
    is 2 if any file has one. -json and -hcl2-strict are Nomad's (command/job_validate.go).
    """
    from yurt.runtime.cli.jobfile import parse_job_file, read_options

    read_options(as_json=as_json, strict=strict)
    status = EXIT_OK
    for path in files:
        try:
            parsed = parse_job_file(path)  # `-`: stdin
        except JobSpecError as e:
            echo(e.render(), err=True)
            status = EXIT_USAGE
            continue
        echo(_summary(path, parsed))
        if verbose:
            _print_task_table(parsed)
    sys.exit(status)


@job.command()
@click.argument("file", metavar="FILE")
@var_options
def parse(file: str) -> None:
    """Print the job as Nomad API JSON ({"Job": {...}}), defaults filled in."""
    from yurt.runtime.cli.jobfile import load_job_file
    from yurt.runtime.jobspec import encode_job

    echo_raw(encode_job(load_job_file(file)).decode())  # JSON, as `job inspect` prints it


def register(root: click.Group) -> None:
    """Add `job` and `eval` (jobs.py makes it) with every verb of theirs to `root`."""
    from yurt.runtime.cli import eval_delete
    from yurt.runtime.cli.dispatch import register as register_dispatch_commands
    from yurt.runtime.cli.job_init import register as register_job_init
    from yurt.runtime.cli.job_restart import register as register_job_restart
    from yurt.runtime.cli.job_run import register as register_job_run_command
    from yurt.runtime.cli.job_status import register as register_job_status
    from yurt.runtime.cli.job_stop import register as register_job_stop
    from yurt.runtime.cli.job_verbs import register as register_job_verbs
    from yurt.runtime.cli.jobs import register as register_job_commands

    root.add_command(job)
    register_dispatch_commands(job)
    register_job_commands(root, job)  # job plan/history/…, and the `eval` group
    register_job_status(job)
    register_job_stop(job)
    register_job_run_command(job)
    register_job_verbs(job)  # job allocs/deployments/promote
    register_job_init(job)
    register_job_restart(job)
    eval_delete.register(root)  # eval delete, onto the group jobs.py made

"""`yurt alloc`: the allocation group, its verbs defined here (`logs`, `restart`, `signal`,
`stop`) and where the others join it (`register`).

Loaded only when an `alloc` command runs (runtime/cli/lazy.py); click and the command tree
only at module level (tests/test_import_weight.py).
"""

from __future__ import annotations

import click

from yurt.runtime.cli.output import fail
from yurt.runtime.errors import EXIT_USAGE


@click.group("alloc")
def alloc() -> None:
    """Inspect and act on allocations (IDs may be abbreviated)."""


@alloc.command("logs")
@click.argument("alloc_id", metavar="ALLOC")
@click.argument("task", required=False)
@click.option("-job", "--job", "job_flag", is_flag=True,
              help="ALLOC names a job: read one of its allocations, a running one if any.")
@click.option("-task", "--task", "task_flag", default="", metavar="TASK",
              help="The task (wins over the TASK argument).")
@click.option("-group", "--group", default="", metavar="GROUP",
              help="With -job: pick among this task group's allocations.")
@click.option("-f", "--follow", is_flag=True,
              help="Keep printing new output until the allocation is over.")
@click.option("--stderr", is_flag=True, help="Show stderr instead of stdout.")
@click.option("-stdout", "--stdout", is_flag=True,
              help="Show stdout (the default; cannot be used with --stderr or --all).")
@click.option("-verbose", "--verbose", is_flag=True,
              help="Whole IDs (in the list of an ambiguous prefix's matches).")
@click.option("--all", "all_streams", is_flag=True,
              help="Show stdout and stderr together (with -f, line by line as they come).")
@click.option("--tail", is_flag=True, help="Only the end: the last 10 lines unless -n or -c.")
@click.option("-n", "--lines", type=int, default=None, metavar="N",
              help="The last N lines (implies --tail).")
@click.option("-c", "--bytes", "nbytes", type=int, default=None, metavar="BYTES",
              help="The last BYTES bytes (implies --tail).")
def alloc_logs(alloc_id: str, task: str | None, job_flag: bool, task_flag: str, group: str,
               follow: bool, stderr: bool, stdout: bool, verbose: bool, all_streams: bool,
               tail: bool, lines: int | None, nbytes: int | None) -> None:
    """Print a task's output (the only task's, if the allocation has one); with -job, of
    one of the job's allocations (ALLOC is then the job)."""
    from yurt.runtime.cli import logs as cli_logs

    cli_logs.alloc_logs(alloc_id, task, follow=follow, stderr=stderr, all_streams=all_streams,
                        tail=tail, lines=lines, nbytes=nbytes, job=job_flag,
                        task_flag=task_flag, group=group, stdout=stdout, verbose=verbose)


@alloc.command("restart")
@click.argument("alloc_id", metavar="ALLOC")
@click.argument("task", required=False)
@click.option("-task", "--task", "task_flag", default="", metavar="TASK",
              help="The task to restart (wins over the TASK argument).")
@click.option("--all-tasks", is_flag=True, help="Restart every task, dead ones included.")
@click.option("-verbose", "--verbose", is_flag=True,
              help="Whole IDs (in the list of an ambiguous prefix's matches).")
def alloc_restart(alloc_id: str, task: str | None, task_flag: str, all_tasks: bool,
                  verbose: bool) -> None:
    """Restart one task, the running tasks, or all tasks."""
    from yurt.runtime.cli import alloc_verbs

    alloc_verbs.restart(alloc_id, task_flag or task or "", all_tasks, verbose)


@alloc.command("signal")
@click.argument("alloc_id", metavar="ALLOC")
@click.argument("task", required=False)
@click.option("-s", "--signal", "sig", default="SIGINT", show_default=True,
              help="A signal name such as SIGHUP or SIGUSR1.")
@click.option("-task", "--task", "task_flag", default="", metavar="TASK",
              help="The task to signal (wins over the TASK argument).")
@click.option("-verbose", "--verbose", is_flag=True,
              help="Whole IDs (in the list of an ambiguous prefix's matches).")
def alloc_signal(alloc_id: str, task: str | None, sig: str, task_flag: str,
                 verbose: bool) -> None:
    """Send a signal to one task or to every task."""
    from yurt.runtime.lib.signames import parse_signal_name

    try:
        canonical = parse_signal_name(sig)
    except ValueError as e:  # refused here: the agent would refuse it too
        fail(str(e), EXIT_USAGE)
    from yurt.runtime.cli import alloc_verbs

    alloc_verbs.signal(alloc_id, task_flag or task or "", canonical, verbose)


@alloc.command("stop")
@click.argument("alloc_id", metavar="ALLOC")
@click.option("-detach", "--detach", is_flag=True,
              help="Print the stop's evaluation ID and return instead of monitoring it.")
@click.option("-no-shutdown-delay", "--no-shutdown-delay", is_flag=True,
              help="Kill the tasks without waiting for the group's and tasks' shutdown_delay.")
@click.option("-verbose", "--verbose", is_flag=True, help="Whole IDs in the monitor's lines.")
def alloc_stop(alloc_id: str, detach: bool, no_shutdown_delay: bool, verbose: bool) -> None:
    """Stop one allocation (its replacement is placed), then monitor the evaluation."""
    from yurt.runtime.cli import alloc_verbs

    code = alloc_verbs.stop(alloc_id, detach=detach, no_shutdown_delay=no_shutdown_delay,
                            verbose=verbose)
    if code:
        raise SystemExit(code)


def register(root: click.Group) -> None:
    """Add `alloc` with every verb of its to `root`."""
    from yurt.runtime.cli.alloc_status import register as register_alloc_status
    from yurt.runtime.cli.exec import register as register_exec_commands
    from yurt.runtime.cli.fs import register as register_fs_commands
    from yurt.runtime.cli.service import register_alloc_checks

    root.add_command(alloc)
    register_fs_commands(alloc)
    register_exec_commands(alloc)
    register_alloc_status(alloc)
    register_alloc_checks(alloc)

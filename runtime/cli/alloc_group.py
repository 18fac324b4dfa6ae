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
@click.option("--all", "all_streams", is_flag=True,
              help="Show stdout and stderr together (with -f, line by line as they come).")
@click.option("--tail", is_flag=True, help="Only the end: the last 10 lines unless -n or -c.")
@click.option("-n", "--lines", type=int, default=None, metavar="N",
              help="The last N lines (implies --tail).")
@click.option("-c", "--bytes", "nbytes", type=int, default=None, metavar="BYTES",
              help="The last BYTES bytes (implies --tail).")
def alloc_logs(alloc_id: str, task: str | None, job_flag: bool, task_flag: str, group: str,
               follow: bool, stderr: bool, all_streams: bool, tail: bool, lines: int | None,
               nbytes: int | None) -> None:
    """Print a task's output (the only task's, if the allocation has one); with -job, of
    one of the job's allocations (ALLOC is then the job)."""
    from yurt.runtime.cli import logs as cli_logs

    cli_logs.alloc_logs(alloc_id, task, follow=follow, stderr=stderr, all_streams=all_streams,
                        tail=tail, lines=lines, nbytes=nbytes, job=job_flag,
                        task_flag=task_flag, group=group)


@alloc.command("restart")
@click.argument("alloc_id", metavar="ALLOC")
@click.argument("task", required=False)
@click.option("--all-tasks", is_flag=True, help="Restart every task, dead ones included.")
def alloc_restart(alloc_id: str, task: str | None, all_tasks: bool) -> None:
    """Restart one task, the running tasks, or all tasks."""
    from yurt.runtime.cli import api_client

    api_client.alloc_restart(alloc_id, task, all_tasks)


@alloc.command("signal")
@click.argument("alloc_id", metavar="ALLOC")
@click.argument("task", required=False)
@click.option("-s", "--signal", "sig", default="SIGINT", show_default=True,
              help="A signal name such as SIGHUP or SIGUSR1.")
def alloc_signal(alloc_id: str, task: str | None, sig: str) -> None:
    """Send a signal to one task or to every task."""
    from yurt.runtime.lib.signames import parse_signal_name

    try:
        canonical = parse_signal_name(sig)
    except ValueError as e:  # refused here: the agent would refuse it too
        fail(str(e), EXIT_USAGE)
    from yurt.runtime.cli import api_client

    api_client.alloc_signal(alloc_id, task, canonical)


@alloc.command("stop")
@click.argument("alloc_id", metavar="ALLOC")
def alloc_stop(alloc_id: str) -> None:
    """Stop one allocation."""
    from yurt.runtime.cli import api_client

    api_client.alloc_stop(alloc_id)


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

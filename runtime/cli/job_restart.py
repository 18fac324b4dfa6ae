"""`yurt job restart JOB` (Nomad's command/job_restart.go): the command and its flags; the
work, and what it does, is in runtime/cli/job_restart_run.py, imported only when the command
runs (start-up: this module is imported by every `yurt` invocation).
"""

from __future__ import annotations

import sys

import click


def register(job: click.Group) -> None:
    """Attach `restart` to yurt's `job` group."""

    @job.command("restart")
    @click.argument("job_id", metavar="JOB")
    @click.option("--all-tasks", is_flag=True, help="Restart every task, dead ones too.")
    @click.option("--batch-size", default="1", metavar="N|N%",
                  help="Allocations restarted at once (default 1).")
    @click.option("--batch-wait", default="0s", metavar="DURATION|ask",
                  help="Time to wait between batches, or `ask`.")
    @click.option("--group", "groups", multiple=True, metavar="GROUP",
                  help="Only this group's allocations (repeatable).")
    @click.option("--task", "tasks", multiple=True, metavar="TASK",
                  help="Only this task (repeatable).")
    @click.option("--no-shutdown-delay", is_flag=True,
                  help="Accepted for Nomad's scripts; changes nothing here.")
    @click.option("--on-error", default="ask", metavar="ask|fail",
                  help="On a batch's error: ask, or fail at once.")
    @click.option("--reschedule", is_flag=True,
                  help="Stop the allocations and wait for their replacements instead.")
    @click.option("--yes", is_flag=True, help="Answer yes to every question.")
    @click.option("--verbose", is_flag=True, help="Full IDs, and the allocations skipped.")
    def job_restart(job_id: str, all_tasks: bool, batch_size: str, batch_wait: str,
                    groups: tuple[str, ...], tasks: tuple[str, ...], no_shutdown_delay: bool,
                    on_error: str, reschedule: bool, yes: bool, verbose: bool) -> None:
        """Restart or reschedule a job's allocations, in batches (Nomad's `job restart`)."""
        from yurt.runtime.cli.job_restart_run import parse_options, restart_job

        del no_shutdown_delay
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
        opts = parse_options(batch_size, batch_wait, on_error, all_tasks, tasks, groups,
                             reschedule, yes, verbose, interactive)
        sys.exit(restart_job(job_id, opts))

"""`yurt`: the command line.

Exit codes are a contract, one table for every verb (`EXIT_CODES` in runtime/errors.py, and
README.md's, checked against it): 0 ok, 1 failed (a job, a request, or no agent answering),
2 bad input or usage, 130 interrupted. Errors go to stderr as `file:line:col: field: message`
lines so editors and CI annotate them; results go to stdout, machine-readable where a command
says so.

Commands that need the agent arrive with it; this module only parses and dispatches, the work
lives in the modules it calls: one module per verb group (Nomad's command/), the API verbs'
helpers in api_client.py, job files read by jobfile.py, placement failures worded by
evalfmt.py.

Which way imports point (tests/test_layers.py): the CLI speaks to the agent over HTTP only, so
no module here imports `client`, `server` or `api`. The commands that run an agent, a server or
simulated nodes in this process (agent.py, server.py, run.py, nodesim.py, sim.py) alone import
`agent` or `sim`, and at run time only inside the functions that run the command (import
weight: tests/test_import_weight.py). `yurt run`'s open-file limit is the agent's one policy,
runtime/lib/nofile.py.

A command's function is named `*_command` (`*_group`) when a module here bears the command's
name (`run_command` beside run.py): a function named `run` would be the package's `run`, and
`from yurt.runtime.cli import run` in a fresh process would find it instead of the module
(tests/test_cli.py checks that no name here hides a module).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, final

import click

from yurt.runtime.cli import acl as cli_acl
from yurt.runtime.cli import acl_policy, acl_role, acl_token
from yurt.runtime.cli import deployment as cli_deployment
from yurt.runtime.cli import node as cli_node
from yurt.runtime.cli import node_pool as cli_node_pool
from yurt.runtime.cli.action import register as register_action_command
from yurt.runtime.cli.agent_flags import nomad_agent_options
from yurt.runtime.cli.alloc_status import register as register_alloc_status
from yurt.runtime.cli.cmds import register as register_cmds
from yurt.runtime.cli.dispatch import register as register_dispatch_commands
from yurt.runtime.cli.exec import register as register_exec_commands
from yurt.runtime.cli.flags import nomad_spelling
from yurt.runtime.cli.fmt import register as register_fmt_command
from yurt.runtime.cli.fs import register as register_fs_commands
from yurt.runtime.cli.general import attach_general_options
from yurt.runtime.cli.job_init import register as register_job_init
from yurt.runtime.cli.job_restart import register as register_job_restart
from yurt.runtime.cli.job_run import register as register_job_run_command
from yurt.runtime.cli.job_status import register as register_job_status
from yurt.runtime.cli.job_verbs import register as register_job_verbs
from yurt.runtime.cli.jobfile import var_options
from yurt.runtime.cli.jobs import register as register_job_commands
from yurt.runtime.cli.node_status import register as register_node_status
from yurt.runtime.cli.nodesim import register as register_nodesim_command
from yurt.runtime.cli.operator import register as register_operator_commands
from yurt.runtime.cli.output import echo, echo_raw, fail, print_table
from yurt.runtime.cli.secret_options import refuse_secret_options
from yurt.runtime.cli.server import register as register_server_group
from yurt.runtime.cli.status import register as register_status_command
from yurt.runtime.cli.ui import register as register_ui_command
from yurt.runtime.cli.vars import register as register_var_commands
from yurt.runtime.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    JobSpecError,
)

if TYPE_CHECKING:
    from yurt.runtime.structs import Job

# Start-up is most of what a command costs, so this module and the ones it registers import
# only click and the command tree: trio (the agent, `run`, `events`, `exec`), rich (a
# terminal's tables), the jobspec with python-hcl2 and lark (job files), the Go template
# engine (`-t`) and importlib.metadata (`--version`) load inside the commands that use them.
# The remote verbs speak HTTP through runtime/cli/http.py (http.client), not httpx2.
# scripts/bench_cli measures the result; tests/test_import_weight.py keeps it so. The daemon
# gains too: `yurt agent` carries none of the client's modules.


def _summary(path: str, job: Job) -> str:
    groups = len(job.task_groups)
    tasks = sum(len(g.tasks) for g in job.task_groups)
    allocs = sum(g.count for g in job.task_groups)

    def plural(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    return (f'{path}: job "{job.id}" ({job.type}, priority {job.priority}): '
            f"{plural(groups, 'group')}, {plural(tasks, 'task')}, "
            f"{plural(allocs, 'allocation')} — valid")


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from yurt.runtime import __version__  # read from the installed metadata: only when asked

    echo(f"yurt, version {__version__}")
    ctx.exit()


def _quiet_exit() -> NoReturn:
    # The reader of stdout is gone: nothing more can be said to it, and the interpreter's
    # flush at exit would raise again, so stdout points at /dev/null (Python's advice).
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(EXIT_OK)


@final
class _Root(click.Group):
    """The root group, with one safety net: a reader that leaves (`yurt ... | head`) ends any
    verb quietly with 0, as it ends `cat`. It sits here, around parsing (`--help`,
    `--version` print while parsing) and running, because click's `main` turns a broken pipe
    into a silent exit 1 before `main()` below could see it."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except BrokenPipeError:
            _quiet_exit()

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _quiet_exit()


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", "-v", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
def cli() -> None:
    """yurt runs Nomad jobs on this machine: task groups as allocations, with lifecycle
    stages, restart policies, graceful kills and state that survives an agent restart."""


@cli.group()
def job() -> None:
    """Check, inspect and run job files (Nomad HCL2 or Nomad JSON)."""


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
@var_options
def validate(files: Sequence[str], verbose: bool) -> None:
    """Check job files; print one summary line per valid job.

    Every problem is printed as FILE:LINE:COL: FIELD: MESSAGE on stderr, and the exit status
    is 2 if any file has one.
    """
    from yurt.runtime.cli.jobfile import parse_job_file

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


@cli.command("run")
@click.argument("jobfile", metavar="JOBFILE")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the state and the allocation directories live (default: a new "
                   "temporary directory, kept and named at the start and the end).")
@click.option("--json", "json_output", is_flag=True,
              help="Print NDJSON event-stream records instead of human output.")
@click.option("-q", "--quiet", is_flag=True, help="Do not show the tasks' output.")
@var_options
def run_command(jobfile: str, data_dir: Path | None, json_output: bool, quiet: bool) -> None:
    """Run a job in the foreground on an embedded agent, printing what happens and each
    task's output, line by line behind the task's name.

    A batch job returns when every allocation has finished: exit 0 if all are complete,
    1 otherwise. A service job runs until Ctrl-C, SIGTERM or SIGHUP, then stops its
    allocations gracefully (poststop tasks run). Invalid job files exit 2, and so do
    periodic and parameterized jobs, which run under an agent (the message says how).
    """
    from yurt.runtime.cli import run as cli_run

    cli_run.run(jobfile, data_dir, json_output, quiet)


# --------------------------------------------------------------------------- remote verbs


def _json_flag(f: Callable[..., None]) -> Callable[..., None]:
    return click.option("--json", "json_output", is_flag=True,
                        help="Print the API's JSON instead of tables.")(f)


@job.command("stop")
@click.argument("job_id", metavar="JOB")
@click.option("--purge", is_flag=True, default=False,
              help="Also remove the job and its history from the server (Nomad's -purge).")
@_json_flag
def job_stop(job_id: str, purge: bool, json_output: bool) -> None:
    """Stop a job: every allocation is stopped (poststop tasks run)."""
    from yurt.runtime.cli import api_client

    api_client.job_stop(job_id, json_output, purge=purge)


@cli.group()
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


@cli.group("node")
def node_group() -> None:
    """This node."""


@cli.command()
@click.option("--topic", "topics", multiple=True,
              help="Topic filter such as Allocation, Task or Job:web (repeatable).")
@click.option("--index", type=int, default=None,
              help="First replay the kept events from this index on (0: all kept); "
                   "without it, only new events.")
@_json_flag
def events(topics: tuple[str, ...], index: int | None, json_output: bool) -> None:
    """Follow the agent's event stream (websocket) until Ctrl-C."""
    from yurt.runtime.cli import api_client

    api_client.events(list(topics), index, json_output)


@cli.command("agent")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Agent settings in TOML (options below override it).")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="State, allocation directories and logs (default ~/.local/share/yurt; "
                   "with --dev, a temporary directory removed when the agent stops).")
@click.option("--bind", default=None, help="Address for the API (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port for the API (default 4646).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A management token the agent accepts besides its ACL tokens (with "
                   "[acl] enabled = false: the one token it accepts); or set "
                   "$YURT_AGENT_TOKEN.")
@click.option("--fake-device", "fake_devices", multiple=True, metavar="V/T/N=ID,ID",
              help="Declare devices for the fake device plugin (repeatable), e.g. "
                   "nvidia/gpu/T4=GPU-0,GPU-1.")
@click.option("--driver-allow", multiple=True, help="Run only these drivers (repeatable).")
@click.option("--driver-block", multiple=True, help="Never run these drivers (repeatable).")
@click.option("--log-level", default=None, metavar="LEVEL",
              help="Log this level and above to stdout: trace, debug, info (default), warn "
                   "or error.")
@click.option("--log-json/--no-log-json", "log_json", default=None,
              help="Log JSON lines (@timestamp, @level, @module, @message and fields).")
@click.option("--servers", default=None, metavar="URL[,URL...]",
              help="Run as a client of these servers (yurt server), with no embedded server.")
@click.option("--node-name", default=None, help="This node's name (default: the host name).")
@click.option("--datacenter", default=None, help="This node's datacenter (default dc1).")
@click.option("--meta", multiple=True, metavar="KEY=VALUE",
              help="Node metadata for constraints (repeatable).")
@click.option("--dev", "dev_mode", is_flag=True, default=False,
              help="Dev mode, as Nomad's `-dev`: bound to and advertising loopback, state "
                   "in a temporary data dir unless one is given; stopping the agent stops "
                   "every allocation and kills its tasks, leaving nothing to re-attach to.")
@nomad_agent_options  # runtime/cli/agent_flags.py: -region, -state-dir, -node-class, ...
def agent_command(config_file: Path | None, data_dir: Path | None, bind: str | None,
          port: int | None, token_file: Path | None, fake_devices: tuple[str, ...],
          driver_allow: tuple[str, ...], driver_block: tuple[str, ...],
          log_level: str | None, log_json: bool | None, servers: str | None,
          node_name: str | None, datacenter: str | None, meta: tuple[str, ...],
          dev_mode: bool, **nomad: Any) -> None:
    """Run the agent: an embedded server and client with Nomad's HTTP API.

    SIGINT or SIGTERM stop the agent and leave tasks running; the next start re-attaches
    (with --dev, they stop every task instead).
    Exit status: 0 stopped by a signal, 1 could not start (port in use, data dir locked or
    not writable), 2 bad options or config file.
    """
    from yurt.runtime.cli import agent as cli_agent

    sys.exit(cli_agent.run_agent(cli_agent.AgentOptions(
        config_file=config_file, data_dir=data_dir, bind=bind, port=port,
        token_file=token_file, fake_devices=fake_devices,
        driver_allow=driver_allow, driver_block=driver_block, log_level=log_level,
        log_json=log_json, servers=servers, node_name=node_name, datacenter=datacenter,
        meta=meta, dev_mode=dev_mode, **nomad)))


@cli.command("sim")
@click.option("--seed", type=int, default=None,
              help="The first scenario's seed (default: a random one, printed).")
@click.option("--scenarios", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many scenarios: seeds S, S+1, ...")
@click.option("--verbose", is_flag=True,
              help="A line per scenario; with one scenario, its every step and message.")
@click.option("--json", "json_output", is_flag=True, help="One JSON object.")
def sim_command(seed: int | None, scenarios: int, verbose: bool, json_output: bool) -> None:
    """Run the deterministic whole-cluster simulation: servers, simulated nodes and a
    simulated network under a mock clock, random scenarios checked against the cluster's
    invariants. Exit status: 0 every invariant held, 1 a violation (the seed is printed:
    `yurt sim --seed S` replays it), 2 bad options.
    """
    from yurt.runtime.cli import sim as cli_sim

    sys.exit(cli_sim.run(seed, scenarios, verbose, json_output))


def main() -> None:
    """Console-script entry point: runs the command and exits with the status of the table
    in runtime/errors.py (`EXIT_CODES`).

    click's own standalone mode turns Ctrl-C into "Aborted!" and exit 1; here an interrupt
    is 130 wherever it lands, as a shell reports a process ended by SIGINT. Nomad's
    single-dash long flags (`-detach`) are spelled as click's first (runtime/cli/flags.py).
    """
    try:
        code = cli.main(args=nomad_spelling(cli, sys.argv[1:]), prog_name="yurt",
                        standalone_mode=False)
    except click.ClickException as e:  # usage errors: click's message, exit 2
        e.show()
        sys.exit(e.exit_code)
    except click.Abort as e:  # click's translation of a KeyboardInterrupt (or of EOF)
        interrupted = isinstance(e.__cause__ or e.__context__, KeyboardInterrupt)
        sys.exit(EXIT_INTERRUPTED if interrupted else EXIT_FAILED)
    except KeyboardInterrupt:
        echo(err=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else EXIT_OK)


register_var_commands(cli)
cli_node.register(cli, node_group)  # node eligibility/drain, system, tasks
register_status_command(cli)  # status [ID]
cli_node_pool.register(node_group)  # node pool apply/list/info/delete/jobs/nodes
register_node_status(node_group)  # node status
register_dispatch_commands(job)
register_fs_commands(alloc)  # alloc fs
register_exec_commands(alloc)  # alloc exec
register_alloc_status(alloc)  # alloc status
register_job_commands(cli, job)  # job/eval verbs
register_job_status(job)  # job status
register_job_run_command(job)  # job run
register_job_verbs(job)  # job allocs/deployments/promote
register_job_init(job)  # job init
register_job_restart(job)  # job restart
cli_deployment.register(cli)  # deployment list/status/promote/fail
register_nodesim_command(cli)  # nodesim
# acl bootstrap (cli/acl.py, which the verb modules share), acl policy/token/role verbs
for acl_verbs in (acl_policy.policy_group, acl_token.token_group, acl_role.role_group):
    cli_acl.acl_group.add_command(acl_verbs)
cli.add_command(cli_acl.acl_group)
register_ui_command(cli)  # ui
register_action_command(cli)  # action
register_fmt_command(cli)  # fmt
register_operator_commands(cli)  # operator scheduler|raft|snapshot|api
register_server_group(cli)  # server (run one; members, join, force-leave)
register_cmds(cli)  # service, alloc checks, agent-info, version, monitor, eval delete
attach_general_options(cli)  # Nomad's -address, -namespace, TLS... on every remote verb
refuse_secret_options(cli)  # last: every command above gets the refusal of `--token`

"""`yurt`: the command line.

Exit codes are a contract, one table for every verb (`EXIT_CODES` in runtime/errors.py, and
README.md's, checked against it): 0 ok, 1 failed (a job, a request, or no agent answering),
2 bad input or usage, 130 interrupted. Errors go to stderr as `file:line:col: field: message`
lines so editors and CI annotate them; results go to stdout, machine-readable where a command
says so.

This module only parses and dispatches: the root group, `main`, and the table of top-level
commands, each loaded from its module only when used (runtime/cli/lazy.py). The work lives in
the modules it calls: one module per verb group (Nomad's command/), the API verbs' helpers in
api_client.py, Nomad's general options (`-address`, `-namespace`, TLS…) in general.py, given
to every remote verb as it loads, job files read by jobfile.py, placement failures worded by
evalfmt.py.

Which way imports point (tests/test_layers.py): the CLI speaks to the agent over HTTP only, so
no module here imports `client`, `server` or `api`. The commands that run an agent, a server or
simulated nodes in this process (agent.py, agent_options.py, server.py, run.py, nodesim.py,
sim.py) alone import
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
from typing import Any, NoReturn, final

import click

from yurt.runtime.cli.flags import nomad_spelling
from yurt.runtime.cli.general import general_options
from yurt.runtime.cli.lazy import LazyGroup
from yurt.runtime.cli.output import echo
from yurt.runtime.cli.secret_options import refuse_secret_options
from yurt.runtime.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK

# Start-up is most of what a command costs, so this module imports only click and the few
# modules that parse: every command lives in a module of its group's, registered lazily by
# the table below (runtime/cli/lazy.py), so `yurt --help` imports none of them and `yurt job
# status` only the job verbs. Those modules in turn import only click and the command tree:
# trio (the agent, `run`, `events`, `exec`), rich (a terminal's tables), the jobspec with
# python-hcl2 and lark (job files), the Go template engine (`-t`) and importlib.metadata
# (`--version`) load inside the commands that use them. The remote verbs speak HTTP through
# runtime/cli/http.py (http.client), not httpx2. scripts/bench_cli measures the result;
# tests/test_import_weight.py keeps it so. The daemon gains too: `yurt agent` carries none
# of the client's modules.


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
class _Root(LazyGroup):
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


def _dress(command: click.Command, name: str) -> None:
    """What every command gets when it is loaded: Nomad's general options on the remote
    verbs (runtime/cli/general.py), then the refusal of secrets on the command line."""
    general_options(command, (name,))
    refuse_secret_options(command)


assert isinstance(cli, LazyGroup)
cli.on_load.append(_dress)
refuse_secret_options(cli)  # the root's own `--token`

#: Every top-level command: (names, the function that registers them, their help lines as
#: `--help` lists them; tests/test_cli_lazy.py holds each to the loaded command's own).
_CLI = "yurt.runtime.cli."
for _names, _target, _helps in (
    ("acl", "acl_group:register", "Nomad's ACLs: bootstrap, policies, tokens..."),
    ("action", "action:register", 'Run an action of a task (its action "name"...'),
    (("run", "agent", "sim"), "daemon_verbs:register",
     ("Run a job in the foreground on an embedded...",
      "Run the agent: an embedded server and...",
      "Run the deterministic whole-cluster...")),
    (("agent-info", "version"), "agent_info:register",
     ("Display status information about the agent...",
      "Print yurt's version and the Nomad API it...")),
    ("alloc", "alloc_group:register", "Inspect and act on allocations (IDs may be..."),
    ("deployment", "deployment:register", "Interact with deployments (a job version's..."),
    (("job", "eval"), "job_group:register",
     ("Check, inspect and run job files (Nomad...",
      "Evaluations: why the scheduler ran, and...")),
    ("events", "events:register", "Follow the agent's event stream..."),
    ("fmt", "fmt:register", "Rewrite Nomad job and agent files (.nomad,..."),
    ("monitor", "monitor:register", "Stream the agent's log lines, at a level..."),
    (("var", "namespace"), "vars:register",
     ("Nomad Variables: secrets and settings at a...",
      "Namespaces: scopes for jobs, allocations...")),
    (("node", "system", "tasks"), "node_group:register",
     ("Nodes: their status, eligibility, draining...",
      "Server maintenance.",
      "Every job and what its allocations' tasks...")),
    ("nodesim", "nodesim:register", "Simulate many client nodes in one process..."),
    ("operator", "operator:register", "Operate the server: scheduler..."),
    ("server", "server:register", "Run a cluster server (with --etcd): the..."),
    ("service", "service:register", "Nomad-provider services: list, inspect and..."),
    ("status", "status:register", "Any object's status by its ID or a prefix..."),
    ("ui", "ui:register", "Open the web UI in the default browser, on..."),
    ("volume", "volume_group:register", "Dynamic host volumes: create, register,..."),
):
    cli.add_lazy(_names, _CLI + _target, _helps)


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

"""The verbs that run something in this process rather than ask an agent: `yurt run` (a job
in the foreground), `yurt agent`, `yurt sim`. Each imports its runtime (trio, the agent, the
simulator) inside its function, so loading this module costs only click.

Loaded only when one of them runs (runtime/cli/lazy.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from yurt.runtime.cli.agent_flags import nomad_agent_options
from yurt.runtime.cli.jobfile import var_options


@click.command("run")
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


@click.command("agent")
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
@click.option("--node-name", "-node", "node_name", default=None,
              help="This node's name (default: the host name).")
@click.option("--datacenter", "-dc", "datacenter", default=None,
              help="This node's datacenter (default dc1).")
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
    from yurt.runtime.cli.agent import run_agent
    from yurt.runtime.cli.agent_options import AgentOptions

    sys.exit(run_agent(AgentOptions(
        config_file=config_file, data_dir=data_dir, bind=bind, port=port,
        token_file=token_file, fake_devices=fake_devices,
        driver_allow=driver_allow, driver_block=driver_block, log_level=log_level,
        log_json=log_json, servers=servers, node_name=node_name, datacenter=datacenter,
        meta=meta, dev_mode=dev_mode, **nomad)))


@click.command("sim")
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


def register(root: click.Group) -> None:
    for command in (run_command, agent_command, sim_command):
        root.add_command(command)

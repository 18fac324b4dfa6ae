"""`yurt nodesim`: from command-line options to a running `NodeSimulator` (sim/nodesim.py).

Runs until `--duration` passes or SIGINT/SIGTERM arrives, then prints its summary: a table on
stdout, or one JSON object with `--json` (progress lines go to stderr either way, so stdout
stays one parseable object). Exit status as `yurt server`'s: 0 once stopped, 2 for options
that can never work (a bad profile, no server URL), 1 when the nodes could not run.
"""

from __future__ import annotations

import json
import random
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from yurt.runtime.cli.durationtype import GO_DURATION
from yurt.runtime.cli.output import echo, echo_raw
from yurt.runtime.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def register(cli: click.Group) -> None:
    """Attach `nodesim` to the top-level group."""
    cli.add_command(nodesim)


@click.command()
@click.option("--servers", required=True, metavar="URL[,URL...]",
              help="The cluster's servers (yurt server), tried in order.")
@click.option("--nodes", type=int, required=True, help="How many nodes to simulate.")
@click.option("--seed", type=int, default=None,
              help="Node identities and every random draw: the same seed, the same nodes "
                   "(so never run two simulators of one seed against one cluster: each "
                   "node would run its allocations twice). Default: a random one, printed "
                   "in the summary.")
@click.option("--profile", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="TOML: [node] datacenter, node_class, cpu, memory_mb, devices, meta; "
                   "[alloc] start_delay, run_time, failure_probability.")
@click.option("--duration", type=GO_DURATION, default=None,
              help="How long to run once every node registered, a Go duration such as "
                   '"300s" or "5m" (default: until SIGINT/SIGTERM).')
@click.option("--json", "json_output", is_flag=True,
              help="Print the summary as one JSON object.")
@click.option("--name-prefix", default="sim-", show_default=True,
              help="Node names are PREFIX<i>.")
@click.option("--register-rate", type=float, default=200.0, show_default=True,
              help="Nodes started per second (registrations are paced, not all at once).")
@click.option("--sync", type=click.Choice(["yurt", "naive"]), default="yurt",
              show_default=True,
              help="yurt: the client's batched, prioritised alloc sync; naive: one call per "
                   "update, sent at once (for comparison).")
@click.option("--log-level", default="error", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="Log this level and above to stderr.")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The cluster's token, sent with each registration (default: "
                   "$YURT_AGENT_TOKEN), as `yurt agent` sends it.")
def nodesim(servers: str, nodes: int, seed: int | None, profile: Path | None,
            duration: float | None, json_output: bool, name_prefix: str, register_rate: float,
            sync: str, log_level: str, token_file: Path | None) -> None:
    """Simulate many client nodes in one process against real servers.

    Each node is the real client code (registration, heartbeats, allocation pulls, alloc
    sync) running simulated allocations. Prints what the servers received and what the
    nodes saw when stopped. Exit status: 0 stopped, 1 failed, 2 bad options.
    """
    if seed is None:
        seed = random.randrange(2**31)
    sys.exit(run_nodesim(NodeSimCommand(
        servers=servers, nodes=nodes, seed=seed, profile=profile, duration=duration,
        json_output=json_output, name_prefix=name_prefix, sync=sync,
        register_rate=register_rate, log_level=log_level.lower(), token_file=token_file)))


@dataclass(frozen=True)
class NodeSimCommand:
    servers: str
    nodes: int
    seed: int = 0
    profile: Path | None = None
    duration: float | None = None
    json_output: bool = False
    name_prefix: str = "sim-"
    sync: str = "yurt"
    register_rate: float = 200.0
    log_level: str = "error"
    token_file: Path | None = None


def run_nodesim(command: NodeSimCommand) -> int:
    import trio

    from yurt.runtime.agent.log import configure
    from yurt.runtime.cli.agent_options import agent_token
    from yurt.runtime.sim.nodesim import NodeSimOptions, NodeSimulator, format_summary
    from yurt.runtime.sim.nodesim_profile import Profile, ProfileError, load_profile

    servers = [s.strip() for s in command.servers.split(",") if s.strip()]
    problem = None
    bad = [s for s in servers if not _server_url(s)]
    token = ""
    if not servers:
        problem = "--servers needs at least one server URL, e.g. http://127.0.0.1:4646"
    elif bad:
        problem = (f"--servers: {bad[0]!r} is not a server URL (expected http://HOST:PORT "
                   "or HOST:PORT)")
    elif command.nodes < 1:
        problem = f"--nodes must be at least 1, not {command.nodes}"
    elif command.duration is not None and not command.duration > 0:
        problem = f"--duration must be above 0, not {command.duration}"
    elif not command.register_rate > 0:
        problem = f"--register-rate must be above 0, not {command.register_rate}"
    if problem is None:
        try:
            token = agent_token(command.token_file)
        except ValueError as e:
            problem = str(e)
    profile = Profile()
    if problem is None and command.profile is not None:
        try:
            profile = load_profile(command.profile)
        except ProfileError as e:
            problem = str(e)
    if problem is not None:
        echo(f"yurt: {problem}", err=True)
        return EXIT_USAGE
    configure(command.log_level, False, sys.stderr)
    simulator = NodeSimulator(NodeSimOptions(
        servers=servers, nodes=command.nodes, seed=command.seed, profile=profile,
        name_prefix=command.name_prefix, sync=command.sync,
        register_rate=command.register_rate, token=token))

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                async def stop_on_signal() -> None:
                    async for _ in signals:
                        nursery.cancel_scope.cancel(reason="signal")
                        return
                nursery.start_soon(stop_on_signal)
                await nursery.start(simulator.run)
                if command.duration is not None:
                    # The duration counts from the last registration: the run is what the
                    # registered nodes did, not how long they took to arrive.
                    await trio.sleep(command.duration)
                    nursery.cancel_scope.cancel(reason="duration")

    try:
        trio.run(main)
    except Exception as e:
        echo(f"yurt: nodesim stopped: {e!r}", err=True)
        _print(simulator.summary(), command.json_output, format_summary)
        return EXIT_FAILED
    _print(simulator.summary(), command.json_output, format_summary)
    return EXIT_OK


def _server_url(server: str) -> bool:
    """Whether `server` reads as a server's address: http(s)://HOST[:PORT] or HOST:PORT."""
    from urllib.parse import urlsplit

    url = urlsplit(server if "://" in server else f"http://{server}")
    try:
        url.port  # noqa: B018  (raises for a port that is no number or out of range)
    except ValueError:
        return False
    return url.scheme in ("http", "https") and bool(url.hostname) and (
        url.port is not None or "://" in server)


def _print(summary: dict[str, Any], as_json: bool,
           table: Callable[[dict[str, Any]], str]) -> None:
    if as_json:
        echo_raw(json.dumps(summary))
    else:
        echo(table(summary))

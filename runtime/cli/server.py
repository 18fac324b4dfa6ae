"""`yurt server`: from command-line options to a running cluster server; and Nomad's
`server members|join|force-leave` (command/server_members.go, server_join.go,
server_force_leave.go), which ask the agent at `$YURT_ADDR` about the servers it knows.

`server` is one click group for both: `yurt server --etcd URL ...` with no subcommand runs a
server exactly as before (`--etcd` is required only then, with click's usage error, exit 2);
`yurt server members` and the others are remote verbs and ignore the group's options.
`members` prints Nomad's columns (Name, Address, Port, Status, Leader, Raft Version, Build,
Datacenter, Region; `-verbose`/`-detailed` add Protocol and Tags); a member leads when its
`rpc_addr:port` is its region's `/v1/status/leader` (command/server_members.go `isLeader`).

The same failure rules as `yurt agent` (cli/agent.py): one line on stderr for what the operator
can fix, exit 2 for options that can never work (no etcd URL, a non-loopback bind without a
token), 1 for an environment that fails (the port taken, etcd unreachable), 0 once stopped by
SIGINT or SIGTERM.

The token is read as `yurt agent` reads it (cli/agent.py `agent_token`): from `--token-file`,
else `$YURT_AGENT_TOKEN`, the variable the cluster's nodes send it from. Never from the command
line, where every local user would read it (cli/secret_options.py refuses `--token`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from yurt.runtime.cli.ui_hint import ui_option
from yurt.runtime.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE


@dataclass(frozen=True)
class ServerOptions:
    etcd: str
    bind: str = "127.0.0.1"
    port: int = 4646
    data_dir: Path | None = None
    name: str | None = None
    token_file: Path | None = None
    advertise: str | None = None
    prefix: str = "/yurt/"
    leader_ttl: int = 5
    min_heartbeat_ttl: float = 10.0
    heartbeat_grace: float = 10.0
    max_heartbeats_per_second: float = 50.0
    failover_heartbeat_ttl: float = 300.0
    log_level: str = "info"
    allowed_hosts: tuple[str, ...] = ()


def run_server(options: ServerOptions) -> int:
    import signal
    import socket

    import trio

    from yurt.runtime import __version__
    from yurt.runtime.agent.log import configure
    from yurt.runtime.agent.serverproc import (
        EtcdError,
        HeartbeatConfig,
        ServerConfig,
        ServerProcess,
        parse_allowed_host,
    )
    from yurt.runtime.cli.agent import leaves
    from yurt.runtime.cli.agent_options import UsageError, agent_token
    from yurt.runtime.cli.output import echo
    from yurt.runtime.lib.datadir import default_data_dir

    try:
        urls = tuple(u.strip() for u in options.etcd.split(",") if u.strip())
        if not urls:
            raise UsageError("--etcd needs at least one etcd URL, e.g. http://127.0.0.1:2379")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise UsageError(f"--etcd {url!r} is not a URL; give http://HOST:PORT")
        try:
            token = agent_token(options.token_file)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if options.bind not in ("127.0.0.1", "localhost", "::1") and not token:
            raise UsageError("refusing to bind beyond loopback without a token "
                             "(--token-file FILE or $YURT_AGENT_TOKEN)")
        if options.bind in ("0.0.0.0", "::", "") and not options.advertise:
            raise UsageError("--bind on every interface needs --advertise http://HOST:PORT: "
                             "the address nodes and the other servers reach this one at")
        if options.advertise and not options.advertise.startswith(("http://", "https://")):
            raise UsageError(f"--advertise {options.advertise!r} is not a URL; give "
                             "http://HOST:PORT")
        if not 0 <= options.port <= 65535:
            raise UsageError(f"--port {options.port} is not a TCP port")
        for flag, value in (("--min-heartbeat-ttl", options.min_heartbeat_ttl),
                            ("--heartbeat-grace", options.heartbeat_grace),
                            ("--max-heartbeats-per-second", options.max_heartbeats_per_second),
                            ("--failover-heartbeat-ttl", options.failover_heartbeat_ttl)):
            if not value > 0:
                raise UsageError(f"{flag} must be above 0, not {value}")
        if options.leader_ttl < 1:
            raise UsageError(f"--leader-ttl must be at least 1 (s), not {options.leader_ttl}")
        if not options.prefix.startswith("/") or not options.prefix.endswith("/"):
            raise UsageError(f"--prefix {options.prefix!r} must start and end with /")
        try:
            allowed_hosts = tuple(parse_allowed_host(h) for h in options.allowed_hosts)
        except ValueError as e:
            raise UsageError(f"--allowed-host {e}") from None
    except UsageError as e:
        echo(f"yurt: {e}", err=True)
        return EXIT_USAGE
    configure(options.log_level, False, sys.stdout)
    name = options.name or socket.gethostname()
    # A server's state is in etcd; its directory keeps only what is still per server
    # (variables' keyring, namespaces, the scheduler configuration).
    data_dir = options.data_dir or default_data_dir() / "servers" / name
    config = ServerConfig(
        etcd=urls, name=name, bind=options.bind, port=options.port,
        data_dir=data_dir.absolute(), token=token,
        prefix=options.prefix, leader_ttl=options.leader_ttl,
        advertise=(options.advertise or "").rstrip("/"), allowed_hosts=allowed_hosts,
        heartbeat=HeartbeatConfig(min_ttl=options.min_heartbeat_ttl,
                                  max_per_second=options.max_heartbeats_per_second,
                                  grace=options.heartbeat_grace,
                                  failover_ttl=options.failover_heartbeat_ttl))

    listening = False

    async def main() -> None:
        nonlocal listening
        process = ServerProcess(config)
        async with trio.open_nursery() as nursery:
            address = await nursery.start(process.run)
            listening = True
            echo(f"yurt server {__version__} {name} listening on {address} "
                 f"(etcd {','.join(urls)})", err=True)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    echo("yurt server stopping", err=True)
                    process.stop()
                    break

    try:
        trio.run(main)
    except Exception as e:
        what = "the server stopped" if listening else "cannot start the server"
        for leaf in leaves(e):
            if isinstance(leaf, EtcdError):
                echo(f"yurt: {what}: {leaf}", err=True)
                return EXIT_FAILED
            if isinstance(leaf, OSError):
                echo(f"yurt: cannot serve on {options.bind}:{options.port}: "
                     f"{leaf.strerror or leaf}", err=True)
                return EXIT_FAILED
        raise
    return EXIT_OK


@click.group("server", invoke_without_command=True)
@click.option("--etcd", default=None, metavar="URL[,URL...]",
              help="The etcd cluster holding the cluster's state.")
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address for the API.")
@click.option("--port", type=int, default=4646, show_default=True, help="Port for the API.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Local files of this server (its state lives in etcd).")
@click.option("--name", default=None, help="This server's name (default: the host name).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Require the token in this file as X-Nomad-Token (or set "
                   "$YURT_AGENT_TOKEN).")
@click.option("--advertise", default=None, metavar="URL",
              help="The URL nodes and other servers reach this one at (needed with a "
                   "wildcard --bind).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A name requests may carry in Host besides this server's own names and "
                   "--advertise host (repeatable), e.g. a DNS alias nodes reach it at.")
@click.option("--prefix", default="/yurt/", show_default=True,
              help="The etcd key prefix of this cluster.")
@click.option("--leader-ttl", type=int, default=5, show_default=True,
              help="Seconds a dead leader keeps leadership before another server takes over.")
@click.option("--min-heartbeat-ttl", type=float, default=10.0, show_default=True,
              help="Nomad's min_heartbeat_ttl, seconds.")
@click.option("--heartbeat-grace", type=float, default=10.0, show_default=True,
              help="Nomad's heartbeat_grace, seconds.")
@click.option("--max-heartbeats-per-second", type=float, default=50.0, show_default=True,
              help="Nomad's max_heartbeats_per_second.")
@click.option("--failover-heartbeat-ttl", type=float, default=300.0, show_default=True,
              help="Nomad's failover_heartbeat_ttl, seconds: how long a new leader waits "
                   "for nodes nobody heard from while no server led.")
@click.option("--log-level", default="info", metavar="LEVEL",
              help="trace, debug, info, warn, error.")
@click.pass_context
def server_group(ctx: click.Context, etcd: str | None, bind: str, port: int,
                 data_dir: Path | None, name: str | None, token_file: Path | None,
                 advertise: str | None, allowed_hosts: tuple[str, ...], prefix: str,
                 leader_ttl: int, min_heartbeat_ttl: float, heartbeat_grace: float,
                 max_heartbeats_per_second: float, failover_heartbeat_ttl: float,
                 log_level: str) -> None:
    """Run a cluster server (with --etcd): the Nomad API and the scheduler over state kept
    in etcd; or, with a subcommand, ask the agent about its servers.

    Any number may run against one etcd; one leads (schedules), the others answer the API
    and take over when it dies. Exit status: 0 stopped by a signal, 1 could not serve,
    2 bad options.
    """
    if ctx.invoked_subcommand is not None:
        return
    if etcd is None:
        raise click.MissingParameter(ctx=ctx, param_hint="'--etcd'", param_type="option")
    sys.exit(run_server(ServerOptions(
        etcd=etcd, bind=bind, port=port, data_dir=data_dir, name=name, token_file=token_file,
        advertise=advertise, prefix=prefix, leader_ttl=leader_ttl,
        min_heartbeat_ttl=min_heartbeat_ttl, heartbeat_grace=heartbeat_grace,
        max_heartbeats_per_second=max_heartbeats_per_second,
        failover_heartbeat_ttl=failover_heartbeat_ttl, log_level=log_level,
        allowed_hosts=allowed_hosts)))


def is_leader(member: dict[str, Any], leaders: dict[str, str]) -> bool:
    """command/server_members.go `isLeader`: the member's `Addr:Tags.port` is its region's
    leader address. A yurt cluster server names itself by its API URL (`Tags.http_addr`,
    runtime/api/noderpc.py `members`) and so does its leader answer: that matches too."""
    tags = member.get("Tags") or {}
    leader = leaders.get(str(tags.get("region", "")))
    if not leader:
        return False
    host, port = str(member.get("Addr", "")), tags.get("port", "")
    own = {f"[{host}]:{port}" if ":" in host else f"{host}:{port}"}
    if tags.get("http_addr"):
        own.add(_without_scheme(str(tags["http_addr"])))
    return _without_scheme(leader) in own


def _without_scheme(address: str) -> str:
    return address.removeprefix("http://").removeprefix("https://").rstrip("/")


def members_rows(members: list[dict[str, Any]], leaders: dict[str, str],
                 verbose: bool) -> list[list[str]]:
    """Nomad's `standardOutput` / `verboseOutput` rows, the header first."""
    rows = [["Name", "Address", "Port", "Status", "Leader", *(["Protocol"] if verbose else []),
             "Raft Version", "Build", "Datacenter", "Region", *(["Tags"] if verbose else [])]]
    for m in members:
        tags = m.get("Tags") or {}
        row = [str(m["Name"]), str(m["Addr"]), str(m["Port"]), str(m["Status"]),
               str(is_leader(m, leaders)).lower()]
        if verbose:
            row.append(str(m.get("ProtocolCur", 0)))
        row += [tags.get("raft_vsn", ""), tags.get("build", ""), tags.get("dc", ""),
                tags.get("region", "")]
        if verbose:
            row.append(",".join(f"{k}={v}" for k, v in sorted(tags.items())))
        rows.append(row)
    return rows


@server_group.command("members")
@click.option("-detailed", "--detailed", is_flag=True, help="The same as -verbose (Nomad's "
              "older name).")
@click.option("-verbose", "--verbose", is_flag=True,
              help="Also show each member's protocol and raw tags.")
@click.option("-json", "--json", "json_output", is_flag=True,
              help="Print the members as JSON, with Tags.Leader set.")
@click.option("-t", "template", default="", metavar="TEMPLATE",
              help="Format the members with a Go template (Nomad's -t).")
@ui_option
def server_members(detailed: bool, verbose: bool, json_output: bool, template: str) -> None:
    """List the servers the agent knows and their status (/v1/agent/members)."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import check_format, echo, emit, format_list
    from yurt.runtime.cli.ui_hint import ui_hint

    check_format(json_output, template)
    with api() as client:
        found = call(client, "GET", "/v1/agent/members")
        members = sorted((found or {}).get("Members") or [], key=lambda m: str(m["Name"]))
        regions = {str((m.get("Tags") or {}).get("region", "")) for m in members
                   if m.get("Status") != "left"}
        leaders: dict[str, str] = {}
        errors: list[str] = []
        for region in sorted(regions):
            response = client.request("GET", "/v1/status/leader", params={"region": region})
            if response.status_code >= 400:
                errors.append(f'Region "{region}": {response.text.strip()}')
            else:
                leaders[region] = str(response.json())
    if json_output or template:
        for m in members:
            m.setdefault("Tags", {})["Leader"] = str(is_leader(m, leaders)).lower()
    emit(members, json_output, template,
         lambda: echo(format_list(members_rows(members, leaders, verbose or detailed))))
    if not (json_output or template):
        ui_hint("server members")  # yurt's UI has no servers page: its clients list
    if errors and not (json_output or template):
        echo("")
        echo("Error determining leaders: " + "; ".join(errors), err=True)
        sys.exit(EXIT_FAILED)


@server_group.command("join")
@click.argument("addresses", nargs=-1, required=True, metavar="ADDRESS...")
def server_join(addresses: tuple[str, ...]) -> None:
    """Join the agent's server to other servers (Nomad's gossip join)."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import echo, fail

    with api() as client:
        out = call(client, "PUT", "/v1/agent/join", params=[("address", a) for a in addresses])
    joined = int(out.get("num_joined", 0))
    if out.get("error"):
        fail(f"Error joining: failed joining: {out['error']}")
    if out.get("warning"):
        echo(f"Joined {joined} servers successfully but got warning: {out['warning']}",
             err=True)
        return
    echo(f"Joined {joined} servers successfully")


@server_group.command("force-leave")
@click.argument("node", metavar="NODE")
@click.option("-prune", "--prune", is_flag=True,
              help="Remove the member from the member list altogether.")
def server_force_leave(node: str, prune: bool) -> None:
    """Force a server into the `left` state."""
    from yurt.runtime.cli.api_client import api
    from yurt.runtime.cli.output import fail

    with api() as client:
        params = {"node": node, **({"prune": "true"} if prune else {})}
        response = client.request("PUT", "/v1/agent/force-leave", params=params)
    if response.status_code >= 400:
        fail(f"Error force-leaving server {node}: {response.text.strip()}")


def register(cli: click.Group) -> None:
    """Add the `server` group (run a server; members, join, force-leave) to `yurt`."""
    cli.add_command(server_group)

"""`yurt server`: from command-line options to a running cluster server.

The same failure rules as `yurt agent` (cli/agent.py): one line on stderr for what the operator
can fix, exit 2 for options that can never work (no etcd URL, a non-loopback bind without a
token), 1 for an environment that fails (the port taken, etcd unreachable), 0 once stopped by
SIGINT or SIGTERM.

The token is read as `yurt agent` reads it (cli/agent.py `agent_token`): from `--token-file`,
else `$YURT_AGENT_TOKEN`, the variable the cluster's nodes send it from. Never from the command
line, where every local user would read it (cli/secret_options.py refuses `--token`).
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from yurt.runtime.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE

log = logging.getLogger("yurt.server")


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
    from yurt.runtime.cli.agent import UsageError, agent_token, leaves
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

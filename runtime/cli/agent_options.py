"""`yurt agent`'s options, from the command line and the config file to an `AgentConfig`:
the precedence (a flag over the file over the default), `-dev`'s temporary data dir, the
agent's own token, and every refusal of a bad value as a `UsageError` (exit 2: the same
command can never work). The run itself and its failures live in runtime/cli/agent.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from yurt.runtime.lib.datadir import default_data_dir

if TYPE_CHECKING:
    from yurt.runtime.agent.agent import AgentConfig
    from yurt.runtime.agent.config import FileConfig


#: The highest TCP port; 0 asks the kernel for a free one.
MAX_PORT = 65535


@dataclass(frozen=True)
class AgentOptions:
    """`yurt agent`'s options as given (None: not given, the config file or default holds)."""

    config_file: Path | None = None
    data_dir: Path | None = None
    bind: str | None = None
    port: int | None = None
    token_file: Path | None = None  # never a token itself: runtime/cli/secret_options.py
    fake_devices: tuple[str, ...] = ()
    driver_allow: tuple[str, ...] = ()
    driver_block: tuple[str, ...] = ()
    log_level: str | None = None
    log_json: bool | None = None
    servers: str | None = None  # `--servers URL[,URL...]`: client mode
    node_name: str | None = None
    datacenter: str | None = None
    meta: tuple[str, ...] = ()  # `--meta KEY=VALUE`, over the config file's
    dev_mode: bool = False  # `--dev`: a stop kills every task (AgentConfig.dev_mode)
    # Nomad's flags of runtime/cli/agent_flags.py (None: not given).
    region: str | None = None  # one region: "global"
    state_dir: Path | None = None
    alloc_dir: Path | None = None
    host_volumes_dir: Path | None = None
    host_volume_plugin_dir: Path | None = None
    node_class: str | None = None
    node_pool: str | None = None
    network_interface: str | None = None
    preferred_address_family: str | None = None  # "ipv4" | "ipv6"
    network_speed: int | None = None  # Mbit/s
    acl_enabled: bool | None = None
    log_include_location: bool | None = None


class UsageError(Exception):
    """The command line or the config file is wrong: one line for the user, exit 2."""


def read_token_file(path: Path) -> str:
    """The token in `path` (surrounding whitespace dropped: files end with a newline).

    Raises:
        ValueError: unreadable or empty, with a message for the user.
    """
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ValueError(f"cannot read the token file {path}: {reason}") from None
    if not token:
        raise ValueError(f"the token file {path} is empty")
    return token


def agent_token(token_file: Path | None) -> str:
    """The agent's token: from `--token-file`, else `$YURT_AGENT_TOKEN`, else "".

    The variable is removed from the agent's environment once read, so no task inherits it.
    """
    from_env = os.environ.pop("YURT_AGENT_TOKEN", "")
    if token_file is not None:
        return read_token_file(token_file)
    return from_env.strip()


def build_config(options: AgentOptions) -> tuple[AgentConfig, str, bool]:
    """The agent's settings from the options over the config file over the defaults, and the
    log level and format (`log_settings` adds the caller's location).

    Raises:
        UsageError: what is wrong with the options or the file, in one line.
    """
    import dataclasses

    import msgspec

    from yurt.runtime.agent.agent import AgentConfig
    from yurt.runtime.agent.config import (
        ConfigError,
        FileConfig,
        check_server_url,
        load_config,
        parse_fake_device,
    )
    from yurt.runtime.agent.log import LEVELS

    try:
        file = load_config(options.config_file) if options.config_file else FileConfig()
        groups = [parse_fake_device(spec) for spec in options.fake_devices]
        host_volumes = file.host_volumes()
    except ConfigError as e:
        raise UsageError(str(e)) from None
    except ValueError as e:  # a volume's path went away since the file was read
        raise UsageError(f"{options.config_file}: {e}") from None
    try:
        token = agent_token(options.token_file) or file.token or ""
    except ValueError as e:
        raise UsageError(str(e)) from None
    bind = options.bind or file.bind or "127.0.0.1"
    if bind not in ("127.0.0.1", "localhost", "::1") and not token:
        raise UsageError("refusing to bind beyond loopback without a token "
                         "(--token-file FILE or $YURT_AGENT_TOKEN)")
    port = options.port if options.port is not None else (file.port or 4646)
    if not 0 <= port <= MAX_PORT:
        where = "--port" if options.port is not None else f"{options.config_file}: port"
        raise UsageError(f"{where} {port} is not a TCP port; give one from 1 to {MAX_PORT} "
                         "(0: any free port)")
    level = options.log_level or file.log_level
    if level.lower() not in LEVELS:
        raise UsageError(f"unknown log level {level!r}; expected one of {', '.join(LEVELS)}")
    try:
        servers = tuple(check_server_url(s, "--servers") for s in options.servers.split(",")
                        ) if options.servers is not None else tuple(
                            check_server_url(s, f"{options.config_file}: servers")
                            for s in file.servers)
    except ValueError as e:
        raise UsageError(str(e)) from None
    meta = dict(file.meta)
    for pair in options.meta:
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise UsageError(f"--meta {pair!r}: expected KEY=VALUE")
        meta[key.strip()] = value
    datacenter = options.datacenter if options.datacenter is not None else file.datacenter
    if not datacenter:
        raise UsageError("--datacenter must not be empty")
    _check_region(options.region)
    node_pool = options.node_pool if options.node_pool is not None else file.node_pool
    try:
        msgspec.structs.replace(file, node_pool=node_pool).check_node_pool()
        acl = file.acl_settings()
    except ValueError as e:
        raise UsageError(f"{'-node-pool: ' if options.node_pool is not None else ''}{e}"
                         ) from None
    if options.acl_enabled is not None:  # over the file's `[acl] enabled`
        acl = dataclasses.replace(acl, enabled=options.acl_enabled)
    node_ip, advertised = _network(options, file, port)
    given = options.data_dir or (Path(file.data_dir) if file.data_dir else None)
    # Last, once nothing can be refused: a temporary dir is never left behind by a refusal.
    temporary = given is None and options.dev_mode
    directory = given or (make_dev_data_dir() if temporary else default_data_dir())
    config = AgentConfig(
        data_dir=directory.absolute(), bind=bind, port=port, token=token,
        node_name=options.node_name or file.node_name, datacenter=datacenter,
        node_class=file.node_class if options.node_class is None else options.node_class,
        node_pool=node_pool, meta=meta,
        fake_devices=tuple(groups) or file.fake_devices(), gc=file.gc_config(),
        driver_allow=options.driver_allow or tuple(file.drivers.allow),
        driver_block=options.driver_block or tuple(file.drivers.block),
        driver_config=file.drivers.config, http_idle_timeout=file.idle_timeout(),
        min_dynamic_port=file.min_dynamic_port, max_dynamic_port=file.max_dynamic_port,
        reserved_ports=file.reserved.reserved_ports, host_volumes=host_volumes,
        artifact=file.artifact.to_config(), servers=servers, dev_mode=options.dev_mode,
        allowed_hosts=file.allowed_hosts(), acl=acl, node_ip=node_ip,
        advertise_http=advertised["http"], advertise_rpc=advertised["rpc"],
        advertise_serf=advertised["serf"], temporary_data_dir=temporary,
        state_dir=_directory(options.state_dir, file.state_dir),
        alloc_dir=_directory(options.alloc_dir, file.alloc_dir),
        host_volumes_dir=_directory(options.host_volumes_dir, file.host_volumes_dir),
        host_volume_plugin_dir=_directory(options.host_volume_plugin_dir,
                                          file.host_volume_plugin_dir),
        network_speed=(file.network_speed if options.network_speed is None
                       else options.network_speed),
        log_include_location=(file.log_include_location if options.log_include_location
                              is None else options.log_include_location))
    log_json = options.log_json if options.log_json is not None else file.log_json
    return config, level, log_json


def _directory(given: Path | None, configured: str | None) -> Path | None:
    """A directory the option gives, else the config file's; absolute; None: neither."""
    found = given or (Path(configured) if configured else None)
    return found.absolute() if found else None


def _check_region(region: str | None) -> None:
    """`-region`: yurt has one region, Nomad's default `global` (command/agent/config.go
    `DefaultConfig`); naming another would split nothing, so it is refused."""
    if region is not None and region != "global":
        raise UsageError(f'-region {region!r}: yurt has one region, "global"; leave -region '
                         "out or give -region=global")


def _network(options: AgentOptions, file: FileConfig, port: int
             ) -> tuple[str, dict[str, str]]:
    """The node's address and the `advertise` addresses (`host:port`, "" when not given).

    The node's address is the `network_interface`'s (`-network-interface` over the file's)
    in the `-preferred-address-family` when given, else its IPv4 address, else its first IPv6
    one (runtime/lib/netif.py); with `--dev` and no interface configured, loopback, as
    Nomad's `-dev` uses "lo" (command/agent/config.go `networkConfig`): a dev agent
    advertises nothing another machine could reach. Neither: "" (the default route's
    interface, client/fingerprint.py), or with a preferred family the default route's
    address in that family.

    Raises:
        UsageError: an unknown interface (the message names those there are), one without
            an address in the family asked for, or an `advertise` address that is none.
    """
    from yurt.runtime.agent.config import ADVERTISE_PORTS, normalize_advertise
    from yurt.runtime.lib.netif import default_route_address, interface_address

    where = f"{options.config_file}: " if options.config_file else ""
    family = options.preferred_address_family or file.preferred_address_family
    interface = file.network_interface
    key = f"{where}network_interface"
    if options.network_interface is not None:
        interface, key = options.network_interface, "-network-interface"
    node_ip = ""
    try:
        if not interface and options.dev_mode:  # loopback, in the family asked for
            node_ip = "::1" if family == "ipv6" else "127.0.0.1"
        elif interface:
            node_ip = interface_address(interface, family)
        elif family:
            node_ip = default_route_address(family)
    except ValueError as e:
        raise UsageError(f"{key if interface else '-preferred-address-family'}: {e}"
                         ) from None
    advertised = {}
    for key in ("http", "rpc", "serf"):
        value = getattr(file.advertise, key)
        try:
            advertised[key] = normalize_advertise(
                value, ADVERTISE_PORTS.get(key, port or 4646), f"{where}advertise.{key}"
            ) if value else ""
        except ValueError as e:
            raise UsageError(str(e)) from None
    return node_ip, advertised


def make_dev_data_dir() -> Path:
    """`--dev`'s data dir when none is given: a new temporary directory, removed when the
    agent stops (Nomad's -dev keeps its client state in `os.MkdirTemp` dirs: client/client.go
    `init`). 0711, as that alloc dir and `make_data_dir`'s: tasks running as other users
    reach their allocation's directory, nobody lists it.

    Raises:
        OSError: the temporary directory cannot be created.
    """
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="yurt-dev-")).absolute()
    os.chmod(path, 0o711)
    return path


def remove_dev_data_dir(path: Path) -> str | None:
    """Remove `--dev`'s temporary data dir; what went wrong, or None."""
    import shutil

    failures: list[str] = []

    def failed(_function: object, name: str, info: tuple[type, BaseException, object]
               ) -> None:
        failures.append(f"{name}: {info[1]}")

    shutil.rmtree(path, onerror=failed)  # `onexc` from Python 3.12 on
    if failures:
        return (f"the temporary data dir {path} was not removed whole ({failures[0]}"
                f"{f' and {len(failures) - 1} more' if len(failures) > 1 else ''})")
    return None


# --------------------------------------------------------------------------- failures

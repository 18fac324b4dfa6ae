"""`yurt agent --config FILE`: the agent's settings in TOML, checked like a job file.

    data_dir = "/var/lib/yurt"
    bind = "127.0.0.1"
    port = 4646
    token = "…"                      # required when bind is not loopback
    datacenter = "dc1"
    node_class = "web"                   # Nomad's client `node_class`: `${node.class}`
    node_pool = "gpu"                    # Nomad's client `node_pool` (default "default")
    http_idle_timeout = "5m"             # how long an idle keep-alive connection stays open
    servers = ["http://10.0.0.1:4646"]   # client mode: run no server, use these (--servers)
    network_interface = "eth1"           # Nomad's client `network_interface`: the node's
                                         # address is this interface's (task ports, services)
    preferred_address_family = "ipv6"    # which of its addresses (default: IPv4 first)
    network_speed = 1000                 # the link speed it reports, Mbit/s (default: kernel's)
    state_dir = "/var/lib/yurt-state"    # the client's state (default: data_dir/client)
    alloc_dir = "/srv/allocs"            # allocation directories (default: data_dir/alloc)
    host_volumes_dir = "/srv/volumes"    # dynamic host volumes (default: data_dir/host_volumes)
    host_volume_plugin_dir = "/opt/dhv"  # their external plugins (data_dir/host_volume_plugins)
    region = "global"                    # the one region yurt has
    log_include_location = true          # log lines name their caller (file:line)

    [advertise]                          # Nomad's `advertise`: "host" or "host:port"
    http = "10.0.0.5:4646"               # the node's HTTPAddr (default: where the API listens)
    rpc = "10.0.0.5"                     # the server's name in /v1/status/leader and peers
    serf = "10.0.0.5"                    # checked and kept: yurt has no gossip

    [meta]                               # Nomad's client `meta`: `${meta.rack}`, NOMAD_META_*
    rack = "r1"

    [drivers]
    allow = ["raw_exec", "mock_driver"]   # only these (empty: all installed)
    block = []                            # never these
    [drivers.config.raw_exec]
    enabled = true
    env_allow = ["PATH", "LANG", "LC_*"]  # what tasks inherit of the agent's environment
    tree_tracking = "auto"                # or "cgroup2", "cgroup1", "subreaper"
    enforce_resource_limits = false       # true: memory/memory_max/cpu through cgroups

    [host_volume.data]                    # Nomad's client `host_volume "data" { … }`
    path = "/srv/data"                    # must exist (a directory or a file), made absolute
    read_only = false                     # true: jobs may only mount it read-only

    [[devices.fake]]                      # devices of the fake device plugin
    id = "nvidia/gpu/T4"
    instances = ["GPU-0", "GPU-1"]

    [artifact]                            # Nomad's client `artifact` block
    http_read_timeout = "30m"
    http_max_size = "100GB"
    decompression_size_limit = "100GB"
    decompression_file_count_limit = 4096

    [gc]
    interval = "1m"
    disk_threshold = 80
    inode_threshold = 70
    max_allocs = 50
    parallel = 2

    [ui]
    allowed_hosts = ["yurt.example.com"]  # names the agent is reached at, besides its own

    [acl]                                 # Nomad's `acl` block: on unless enabled = false
    enabled = true
    bootstrap = "auto"                    # first start writes server/bootstrap.token; "manual":
                                          # nobody until `yurt acl bootstrap`
    token_ttl = "30s"                     # how long resolved tokens and policies are cached

Command-line options override the file. Unknown keys and wrong types are errors that name the
key, all of them at once and in words (`lib/structcheck.py`: "unknown key "prot"; did you mean
"port"?", "must be a list of strings"), so a typo never silently falls back to a default.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from yurt.runtime.client.devices.protocol import DeviceGroup, DeviceInstance
from yurt.runtime.client.gc import GCConfig
from yurt.runtime.client.getter.config import ArtifactSettings
from yurt.runtime.errors import YurtError
from yurt.runtime.lib.durations import parse_duration
from yurt.runtime.lib.structcheck import check
from yurt.runtime.server.acl.settings import BOOTSTRAP_MODES, AclSettings
from yurt.runtime.structs.node import ClientHostVolumeConfig

_META_KEY = re.compile(r"[^.]+(\.[^.]+)*")


class ConfigError(YurtError):
    pass


class _Fake(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    instances: list[str]


class _Devices(msgspec.Struct, forbid_unknown_fields=True):
    fake: list[_Fake] = msgspec.field(default_factory=list)


class _Drivers(msgspec.Struct, forbid_unknown_fields=True):
    allow: list[str] = msgspec.field(default_factory=list)
    block: list[str] = msgspec.field(default_factory=list)
    config: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)


class _GC(msgspec.Struct, forbid_unknown_fields=True):
    interval: str = "1m"
    disk_threshold: float = 80.0
    inode_threshold: float = 70.0
    max_allocs: int = 50
    parallel: int = 2


class _UI(msgspec.Struct, forbid_unknown_fields=True):
    """Nomad's agent `ui` block, as far as yurt has it.

    `allowed_hosts`: the names requests may carry in `Host` besides the agent's own
    (`localhost`, the loopback and bind addresses, the machine's hostname and FQDN when bound
    beyond loopback): a DNS name the agent is reached at, a reverse proxy's name. Any other
    name is refused (runtime/api/origin.py: DNS rebinding), for the UI and every API client.
    Names or IP addresses, without port or scheme; the port a request names is not checked.
    """

    allowed_hosts: list[str] = msgspec.field(default_factory=list)


class _Acl(msgspec.Struct, forbid_unknown_fields=True):
    """Nomad's agent `acl` block (runtime/server/acl/settings.py says what each key does).
    `enabled` unset: on for `yurt agent`."""

    enabled: bool | None = None
    bootstrap: str = "auto"
    token_ttl: str = "30s"
    policy_ttl: str = "30s"
    role_ttl: str = "30s"
    token_min_expiration_ttl: str = "1m"
    token_max_expiration_ttl: str = "24h"


class _Advertise(msgspec.Struct, forbid_unknown_fields=True):
    """Nomad's agent `advertise` block: the addresses others reach this agent at, each
    "host" or "host:port" (the port defaults to the service's: `normalize_advertise`)."""

    http: str = ""
    rpc: str = ""
    serf: str = ""


#: The ports an `advertise` address without one gets (Nomad's defaults; http: the agent's).
ADVERTISE_PORTS = {"rpc": 4647, "serf": 4648}


def normalize_advertise(value: str, default_port: int, where: str) -> str:
    """`value` ("host", "host:port", "[v6]:port" or a bare IPv6 address) as `host:port`, the
    port `default_port` when it names none (command/agent/config.go `normalizeAdvertise`).

    Raises:
        ValueError: `where`, the value, and what was expected.
    """
    import ipaddress

    text = value.strip()
    expected = f'{where}: {value!r} is not an address; give "host" or "host:port"'
    if not text or "/" in text or " " in text:
        raise ValueError(expected)
    unreachable = (f"{where}: {value!r} is no address others can reach; give this machine's "
                   "address or name")
    try:  # a bare IPv6 address: its colons are no port
        bare = ipaddress.IPv6Address(text)
    except ValueError:
        pass
    else:
        if bare.is_unspecified:
            raise ValueError(unreachable)
        return f"[{bare}]:{default_port}"
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(expected)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(expected) from None
        port, shown = rest[1:] if rest else str(default_port), f"[{host}]"
    else:
        host, colon, port = text.partition(":")
        port, shown = port if colon else str(default_port), host
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(expected)
    if host in ("0.0.0.0", "::"):
        raise ValueError(unreachable)
    return f"{shown}:{int(port)}"


class _Reserved(msgspec.Struct, forbid_unknown_fields=True):
    """Nomad's client `reserved` block: what placements may not use (ports only, here)."""

    reserved_ports: str = ""  # Nomad's syntax: "22,80,8000-8100"


class _HostVolume(msgspec.Struct, forbid_unknown_fields=True):
    """Nomad's client `host_volume "name" { path, read_only }` (nomad/structs/volumes.go
    `ClientHostVolumeConfig`)."""

    path: str = ""
    read_only: bool = False


class FileConfig(msgspec.Struct, forbid_unknown_fields=True):
    data_dir: str | None = None
    bind: str | None = None
    port: int | None = None
    token: str | None = None
    datacenter: str = "dc1"
    node_name: str | None = None
    #: Nomad's client `node_class` and `meta`: the node's, for constraints (`${node.class}`,
    #: `${meta.<key>}`), the node API and the computed class.
    node_class: str = ""
    #: Nomad's client `node_pool`: the pool the node registers in (server/nodepools.py).
    node_pool: str = "default"
    meta: dict[str, str] = msgspec.field(default_factory=dict)
    http_idle_timeout: str = "5m"
    drivers: _Drivers = msgspec.field(default_factory=_Drivers)
    devices: _Devices = msgspec.field(default_factory=_Devices)
    gc: _GC = msgspec.field(default_factory=_GC)
    #: Where dynamic ports come from (Nomad's client `min_dynamic_port`/`max_dynamic_port`).
    min_dynamic_port: int = 20000
    max_dynamic_port: int = 32000
    reserved: _Reserved = msgspec.field(default_factory=_Reserved)
    ui: _UI = msgspec.field(default_factory=_UI)
    acl: _Acl = msgspec.field(default_factory=_Acl)
    artifact: ArtifactSettings = msgspec.field(default_factory=ArtifactSettings)
    #: Nomad's agent `log_level`, `log_json` and `log_include_location` (runtime/agent/log.py);
    #: options override them.
    log_level: str = "info"
    log_json: bool = False
    log_include_location: bool = False
    #: Nomad's agent `region`: yurt has one, "global" (`check_region`).
    region: str = "global"
    #: Nomad's client `state_dir` and `alloc_dir`: the client's state database and the
    #: allocations' directories (default: the data dir's `client/` and `alloc/`).
    state_dir: str | None = None
    alloc_dir: str | None = None
    #: Nomad's client `host_volumes_dir`: where dynamic host volumes are made (default: the
    #: data dir's `host_volumes/`).
    host_volumes_dir: str | None = None
    #: Nomad's client `host_volume_plugin_dir`: external host volume plugins (default: the
    #: data dir's `host_volume_plugins/`).
    host_volume_plugin_dir: str | None = None
    #: Nomad's client `preferred_address_family` ("ipv4" or "ipv6", "": IPv4 first) and
    #: `network_speed` (Mbit/s, 0: the kernel's): the node's address and link speed.
    preferred_address_family: str = ""
    network_speed: int = 0
    #: Client mode: the servers' URLs (`--servers`); empty runs the embedded server.
    servers: list[str] = msgspec.field(default_factory=list)
    #: Nomad's client `network_interface`: the interface whose address the node advertises
    #: (runtime/lib/netif.py); empty: the default route's (loopback with `--dev`).
    network_interface: str = ""
    advertise: _Advertise = msgspec.field(default_factory=_Advertise)
    #: Nomad's client `host_volume` blocks, keyed by name (`host_volumes`).
    host_volume: dict[str, _HostVolume] = msgspec.field(default_factory=dict)

    def fake_devices(self) -> tuple[DeviceGroup, ...]:
        return tuple(parse_fake_device(f"{f.id}={','.join(f.instances)}")
                     for f in self.devices.fake)

    def idle_timeout(self) -> float:
        """`http_idle_timeout` in seconds; a duration of at least a second."""
        try:
            seconds = parse_duration(self.http_idle_timeout) / 1e9
        except ValueError as e:
            raise ValueError(f"http_idle_timeout: {e}") from None
        if seconds < 1:
            raise ValueError(f"http_idle_timeout is at least 1s, got {self.http_idle_timeout!r}")
        return seconds

    def check_ports(self) -> None:
        """Nomad's agent checks of the dynamic range, and the reserved ports' syntax."""
        from yurt.runtime.server.scheduler.ports import MAX_VALID_PORT, parse_port_ranges

        low, high = self.min_dynamic_port, self.max_dynamic_port
        if not 0 < low <= MAX_VALID_PORT:
            raise ValueError(f"Invalid dynamic port range: min_dynamic_port={low}")
        if not 0 < high <= MAX_VALID_PORT:
            raise ValueError(f"Invalid dynamic port range: max_dynamic_port={high}")
        if low > high:
            raise ValueError(f"Invalid dynamic port range: min_dynamic_port={low} and "
                             f"max_dynamic_port={high}")
        try:
            parse_port_ranges(self.reserved.reserved_ports)
        except ValueError as e:
            raise ValueError(f"reserved.reserved_ports: {e}") from None

    def check_node_pool(self) -> None:
        """Nomad's agent check of `client.node_pool` (command/agent/command.go
        `IsValidConfig`): a valid name, and never `all`."""
        from yurt.runtime.server.nodepools import NODE_POOL_ALL, name_problem

        why = name_problem(self.node_pool)
        if why is not None:
            raise ValueError(f"Invalid node pool: {why}")
        if self.node_pool == NODE_POOL_ALL:
            raise ValueError("Invalid node pool: node is not allowed to register in node "
                             f'pool "{NODE_POOL_ALL}"')

    def check_region(self) -> None:
        """yurt has one region (Nomad's default, `global`): naming another is refused."""
        if self.region != "global":
            raise ValueError(f'region {self.region!r}: yurt has one region, "global"')

    def check_network(self) -> None:
        """`preferred_address_family` is ipv4, ipv6 or empty; `network_speed` not negative."""
        if self.preferred_address_family not in ("", "ipv4", "ipv6"):
            raise ValueError("preferred_address_family must be \"ipv4\" or \"ipv6\", got "
                             f"{self.preferred_address_family!r}")
        if self.network_speed < 0:
            raise ValueError(f"network_speed must be 0 or more (Mbit/s), got "
                             f"{self.network_speed}")

    def check_meta(self) -> None:
        """Nomad's agent check of its client meta keys (`helper.IsValidInterpVariable`):
        dot-separated non-empty parts, as `${meta.<key>}` needs them."""
        for key in self.meta:
            if not _META_KEY.fullmatch(key):
                raise ValueError(f"Invalid Client.Meta key: {key}")

    def allowed_hosts(self) -> tuple[str, ...]:
        """`ui.allowed_hosts`, each in the form Host headers are compared in.

        Raises:
            ValueError: the first entry that is no host name or address, and why.
        """
        from yurt.runtime.api.origin import parse_allowed_host

        try:
            names = tuple(parse_allowed_host(name) for name in self.ui.allowed_hosts)
        except ValueError as e:
            raise ValueError(f"ui.allowed_hosts: {e}") from None
        if self.advertise.http:  # the name others reach the agent at is its own
            host = normalize_advertise(self.advertise.http, 4646, "advertise.http")
            try:
                names += (parse_allowed_host(host.rpartition(":")[0].strip("[]")),)
            except ValueError as e:
                raise ValueError(f"advertise.http: {e}") from None
        return names

    def acl_settings(self) -> AclSettings:
        """The `acl` block (ACLs on unless it says `enabled = false`).

        Raises:
            ValueError: the first key that is wrong, and why.
        """
        acl = self.acl
        if acl.bootstrap not in BOOTSTRAP_MODES:
            raise ValueError(f"acl.bootstrap must be one of {', '.join(BOOTSTRAP_MODES)}, "
                             f"got {acl.bootstrap!r}")
        seconds: dict[str, float] = {}
        for key in ("token_ttl", "policy_ttl", "role_ttl", "token_min_expiration_ttl",
                    "token_max_expiration_ttl"):
            text = getattr(acl, key)
            try:
                value = parse_duration(text) / 1e9
            except ValueError as e:
                raise ValueError(f"acl.{key}: {e}") from None
            if value <= 0:
                raise ValueError(f"acl.{key} must be a positive duration, got {text!r}")
            seconds[key] = value
        if seconds["token_min_expiration_ttl"] > seconds["token_max_expiration_ttl"]:
            raise ValueError("acl.token_min_expiration_ttl is longer than "
                             "acl.token_max_expiration_ttl")
        return AclSettings(enabled=acl.enabled is not False, bootstrap=acl.bootstrap,
                           **seconds)

    def host_volumes(self, cwd: Path | None = None) -> dict[str, ClientHostVolumeConfig]:
        """The node's host volumes, paths made absolute against `cwd` (default: the current
        directory). Raises ValueError naming the volume when its path is missing (Nomad's
        command/agent/command.go `isValidConfig`: "Missing path in host_volume config") or
        does not exist (client/client.go `setupNode` stats each path; a file, such as a
        socket, is a valid host volume there as here)."""
        base = Path.cwd() if cwd is None else cwd
        volumes: dict[str, ClientHostVolumeConfig] = {}
        for name, vol in sorted(self.host_volume.items()):
            where = f"host_volume.{name}.path"
            if not name:
                raise ValueError("host_volume: a host volume needs a name")
            if not vol.path:
                raise ValueError(f"{where}: Missing path in host_volume config")
            path = base / vol.path
            try:
                path.stat()
            except OSError as e:
                raise ValueError(f"{where}: failed to validate volume {name}: {vol.path!r}: "
                                 f"{e.strerror}; expected an existing directory or file"
                                 ) from None
            volumes[name] = ClientHostVolumeConfig(name=name, path=str(path),
                                                   read_only=vol.read_only)
        return volumes

    def check_advertise(self) -> None:
        """Each `advertise` address's syntax (the http port is the agent's: 4646 here)."""
        for key in ("http", "rpc", "serf"):
            value = getattr(self.advertise, key)
            if value:
                normalize_advertise(value, ADVERTISE_PORTS.get(key, 4646), f"advertise.{key}")

    def gc_config(self) -> GCConfig:
        return GCConfig(interval=parse_duration(self.gc.interval) / 1e9,
                        disk_threshold=self.gc.disk_threshold,
                        inode_threshold=self.gc.inode_threshold,
                        max_allocs=self.gc.max_allocs, parallel=self.gc.parallel)


def check_server_url(url: str, where: str) -> str:
    """`url` as the node RPC is reached: `http(s)://host:port` (a bare `host:port` gets
    `http://`), without a path.

    Raises:
        ValueError: what is wrong, prefixed with `where`.
    """
    from urllib.parse import urlsplit

    text = url.strip()
    full = text if "://" in text else f"http://{text}"
    try:
        parts = urlsplit(full)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"{where}: {url!r} is not a server URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        raise ValueError(f"{where}: {url!r} is not a server URL; give http://host:port")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ValueError(f"{where}: {url!r} has a path; give only http://host:port")
    return full.rstrip("/")


def parse_fake_device(spec: str) -> DeviceGroup:
    """`vendor/type/name=ID,ID` → a device group of the fake plugin."""
    ident, _, ids = spec.partition("=")
    parts = ident.split("/")
    if len(parts) != 3 or not all(parts) or not ids:
        raise ConfigError(f"a fake device is vendor/type/name=ID,ID, got {spec!r}")
    return DeviceGroup(vendor=parts[0], type=parts[1], name=parts[2],
                       instances=[DeviceInstance(id=i) for i in ids.split(",")])


def load_config(path: Path) -> FileConfig:
    """Read and check the agent's config file.

    Raises:
        ConfigError: every problem found, one `FILE: key.path: message` line each, in words
            (an unknown key names the closest known one; a wrong type says what it must be).
    """
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: cannot read: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: {e}") from None
    problems = check(raw, FileConfig)
    drivers = raw.get("drivers")
    plugins = drivers.get("config") if isinstance(drivers, dict) else None
    raw_exec = plugins.get("raw_exec") if isinstance(plugins, dict) else None
    if isinstance(raw_exec, dict):
        # Only here: the driver's module is not on the path to a listening API.
        from yurt.runtime.client.drivers.rawexec import RawExecPluginConfig

        problems += check(raw_exec, RawExecPluginConfig, path=("drivers", "config", "raw_exec"))
    if problems:
        raise ConfigError("\n".join(p.render(str(path)) for p in problems))
    try:
        config = msgspec.convert(raw, FileConfig)
        config.fake_devices()
        config.gc_config()
        config.idle_timeout()
        config.check_ports()
        config.check_meta()
        config.check_region()
        config.check_network()
        config.check_node_pool()
        config.allowed_hosts()
        config.acl_settings()
        config.check_advertise()
        config.host_volumes()
        for server in config.servers:
            check_server_url(server, "servers")
        try:
            config.artifact.to_config()
        except ValueError as e:
            raise ValueError(f"artifact: {e}") from None
        if isinstance(raw_exec, dict):
            from yurt.runtime.client.drivers.rawexec import RawExecPluginConfig

            try:
                msgspec.convert(raw_exec, RawExecPluginConfig)
            except (msgspec.ValidationError, ValueError) as e:
                raise ValueError(f"drivers.config.raw_exec: {e}") from None
    except (msgspec.ValidationError, ValueError) as e:
        raise ConfigError(f"{path}: {e}") from None
    return config

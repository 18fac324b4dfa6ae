"""The container-create body of one task start: pure, no I/O, no clock (but the `resolve`
function the caller passes for bind sources).

`create_body` turns what a task start knows (protocol.py `TaskConfig`: env, directories,
mounts, devices, resources), the task's `config {}` (configs.py `DockerTaskConfig`) and the
plugin's options (plugin.py) into the JSON of the Engine API's `POST /containers/create`, as
Nomad's drivers/docker/driver.go `createContainerConfig` and `containerBinds` build theirs:

- labels: the task's `labels`, Nomad's `com.hashicorp.nomad.alloc_id` always and the others
  (`job_name`, `task_name`, …) where the plugin's `extra_labels` globs name them, plus yurt's
  `LABEL_ALLOC_ROOT` (the agent's alloc root: which agent owns the container, so `reconcile`
  touches only its own) and `LABEL_TASK_ID` (the start's invocation ID);
- the alloc dir as Nomad binds it: `<alloc>/alloc` at `/alloc`, `<task>/local` at `/local`,
  `<task>/secrets` at `/secrets`, `<alloc>/alloc/logs` read-only, with `NOMAD_*_DIR` naming
  them; then the config's `volumes` (host paths outside the alloc dir, symlinks resolved,
  only with the plugin's `volumes.enabled`; relative paths are the task dir's), `mount`
  blocks, the host volume mounts of the volume hook (`TaskConfig.mounts`) and the device
  hook's and config's devices;
- limits (driver.go `memoryLimits`): `Memory` the hard limit (`memory_max`, or
  `memory_hard_limit`, else `memory`), `MemoryReservation` the soft one when there is a hard
  one above it, `CpuShares` the task's `cpu` (2 … 262144);
- ports: with `host` networking the task listens on its allocated port, nothing to publish;
  otherwise each `ports` label is published from the group's allocation (`NOMAD_HOST_PORT_x`
  on the host, `NOMAD_PORT_x` in the container), tcp and udp, as driver.go's `publishedPorts`;
- capabilities (capabilities.py `delta`, drivers/shared/capabilities `Delta`): `cap_add`
  must be within `allow_caps`, whatever Docker's defaults hold beyond `allow_caps` is
  dropped, a name the kernel does not know is refused; `privileged` only when the
  plugin allows it.

Invariant: every refusal is a `DriverError` whose text is Nomad's where Nomad has one.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from yurt.runtime.client.drivers import capabilities as caps
from yurt.runtime.client.drivers.configs import DockerMount, DockerMountOptions, DockerTaskConfig
from yurt.runtime.client.drivers.docker.plugin import DockerPluginConfig
from yurt.runtime.client.drivers.limits import MEMORY_NO_LIMIT, limits_for
from yurt.runtime.client.drivers.protocol import TaskConfig
from yurt.runtime.errors import DriverError
from yurt.runtime.structs import TaskMount

LABEL_ALLOC_ID: Final = "com.hashicorp.nomad.alloc_id"
#: driver.go's labels that `extra_labels` may add, and the env variable each is read from.
EXTRA_LABELS: Final = {
    "job_name": "NOMAD_JOB_NAME", "job_id": "NOMAD_JOB_ID",
    "parent_job_id": "NOMAD_JOB_PARENT_ID", "task_group_name": "NOMAD_GROUP_NAME",
    "task_name": "NOMAD_TASK_NAME", "namespace": "NOMAD_NAMESPACE",
    "node_name": "node.unique.name", "node_id": "node.unique.id",
}
LABEL_ALLOC_ROOT: Final = "io.yurt.alloc_root"
LABEL_TASK_ID: Final = "io.yurt.task_id"
DEFAULT_CFS_PERIOD: Final = 100_000

T = TypeVar("T")


def container_name(config: TaskConfig) -> str:
    """driver.go `containerName`: `<task>-<alloc id>`."""
    return f"{config.name}-{config.alloc_id}"


def folded(value: Sequence[Mapping[str, T]] | Mapping[str, T]) -> dict[str, T]:
    """A block given as the jobspec gives blocks (a list of maps) or as one map, as one map
    (later keys win, as Nomad's hclutils.MapStrStr)."""
    if isinstance(value, Mapping):
        return dict(value)
    merged: dict[str, T] = {}
    for part in value:
        merged.update(part)
    return merged


def first(value: Sequence[T] | T | None) -> T | None:
    """A single block given as a list of one (HCL) or as itself (JSON)."""
    if isinstance(value, list):
        return value[0] if value else None
    return value  # type: ignore[return-value]


def memory_limits(hard_limit_mb: int, memory_mb: int, memory_max_mb: int) -> tuple[int, int]:
    """(Memory, MemoryReservation) in bytes: driver.go `memoryLimits`, which is limits.py
    `limits_for`'s rule with docker's own `memory_hard_limit` as the hard limit where it is
    above `memory_max`; Docker spells "no hard limit" (`memory_max = -1`) as 0."""
    high = (MEMORY_NO_LIMIT if memory_max_mb == MEMORY_NO_LIMIT
            else max(hard_limit_mb, memory_max_mb))
    limits = limits_for(memory_mb, high, 0)
    return max(limits.memory_bytes, 0), limits.memory_soft_bytes


#: How a bind's host path is resolved before the alloc-dir check: the driver passes
#: `os.path.realpath` (symlinks followed, as helper/escapingfs `ChildEscapesParentDir`'s
#: `filepath.EvalSymlinks`); the identity (the default) checks the text only.
Resolver = Callable[[str], str]


def _same(path: str) -> str:
    return path


def _inside(parent: str, path: str) -> bool:
    return Path(os.path.normpath(path)).is_relative_to(os.path.normpath(parent))


def _host_source(source: str, task: TaskConfig, plugin: DockerPluginConfig,
                 spelled: str, resolve: Resolver) -> str:
    """A bind's host path: relative ones are the task dir's (driver.go `expandPath`); one
    that leaves the alloc dir once its symlinks are resolved needs `volumes.enabled`
    (driver.go `containerBinds`, helper/escapingfs `ChildEscapesParentDir`). The resolved
    path is what is bound, so the checked path is the mounted one."""
    assert task.task_dir is not None
    assert task.alloc_dir is not None
    path = resolve(os.path.normpath(task.task_dir / source))
    if not plugin.volumes.enabled and not _inside(resolve(str(task.alloc_dir)), path):
        raise DriverError(f"volumes are not enabled; cannot mount host path: {spelled!r}")
    return path


def _volume_binds(task: TaskConfig, cfg: DockerTaskConfig,
                  plugin: DockerPluginConfig, resolve: Resolver) -> list[str]:
    assert task.task_dir is not None
    assert task.alloc_dir is not None
    if cfg.volume_driver and not plugin.volumes.enabled:
        raise DriverError(f"volumes are not enabled; cannot use volume driver "
                          f"{cfg.volume_driver!r}")
    shared = task.alloc_dir / "alloc"
    binds = [f"{shared}:/alloc", f"{task.task_dir / 'local'}:/local",
             f"{task.task_dir / 'secrets'}:/secrets", f"{shared / 'logs'}:/alloc/logs:ro"]
    for spec in cfg.volumes:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
            raise DriverError(f"invalid docker volume {spec!r}: expected SRC:DST[:MODE]")
        src, dst = parts[0], parts[1]
        src = _host_source(src, task, plugin, spec, resolve) if not cfg.volume_driver else src
        binds.append(":".join([src, dst, *parts[2:]]))
    return binds


def _mount(block: DockerMount, task: TaskConfig, plugin: DockerPluginConfig,
           resolve: Resolver) -> dict[str, Any]:
    """driver.go's `mount` handling and config.go `toDockerHostMount`."""
    mount: dict[str, Any] = {"Type": block.type, "Target": block.target,
                             "Source": block.source, "ReadOnly": block.readonly}
    empty = DockerMountOptions()
    if block.type == "bind":
        if not block.source:
            raise DriverError(f"mount {block.target!r}: a bind mount needs a source")
        mount["Source"] = _host_source(block.source, task, plugin, block.source, resolve)
        options = first(block.bind_options) or empty
        if options.propagation:
            mount["BindOptions"] = {"Propagation": options.propagation}
    elif block.type == "tmpfs":
        if block.source:
            raise DriverError('invalid source, must be "" for tmpfs')
        options = first(block.tmpfs_options) or empty
        mount["TmpfsOptions"] = {"SizeBytes": options.size, "Mode": options.mode}
    else:
        if not plugin.volumes.enabled:
            raise DriverError(f"volumes are not enabled; cannot mount volume: "
                              f"{block.source!r}")
        options = first(block.volume_options) or empty
        driver = folded(options.driver_config)
        mount["VolumeOptions"] = {"NoCopy": options.no_copy, "Labels": folded(options.labels),
                                  "DriverConfig": {"Name": str(driver.get("name", "")),
                                                   "Options": folded(driver.get("options",
                                                                                {}))}}
    return mount


def _ulimits(cfg: DockerTaskConfig) -> list[dict[str, Any]]:
    """driver.go `parseUlimits`: `name = "soft[:hard]"`."""
    ulimits = []
    for name, value in sorted(folded(cfg.ulimit).items()):
        parts = str(value).split(":")
        try:
            soft = int(parts[0])
            hard = int(parts[1]) if len(parts) == 2 else soft
        except (ValueError, IndexError):
            raise DriverError(f"failed to parse ulimit configuration: {name} = {value!r}: "
                              "expected SOFT or SOFT:HARD") from None
        if len(parts) > 2:
            raise DriverError(f"failed to parse ulimit configuration: {name} = {value!r}")
        ulimits.append({"Name": name, "Soft": soft, "Hard": hard})
    return ulimits


def _ports(task: TaskConfig, cfg: DockerTaskConfig
           ) -> tuple[dict[str, list[dict[str, str]]], dict[str, dict[str, str]]]:
    """(PortBindings, ExposedPorts) of the `ports` labels, from the group's allocated
    ports as the task env names them (client/taskenv.py `port_env`)."""
    bindings: dict[str, list[dict[str, str]]] = {}
    exposed: dict[str, dict[str, str]] = {}
    for label in cfg.ports:
        host = task.env.get(f"NOMAD_HOST_PORT_{label}")
        if host is None:
            raise DriverError(f"Port {label!r} not found, check network block")
        inside = task.env.get(f"NOMAD_PORT_{label}", host)
        host_ip = task.env.get(f"NOMAD_HOST_IP_{label}", "")
        for proto in ("tcp", "udp"):
            bindings[f"{inside}/{proto}"] = [{"HostIp": host_ip, "HostPort": host}]
            exposed[f"{inside}/{proto}"] = {}
    return bindings, exposed


def _labels(task: TaskConfig, cfg: DockerTaskConfig, plugin: DockerPluginConfig,
            alloc_root: Path) -> dict[str, str]:
    labels = folded(cfg.labels)
    labels[LABEL_ALLOC_ID] = task.alloc_id
    values = {"job_name": task.env.get("NOMAD_JOB_NAME", task.job_id), "job_id": task.job_id,
              "task_group_name": task.task_group, "task_name": task.name}
    for key, variable in EXTRA_LABELS.items():
        value = values.get(key) or task.env.get(variable, "")
        if value and any(fnmatch.fnmatchcase(key, glob) for glob in plugin.extra_labels):
            labels[f"com.hashicorp.nomad.{key}"] = value
    labels[LABEL_ALLOC_ROOT] = str(alloc_root)
    labels[LABEL_TASK_ID] = task.id
    return labels


def _devices(task: TaskConfig, cfg: DockerTaskConfig) -> list[dict[str, str]]:
    devices = [{"PathOnHost": d.host_path, "PathInContainer": d.task_path,
                "CgroupPermissions": d.permissions or "rwm"} for d in task.devices]
    for device in cfg.devices:
        if not device.host_path:
            raise DriverError("device host_path must not be empty")
        devices.append({"PathOnHost": device.host_path,
                        "PathInContainer": device.container_path or device.host_path,
                        "CgroupPermissions": device.cgroup_permissions or "rwm"})
    return devices


def task_env(task: TaskConfig) -> dict[str, str]:
    """The task's env as the container sees it: its directories at their mount points
    (Nomad's taskenv for image isolation)."""
    return dict(task.env, NOMAD_ALLOC_DIR="/alloc", NOMAD_TASK_DIR="/local",
                NOMAD_SECRETS_DIR="/secrets")


#: drivers/docker/driver.go `createContainerConfig`: a volume mount's propagation mode as
#: Docker's bind propagation.
PROPAGATION: Final = {"": "rprivate", "private": "rprivate", "host-to-task": "rslave",
                      "bidirectional": "rshared"}


def _hook_mount(mount: TaskMount) -> dict[str, Any]:
    """A host volume mount of the volume hook as a Docker bind mount."""
    try:
        propagation = PROPAGATION[mount.propagation_mode]
    except KeyError:
        raise DriverError(f"volume mount at {mount.task_path}: unknown propagation_mode "
                          f'"{mount.propagation_mode}": expected "private", "host-to-task" '
                          'or "bidirectional"') from None
    return {"Type": "bind", "Source": mount.host_path, "Target": mount.task_path,
            "ReadOnly": mount.readonly, "BindOptions": {"Propagation": propagation}}


def create_body(task: TaskConfig, cfg: DockerTaskConfig, plugin: DockerPluginConfig, *,
                image: str, default_network: str = "none",
                total_compute_mhz: int = 0, resolve: Resolver = _same,
                system_caps: frozenset[str] = frozenset(caps.KNOWN)) -> dict[str, Any]:
    """The `POST /containers/create` body for this start of `task`.

    Args:
        image: the image to run (its ID, or `cfg.image` once present).
        default_network: the `network_mode` when the config has none: "bridge" where the
            daemon has that network, else "none".
        total_compute_mhz: the node's CPU MHz (for `cpu_hard_limit`; 0: not set).
        resolve: how bind sources are resolved before the alloc-dir check (`Resolver`);
            the driver passes `os.path.realpath`, so this is the only filesystem access.
        system_caps: the capabilities this kernel supports (capabilities.py `supported`).

    Raises:
        DriverError: something the plugin's options forbid or the config cannot mean.
    """
    if task.task_dir is None or task.alloc_dir is None:
        raise DriverError("docker needs a task directory and an alloc directory")
    if cfg.privileged and not plugin.allow_privileged:
        raise DriverError("Docker privileged mode is disabled on this Nomad agent")
    if cfg.runtime and cfg.runtime not in plugin.allow_runtimes:
        raise DriverError(f"requested runtime {cfg.runtime!r} is not allowed")
    if cfg.memory_hard_limit and task.memory_mb > cfg.memory_hard_limit:
        raise DriverError(f"task memory requirements exceed driver hard limit of "
                          f"{cfg.memory_hard_limit} MB")
    if plugin.pids_limit and cfg.pids_limit > plugin.pids_limit:
        raise DriverError(f"pids_limit cannot be greater than nomad plugin config "
                          f"pids_limit: {plugin.pids_limit}")
    for option, kind in (("ipc_mode", "ipc"), ("pid_mode", "pid"), ("uts_mode", "uts"),
                         ("userns_mode", "userns")):
        # driver.go `validateNamespace`: only modes the plugin's `allowed_modes` list
        # (globs), unless it allows privileged containers.
        wanted = getattr(cfg, option)
        allowed = plugin.allowed_modes.get(kind, [])
        if (wanted and not plugin.allow_privileged
                and not any(fnmatch.fnmatchcase(wanted, glob) for glob in allowed)):
            raise DriverError(f'cannot apply "{option}" configuration')
    if cfg.cpu_hard_limit and total_compute_mhz <= 0:
        raise DriverError("cpu_hard_limit needs the node's total compute, which is unknown")
    memory, reservation = memory_limits(cfg.memory_hard_limit, task.memory_mb,
                                        task.memory_max_mb)
    for option in ("cap_add", "cap_drop"):
        bad = caps.unsupported(getattr(cfg, option), system_caps)
        if bad:  # as drivers/exec/driver.go `TaskConfig.validate` (execdriver.py)
            raise DriverError(f"{option} configured with capabilities not supported by "
                              f"system: {caps.text(bad)}")
    cap_add, cap_drop = caps.delta(plugin.allow_caps, cfg.cap_add, cfg.cap_drop, system_caps,
                                   caps.DOCKER_DEFAULTS)
    network = cfg.network_mode or default_network
    host: dict[str, Any] = {
        "Binds": _volume_binds(task, cfg, plugin, resolve),
        "Mounts": [_mount(m, task, plugin, resolve) for m in (*cfg.mount, *cfg.mounts)]
        + [_hook_mount(m) for m in task.mounts],
        "Memory": memory, "MemoryReservation": reservation,
        # driver.go `cpuResources`, for a host under 262144 MHz: the MHz, within cgroup v1's
        # bounds (limits.py `limits_for`).
        "CpuShares": limits_for(task.memory_mb, 0, task.cpu_shares).cpu_shares,
        "NetworkMode": network,
        "Privileged": cfg.privileged, "CapAdd": cap_add, "CapDrop": cap_drop,
        "Devices": _devices(task, cfg),
        "Dns": cfg.dns_servers, "DnsSearch": cfg.dns_search_domains,
        "DnsOptions": cfg.dns_options, "ExtraHosts": cfg.extra_hosts,
        "SecurityOpt": cfg.security_opt, "Sysctls": folded(cfg.sysctl),
        "Ulimits": _ulimits(cfg), "ReadonlyRootfs": cfg.readonly_rootfs,
        "Init": cfg.init, "GroupAdd": cfg.group_add, "StorageOpt": folded(cfg.storage_opt),
        "IpcMode": cfg.ipc_mode, "PidMode": cfg.pid_mode, "UTSMode": cfg.uts_mode,
        "UsernsMode": cfg.userns_mode, "CgroupnsMode": cfg.cgroupns,
        # The task's reserved `cores` (driver.go `createContainerConfig`: `CpusetCpus` from
        # `LinuxResources`), unless the config names its own.
        "CpusetCpus": cfg.cpuset_cpus or ",".join(str(c) for c in sorted(task.reserved_cores)),
        "OomScoreAdj": cfg.oom_score_adj or plugin.oom_score_adj,
        "VolumeDriver": cfg.volume_driver,
        # Nomad restarts tasks itself; the daemon must not (driver.go sets no policy).
        "RestartPolicy": {"Name": "no"},
    }
    if cfg.shm_size:
        host["ShmSize"] = cfg.shm_size
    if cfg.pids_limit or plugin.pids_limit:
        host["PidsLimit"] = cfg.pids_limit or plugin.pids_limit
    if cfg.runtime:
        host["Runtime"] = cfg.runtime
    if cfg.cpu_hard_limit:
        period = cfg.cpu_cfs_period or DEFAULT_CFS_PERIOD
        host["CpuPeriod"] = period
        host["CpuQuota"] = max(int(task.cpu_shares / total_compute_mhz
                                   * (os.cpu_count() or 1) * period), 1000)
    logging = first(cfg.logging)
    log_type = (logging.type or logging.driver) if logging is not None else ""
    host["LogConfig"] = {"Type": log_type or plugin.logging.type,
                         "Config": folded(logging.config) if logging is not None and log_type
                         else dict(plugin.logging.config)}
    body: dict[str, Any] = {
        "Image": image,
        "Env": [f"{k}={v}" for k, v in sorted(task_env(task).items())],
        "Labels": _labels(task, cfg, plugin, task.alloc_dir.parent),
        "Hostname": cfg.hostname, "WorkingDir": cfg.work_dir, "User": task.user,
        "Tty": cfg.tty, "OpenStdin": cfg.interactive, "AttachStdin": cfg.interactive,
        "StdinOnce": False,
        "HostConfig": host,
    }
    if cfg.entrypoint:
        body["Entrypoint"] = cfg.entrypoint
    if cfg.command:
        if cfg.command.strip() != cfg.command:  # driver.go `validateCommand`
            raise DriverError(f"command contains extra white space: {cfg.command!r}")
        body["Cmd"] = [cfg.command, *cfg.args]
    elif cfg.args:
        body["Cmd"] = cfg.args
    if cfg.mac_address:
        body["MacAddress"] = cfg.mac_address
    if folded(cfg.healthchecks).get("disable"):
        body["Healthcheck"] = {"Test": ["NONE"]}  # driver.go: the image's check is off
    if network not in ("host", "none") and not network.startswith("container:"):
        body["HostConfig"]["PortBindings"], body["ExposedPorts"] = _ports(task, cfg)
    elif cfg.ports and network == "none":
        why = ("" if cfg.network_mode else
               " (the default here: this docker daemon has no bridge network)")
        raise DriverError(f"ports {cfg.ports} cannot be published with network_mode "
                          f'"none"{why}; use network_mode "host" or a daemon with a bridge')
    if cfg.ipv4_address or cfg.ipv6_address or cfg.network_aliases:
        body["NetworkingConfig"] = {"EndpointsConfig": {network: {
            "IPAMConfig": {"IPv4Address": cfg.ipv4_address,
                           "IPv6Address": cfg.ipv6_address},
            "Aliases": cfg.network_aliases}}}
    return body

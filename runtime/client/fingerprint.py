"""What this machine offers, as a `Node`: CPU, memory, disk and basic attributes.

Read from the kernel (`/proc/cpuinfo`, `/proc/meminfo`, `statvfs`, `/etc/os-release`) once at
agent start. CPU is counted in MHz like Nomad's `CpuShares` (cores × clock speed; 1,000 MHz per
core when the clock is not reported, as in many VMs). The node ID is created once and kept in
the data dir, so an agent restart is the same node.

Attribute names and values are Nomad's fingerprinters' (client/fingerprint): `cpu.arch` in Go's
spelling (`amd64`, `arm64`), `kernel.arch` as the kernel says it, `os.name`/`os.version` from
os-release (`ubuntu`, `22.04`), sizes in bytes as strings, `nomad.version` the agent's version,
so constraints and `${attr.*}` written for Nomad read the same here.

File descriptors bound how many tasks one agent can supervise: each running raw_exec task
holds about five in the agent (two FIFOs, each with a read end and a keeper write end, and a
pidfd; measured 5.2 with 10 tasks). runtime/lib/nofile.py `raise_nofile_limit` lifts the soft
`RLIMIT_NOFILE` to the hard one at start (the soft default, often 1024, would stop near 180
tasks), and the node reports the result as `yurt.nofile` and `yurt.max_tasks` so `yurt node
status` can say it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import resource
import socket
import time
import uuid
from pathlib import Path

from yurt.runtime import __version__
from yurt.runtime.lib.netif import interface_of, link_speed
from yurt.runtime.structs import (
    NetworkResource,
    Node,
    NodeCpuResources,
    NodeDiskResources,
    NodeMemoryResources,
    NodeResources,
)

DEFAULT_MHZ = 1000
#: The link speed a node reports when neither the kernel nor `-network-speed` gives one
#: (client/fingerprint/network.go `defaultNetworkSpeed`).
DEFAULT_NETWORK_SPEED = 1000

#: Descriptors one running task costs the agent (five measured, plus one for a start in flight).
FDS_PER_TASK = 6
#: Descriptors the agent keeps for itself: databases, API connections, event streams, threads.
FDS_RESERVED = 128


def max_tasks(nofile: int) -> int:
    """How many running tasks `nofile` descriptors allow."""
    if nofile == resource.RLIM_INFINITY:
        nofile = 1 << 20
    return max(0, (nofile - FDS_RESERVED) // FDS_PER_TASK)


def _cpu_mhz() -> int:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return DEFAULT_MHZ
    speeds = [float(line.split(":")[1]) for line in text.splitlines()
              if line.startswith("cpu MHz") and ":" in line]
    return int(max(speeds)) if speeds else DEFAULT_MHZ


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


#: `platform.machine()` → Go's GOARCH, which Nomad reports as `cpu.arch`.
_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64",
           "i386": "386", "i686": "386", "armv7l": "arm", "armv6l": "arm",
           "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}


def _os_release() -> tuple[str, str]:
    """(`ID`, `VERSION_ID`) of /etc/os-release, as gopsutil reads them for Nomad."""
    try:
        info = platform.freedesktop_os_release()
    except OSError:
        return platform.system().lower(), ""
    return info.get("ID", platform.system().lower()), info.get("VERSION_ID", "")


def _ip_address() -> str:
    """The address of the interface the default route leaves by (a UDP `connect` sends
    nothing); loopback when there is none."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed anywhere real
        address: str = s.getsockname()[0]
        return address
    return "127.0.0.1"


def nomad_attributes(data_dir: Path, stat: os.statvfs_result, cores: int, mhz: int,
                     memory_mb: int, ip_address: str | None = None) -> dict[str, str]:
    """The attributes Nomad's fingerprinters report, under Nomad's names; `ip_address` the
    node's address (the configured interface's: runtime/lib/netif.py), else the default
    route's."""
    os_name, os_version = _os_release()
    machine = platform.machine()
    return {
        "cpu.arch": _GOARCH.get(machine, machine), "cpu.numcores": str(cores),
        "cpu.frequency": str(mhz), "cpu.totalcompute": str(cores * mhz),
        "cpu.usablecompute": str(cores * mhz), "cpu.modelname": _cpu_model(),
        "kernel.name": platform.system().lower(), "kernel.arch": machine,
        "kernel.version": platform.release(), "os.name": os_name, "os.version": os_version,
        "unique.hostname": socket.gethostname(),
        "unique.network.ip-address": ip_address or _ip_address(),
        "memory.totalbytes": str(memory_mb * 1024 * 1024),
        "unique.storage.volume": str(data_dir),
        "unique.storage.bytestotal": str(stat.f_blocks * stat.f_frsize),
        "unique.storage.bytesfree": str(stat.f_bavail * stat.f_frsize),
        "nomad.version": __version__, "nomad.revision": "",
    }


def _memory_mb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def computed_class(node: Node) -> str:
    """Nomad's computed node class, `v1:<hash>`: what makes two nodes interchangeable for
    placement (datacenter, class, pool, attributes and meta outside `unique.`, and devices
    with their non-unique attributes)."""
    def common(values: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in sorted(values.items()) if not k.startswith("unique.")}

    basis = {
        "datacenter": node.datacenter, "class": node.node_class, "pool": node.node_pool,
        "attributes": common(node.attributes), "meta": common(node.meta),
        "devices": sorted([d.vendor, d.type, d.name, common(d.attributes)]
                          for d in node.node_resources.devices),
    }
    digest = hashlib.blake2b(json.dumps(basis, sort_keys=True).encode(), digest_size=8)
    return f"v1:{int.from_bytes(digest.digest(), 'big')}"


def node_id(data_dir: Path) -> str:
    path = data_dir / "node-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        data_dir.mkdir(parents=True, exist_ok=True)
        new = str(uuid.uuid4())
        path.write_text(new + "\n")
        return new


def fingerprint_node(data_dir: Path, *, name: str | None = None, datacenter: str = "dc1",
                     node_class: str = "", nofile: int | None = None,
                     meta: dict[str, str] | None = None, ip_address: str | None = None,
                     network_speed: int = 0) -> Node:
    """What this machine offers; `nofile` (the agent's descriptor limit, default the current
    soft limit) becomes `yurt.nofile` and `yurt.max_tasks`; `ip_address` the node's address
    (`attr.unique.network.ip-address`: task ports, services, checks), default the default
    route's; `network_speed` its link speed in Mbit/s (Nomad's client `network_speed`),
    default the interface's as the kernel reports it, else `DEFAULT_NETWORK_SPEED`."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    cores = os.cpu_count() or 1
    stat = os.statvfs(data_dir if data_dir.exists() else data_dir.parent)
    disk_mb = stat.f_bavail * stat.f_frsize // (1024 * 1024)
    mhz, memory_mb = _cpu_mhz(), _memory_mb()
    attributes = nomad_attributes(data_dir, stat, cores, mhz, memory_mb, ip_address)
    attributes.update({"yurt.nofile": str(nofile), "yurt.max_tasks": str(max_tasks(nofile))})
    address = attributes["unique.network.ip-address"]
    device = interface_of(address) or ""
    network = NetworkResource(  # client/fingerprint/network.go `createNetworkResources`
        mode="host", device=device, ip=address,
        cidr=f"{address}/{128 if ':' in address else 32}",
        mbits=network_speed or (link_speed(device) if device else 0) or DEFAULT_NETWORK_SPEED)
    node = Node(
        id=node_id(data_dir), name=name or socket.gethostname(), datacenter=datacenter,
        node_class=node_class, status="ready", attributes=attributes, meta=dict(meta or {}),
        status_updated_at=int(time.time()),
        node_resources=NodeResources(
            cpu=NodeCpuResources(cpu_shares=cores * mhz, total_cpu_cores=cores),
            memory=NodeMemoryResources(memory_mb=memory_mb),
            disk=NodeDiskResources(disk_mb=disk_mb), networks=[network]))
    node.computed_class = computed_class(node)
    return node


def advertise(node: Node, address: str, configured: str = "") -> None:
    """Record where the agent's API is reached: `configured` (the agent's `advertise.http`,
    `host:port`) if given, else where it listens (`http://host:port`). Nomad's `HTTPAddr` and
    `nomad.advertise.address` are `host:port`."""
    host_port = configured or address.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    if not configured and host in ("0.0.0.0", "[::]", "::"):
        # Listening on every interface: others reach it at the node's own address (the
        # servers of a cluster forward a node's routes there), as Nomad advertises it.
        ip = node.attributes.get("unique.network.ip-address", "127.0.0.1")
        host_port = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    node.http_addr = host_port
    node.attributes["nomad.advertise.address"] = host_port

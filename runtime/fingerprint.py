"""What this machine offers, as a `Node`: CPU, memory, disk and basic attributes.

Read from the kernel (`/proc/cpuinfo`, `/proc/meminfo`, `statvfs`) once at agent start. CPU is
counted in MHz like Nomad's `CpuShares` (cores × clock speed; 1,000 MHz per core when the clock
is not reported, as in many VMs). The node ID is created once and kept in the data dir, so an
agent restart is the same node.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import uuid
from pathlib import Path

from yurt.runtime.structs import (
    Node,
    NodeCpuResources,
    NodeDiskResources,
    NodeMemoryResources,
    NodeResources,
)

DEFAULT_MHZ = 1000


def _cpu_mhz() -> int:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return DEFAULT_MHZ
    speeds = [float(line.split(":")[1]) for line in text.splitlines()
              if line.startswith("cpu MHz") and ":" in line]
    return int(max(speeds)) if speeds else DEFAULT_MHZ


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
                     node_class: str = "") -> Node:
    cores = os.cpu_count() or 1
    stat = os.statvfs(data_dir if data_dir.exists() else data_dir.parent)
    disk_mb = stat.f_bavail * stat.f_frsize // (1024 * 1024)
    node = Node(
        id=node_id(data_dir), name=name or socket.gethostname(), datacenter=datacenter,
        node_class=node_class, status="ready",
        attributes={"kernel.name": platform.system().lower(),
                    "kernel.version": platform.release(), "cpu.numcores": str(cores),
                    "unique.hostname": socket.gethostname(),
                    "os.name": platform.system().lower(), "arch": platform.machine()},
        node_resources=NodeResources(
            cpu=NodeCpuResources(cpu_shares=cores * _cpu_mhz(), total_cpu_cores=cores),
            memory=NodeMemoryResources(memory_mb=_memory_mb()),
            disk=NodeDiskResources(disk_mb=disk_mb)))
    node.computed_class = computed_class(node)
    return node

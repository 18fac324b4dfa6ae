"""Resource limits through cgroups (`memory`, `memory_max`, `cpu`), and the OOM kills they cause.

What lives here: the limit arithmetic (pure: `limits_for`, `cpu_weight`), the `LimitCgroups`
protocol the drivers consume, and its two implementations: cgroup v1 (`V1Limits`, proven on a
real v1 host by tests/test_execdriver.py and tests/test_rawexec_limits.py) and cgroup v2
(`V2Limits`: one directory with `memory.max`, `memory.low`, `cpu.weight`, OOM kills from
`memory.events`; tested against a fake cgroupfs only — UNPROVEN on a real v2 host).
`select_limits` picks v1 where the v1 memory and cpu hierarchies are mounted (a hybrid host's
v2 tree holds no controllers), else v2 where a cgroup2 mount offers memory and cpu, else None.

The rules are Nomad's (drivers/shared/executor/utils.go `memoryLimits`, and
executor_universal_linux.go `configureCG1`): the hard limit is `memory_max`, with `memory` as
the soft limit; without `memory_max` the hard limit is `memory` and there is no soft limit;
`memory_max = -1` means no hard limit. CPU shares are `cpu` (MHz), clamped to the kernel's
range (executor_linux_cgo.go `clampCpuShares`, `MinCPUShares`, `MaxCPUShares`).

Layout (v1): one directory per task start in each of the memory and cpu hierarchies,
`<mount>/yurt/<alloc id>.<start id>` — the same name as the start's freezer cgroup
(`cgroups.py` `CgroupRoot.task_cgroup`), Nomad's `/nomad/<alloc>.<task>` under a `yurt`
parent. The task joins them itself before it execs its command (`taskstart.sh`), so nothing it
forks escapes them. Invariants: a name is made only by `create`, and a directory is removed only
when empty (the kernel refuses otherwise), so `sweep` can never take a running task's limits.

v1 also makes the start a `devices` cgroup (where that hierarchy is mounted), unrestricted
as its parent: the exec driver denies writes to its read-only device nodes there
(`devices_cgroup`, execstart.sh), as Nomad's executor does with libcontainer's device rules.

v2 (executor_universal_linux.go `configureCG2`): `<mount>/yurt/<alloc id>.<start id>`, the same
directory raw_exec's tree tracking uses on a v2 host (cgroups.py), with `memory` and `cpu`
enabled in `cgroup.subtree_control` of the mount's root and of `yurt`; `memory.max` ("max"
without a hard limit), `memory.low` (the soft limit, when set), `cpu.weight` from the shares.

OOM: on v1, `memory.oom_control`'s `oom_kill` counter (Linux 4.13+), on v2 `memory.events`'
`oom_kill`, counts the kills the memory cgroup's limit caused; read once the task has
exited. cgroupfs lives in kernel memory, so reads and writes never wait on a disk (see
`cgroups.py`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from yurt.runtime.errors import DriverError

PARENT: Final = "yurt"
MIN_CPU_SHARES: Final = 2
MAX_CPU_SHARES: Final = 262_144
MEMORY_NO_LIMIT: Final = -1
MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What a task's cgroups are set to: bytes (-1: no hard limit; 0: no soft limit)."""

    memory_bytes: int
    memory_soft_bytes: int
    cpu_shares: int
    #: The cores the task holds alone (`resources { cores }`), in cpuset syntax ("": any).
    cpuset_cpus: str = ""


def limits_for(memory_mb: int, memory_max_mb: int, cpu: int,
               cores: Sequence[int] = ()) -> Limits:
    """A task's limits from its `resources` block (see the module header for the rules)."""
    if memory_max_mb == MEMORY_NO_LIMIT:
        hard, soft = -1, memory_mb * MIB
    elif memory_max_mb <= 0:
        hard, soft = memory_mb * MIB, 0
    else:
        hard, soft = memory_max_mb * MIB, memory_mb * MIB
    return Limits(hard, soft, min(max(cpu, MIN_CPU_SHARES), MAX_CPU_SHARES),
                  ",".join(str(c) for c in sorted(cores)))


class LimitCgroups(Protocol):
    """A host's way to limit a task start (named `<alloc id>.<start id>`)."""

    def create(self, name: str, limits: Limits) -> list[Path]:
        """Make the start's cgroups with `limits` set; return the directories the task must
        join (write its pid to each one's `cgroup.procs`). Raises DriverError."""

    def oom_killed(self, name: str) -> bool:
        """Whether the kernel OOM-killed a process of the start for its memory limit."""

    def remove(self, name: str) -> bool:
        """Remove the start's cgroups if empty; True once all are gone."""

    def sweep(self, known: Container[str], allocs: Container[str]) -> list[str]:
        """Remove the empty cgroups of the starts of `allocs` (alloc ids) not in `known`
        (left by an agent that crashed); return their names."""


def cpu_weight(shares: int) -> int:
    """cgroup v2's `cpu.weight` [1, 10000] for v1 `cpu.shares` [2, 262144], as Nomad's executor
    converts them (executor_universal_linux.go `computeCPU`: opencontainers/cgroups
    `ConvertCPUSharesToCgroupV2Value` of Nomad's go.mod, the curve through 2 → 1,
    1024 → 100 and 262144 → 10000)."""
    if shares <= MIN_CPU_SHARES:
        return 1
    if shares >= MAX_CPU_SHARES:
        return 10_000
    log = math.log2(shares)
    return math.ceil(10 ** ((log * log + 125 * log) / 612.0 - 7.0 / 34.0))


def v1_mounts(mountinfo: str) -> dict[str, Path]:
    """The v1 hierarchies of the `memory`, `cpu`, `devices` and `cpuset` controllers in
    /proc/self/mountinfo text."""
    found: dict[str, Path] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        for controller in tail[2].split(","):
            if controller in ("memory", "cpu", "devices", "cpuset"):
                found.setdefault(controller, Path(fields[4].replace("\\040", " ")))
    return found


@dataclass(frozen=True)
class V1Limits:
    """Limits in the v1 `memory` and `cpu` hierarchies mounted at `memory` and `cpu`.

    `rmdir` is the one call whose meaning cgroupfs changes (a directory whose control files
    remain is removed, unless processes are in it): tests over a plain directory tree give
    their own."""

    memory: Path
    cpu: Path
    rmdir: Callable[[Path], None] = field(default=os.rmdir)
    #: The `devices` hierarchy, where mounted and writable.
    devices: Path | None = None
    #: The `cpuset` hierarchy, where mounted and writable: a start with reserved `cores`
    #: gets a cpuset cgroup there (Nomad's executor pins them the same way); without it
    #: the cores are accounted for at placement only.
    cpuset: Path | None = None

    def _dirs(self, name: str) -> tuple[Path, ...]:
        found = (self.memory / PARENT / name, self.cpu / PARENT / name)
        return found if self.devices is None else (*found, self.devices / PARENT / name)

    def _cpuset_dir(self, name: str) -> Path | None:
        return None if self.cpuset is None else self.cpuset / PARENT / name

    def _make_cpuset(self, name: str, cpus: str) -> Path:
        """The start's cpuset cgroup pinned to `cpus`. A v1 cpuset must have `cpus` and
        `mems` before a process may join, its parent's first (copied from the root's)."""
        assert self.cpuset is not None
        parent = self.cpuset / PARENT
        parent.mkdir(exist_ok=True)
        for option in ("cpuset.cpus", "cpuset.mems"):
            if not (parent / option).read_text().strip():
                (parent / option).write_text((self.cpuset / option).read_text().strip())
        cgroup = parent / name
        cgroup.mkdir(exist_ok=True)
        (cgroup / "cpuset.mems").write_text((parent / "cpuset.mems").read_text().strip())
        (cgroup / "cpuset.cpus").write_text(cpus)
        return cgroup

    def devices_cgroup(self, name: str) -> Path | None:
        """The start's `devices` cgroup (None without that hierarchy)."""
        return None if self.devices is None else self.devices / PARENT / name

    def create(self, name: str, limits: Limits) -> list[Path]:
        dirs = self._dirs(name)
        mem, cpu = dirs[0], dirs[1]
        try:
            for d in dirs:
                d.parent.mkdir(exist_ok=True)
                d.mkdir(exist_ok=True)
            # The soft limit first: the kernel refuses none of these, whatever the order.
            if limits.memory_soft_bytes > 0:
                (mem / "memory.soft_limit_in_bytes").write_text(str(limits.memory_soft_bytes))
            (mem / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            (cpu / "cpu.shares").write_text(str(limits.cpu_shares))
            pinned = ([self._make_cpuset(name, limits.cpuset_cpus)]
                      if limits.cpuset_cpus and self.cpuset is not None else [])
        except OSError as e:
            self.remove(name)
            raise DriverError(f"cannot set the task's resource limits in {e.filename}: "
                              f"{e.strerror}", recoverable=True) from None
        return [*dirs, *pinned]

    def oom_killed(self, name: str) -> bool:
        try:
            text = (self._dirs(name)[0] / "memory.oom_control").read_text()
        except OSError:
            return False
        return oom_kills(text) > 0

    def remove(self, name: str) -> bool:
        pinned = self._cpuset_dir(name)
        return _remove((*self._dirs(name), *([pinned] if pinned else [])), self.rmdir)

    def sweep(self, known: Container[str], allocs: Container[str]) -> list[str]:
        parents = [h / PARENT for h in (self.memory, self.cpu, self.devices, self.cpuset)
                   if h is not None]
        return _sweep(parents, known, allocs, self.remove)


@dataclass(frozen=True)
class V2Limits:
    """Limits in the cgroup v2 tree mounted at `mount` (see the module header; unproven on a
    real v2 host). `rmdir` as `V1Limits`'."""

    mount: Path
    rmdir: Callable[[Path], None] = field(default=os.rmdir)

    def _dir(self, name: str) -> Path:
        return self.mount / PARENT / name

    def create(self, name: str, limits: Limits) -> list[Path]:
        cgroup = self._dir(name)
        try:
            cgroup.parent.mkdir(exist_ok=True)
            # Controllers reach a cgroup only through its parents' subtree_control.
            for parent in (self.mount, cgroup.parent):
                (parent / "cgroup.subtree_control").write_text("+memory +cpu")
            cgroup.mkdir(exist_ok=True)
            if limits.memory_soft_bytes > 0:
                (cgroup / "memory.low").write_text(str(limits.memory_soft_bytes))
            (cgroup / "memory.max").write_text(
                "max" if limits.memory_bytes < 0 else str(limits.memory_bytes))
            (cgroup / "cpu.weight").write_text(str(cpu_weight(limits.cpu_shares)))
        except OSError as e:
            self.remove(name)
            raise DriverError(f"cannot set the task's resource limits in {e.filename}: "
                              f"{e.strerror}", recoverable=True) from None
        return [cgroup]

    def oom_killed(self, name: str) -> bool:
        try:
            text = (self._dir(name) / "memory.events").read_text()
        except OSError:
            return False
        return oom_kills(text) > 0

    def remove(self, name: str) -> bool:
        return _remove((self._dir(name),), self.rmdir)

    def sweep(self, known: Container[str], allocs: Container[str]) -> list[str]:
        return _sweep([self.mount / PARENT], known, allocs, self.remove)


def _remove(dirs: tuple[Path, ...], rmdir: Callable[[Path], None]) -> bool:
    """rmdir each of `dirs` unless it holds processes; True once all are gone."""
    gone = True
    for d in dirs:
        try:
            rmdir(d)
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                raise DriverError(f"cannot remove the task's cgroup {d}: "
                                  f"{e.strerror}") from None
            gone = False
    return gone


def _sweep(parents: list[Path], known: Container[str], allocs: Container[str],
           remove: Callable[[str], bool]) -> list[str]:
    """`remove` the starts under `parents` of `allocs` not in `known`; their names."""
    names: set[str] = set()
    for parent in parents:
        with contextlib.suppress(OSError):
            names.update(p.name for p in parent.iterdir() if p.is_dir())
    removed = []
    for name in sorted(n for n in names if n.partition(".")[0] in allocs and n not in known):
        with contextlib.suppress(DriverError):
            if remove(name):
                removed.append(name)
    return removed


def oom_kills(oom_control: str) -> int:
    """The `oom_kill` counter in v1 `memory.oom_control` or v2 `memory.events` text (0 on
    kernels before 4.13)."""
    for line in oom_control.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def v2_mount(mountinfo: str) -> Path | None:
    """The first cgroup2 mount in /proc/self/mountinfo text."""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and tail and tail[0] == "cgroup2":
            return Path(fields[4].replace("\\040", " "))
    return None


def select_limits(mountinfo: str | None = None) -> LimitCgroups | None:
    """The host's limit cgroups (see the module header); None where neither v1's memory and
    cpu hierarchies nor a v2 tree with both controllers are there and writable (an agent
    that is not root)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    found = v1_mounts(mountinfo)
    if "memory" in found and "cpu" in found:
        for hierarchy in (found["memory"], found["cpu"]):
            if not _writable_parent(hierarchy):
                return None
        devices = found.get("devices")
        if devices is not None and not _writable_parent(devices):
            devices = None
        cpuset = found.get("cpuset")
        if cpuset is not None and not _writable_parent(cpuset):
            cpuset = None
        return V1Limits(found["memory"], found["cpu"], devices=devices, cpuset=cpuset)
    mount = v2_mount(mountinfo)
    if mount is None:
        return None
    try:
        controllers = (mount / "cgroup.controllers").read_text().split()
    except OSError:
        return None
    if "memory" not in controllers or "cpu" not in controllers or not _writable_parent(mount):
        return None
    return V2Limits(mount)


def _writable_parent(hierarchy: Path) -> bool:
    """Whether `<hierarchy>/yurt` exists or can be made."""
    try:
        (hierarchy / PARENT).mkdir(exist_ok=True)
    except OSError:
        return False
    return True

"""Resource limits through cgroups (`memory`, `memory_max`, `cpu`), and the OOM kills they cause.

What lives here: the limit arithmetic (pure: `limits_for`), the `LimitCgroups` protocol the
drivers consume, and its cgroup v1 implementation (`V1Limits`). cgroup v2 is not implemented
yet: `select_limits` returns None on a host without the v1 memory and cpu hierarchies, and a
`V2Limits` (one directory, `memory.max`/`memory.low`/`cpu.weight`, `memory.events`'
`oom_kill`) would implement the same protocol.

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

OOM: on v1, `memory.oom_control`'s `oom_kill` counter (Linux 4.13+) counts the kills the
memory cgroup's limit caused; read once the task has exited. cgroupfs lives in kernel memory,
so reads and writes never wait on a disk (see `cgroups.py`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Container
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


def limits_for(memory_mb: int, memory_max_mb: int, cpu: int) -> Limits:
    """A task's limits from its `resources` block (see the module header for the rules)."""
    if memory_max_mb == MEMORY_NO_LIMIT:
        hard, soft = -1, memory_mb * MIB
    elif memory_max_mb <= 0:
        hard, soft = memory_mb * MIB, 0
    else:
        hard, soft = memory_max_mb * MIB, memory_mb * MIB
    return Limits(hard, soft, min(max(cpu, MIN_CPU_SHARES), MAX_CPU_SHARES))


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


def v1_mounts(mountinfo: str) -> dict[str, Path]:
    """The v1 hierarchies of the `memory` and `cpu` controllers in /proc/self/mountinfo text."""
    found: dict[str, Path] = {}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] != "cgroup":
            continue
        for controller in tail[2].split(","):
            if controller in ("memory", "cpu"):
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

    def _dirs(self, name: str) -> tuple[Path, Path]:
        return self.memory / PARENT / name, self.cpu / PARENT / name

    def create(self, name: str, limits: Limits) -> list[Path]:
        mem, cpu = self._dirs(name)
        try:
            for d in (mem, cpu):
                d.parent.mkdir(exist_ok=True)
                d.mkdir(exist_ok=True)
            # The soft limit first: the kernel refuses none of these, whatever the order.
            if limits.memory_soft_bytes > 0:
                (mem / "memory.soft_limit_in_bytes").write_text(str(limits.memory_soft_bytes))
            (mem / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            (cpu / "cpu.shares").write_text(str(limits.cpu_shares))
        except OSError as e:
            self.remove(name)
            raise DriverError(f"cannot set the task's resource limits in {e.filename}: "
                              f"{e.strerror}", recoverable=True) from None
        return [mem, cpu]

    def oom_killed(self, name: str) -> bool:
        try:
            text = (self._dirs(name)[0] / "memory.oom_control").read_text()
        except OSError:
            return False
        return oom_kills(text) > 0

    def remove(self, name: str) -> bool:
        gone = True
        for d in self._dirs(name):
            try:
                self.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise DriverError(f"cannot remove the task's cgroup {d}: "
                                      f"{e.strerror}") from None
                gone = False
        return gone

    def sweep(self, known: Container[str], allocs: Container[str]) -> list[str]:
        names: set[str] = set()
        for hierarchy in (self.memory, self.cpu):
            with contextlib.suppress(OSError):
                names.update(p.name for p in (hierarchy / PARENT).iterdir() if p.is_dir())
        removed = []
        for name in sorted(n for n in names
                           if n.partition(".")[0] in allocs and n not in known):
            with contextlib.suppress(DriverError):
                if self.remove(name):
                    removed.append(name)
        return removed


def oom_kills(oom_control: str) -> int:
    """The `oom_kill` counter in `memory.oom_control` text (0 on kernels before 4.13)."""
    for line in oom_control.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def select_limits(mountinfo: str | None = None) -> LimitCgroups | None:
    """The host's limit cgroups; None where the v1 memory and cpu hierarchies are missing or
    not writable (a v2-only host, for now, or an agent that is not root)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    found = v1_mounts(mountinfo)
    if "memory" not in found or "cpu" not in found:
        return None
    limits = V1Limits(found["memory"], found["cpu"])
    for hierarchy in (limits.memory, limits.cpu):
        try:
            (hierarchy / PARENT).mkdir(exist_ok=True)
        except OSError:
            return None
    return limits

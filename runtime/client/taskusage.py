"""A task's resource usage as Nomad's executor reports it: every process of the task's tree, and
CPU as a rate (percent of one core, and MHz) rather than a counter.

A raw_exec task is often a shell whose children do the work, so the task's pid alone says
little: `tree_usage` adds up the pid and its descendants (read from the kernel's
`/proc/<pid>/task/<tid>/children` lists, no scan of all of /proc). `CpuRates` turns two
readings of cumulative CPU ticks into a rate; it is sans-io (the time is a parameter). The first
reading of a task has no earlier one, so its rate is the average since the process started —
a number, never a misleading 0.

Everything here reads /proc only (runtime/lib/procfs.py: no disk, no thread hop); a process that is
gone counts as nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from yurt.runtime.lib.procfs import stat_fields

TICKS_PER_S: Final = os.sysconf("SC_CLK_TCK")
PAGE: Final = os.sysconf("SC_PAGE_SIZE")
#: A tree deeper or wider than this is cut (a fork bomb must not make a stats call unbounded).
MAX_PROCESSES: Final = 4096
#: A task not read for this long is forgotten by `CpuRates` (its allocation is likely gone).
FORGET_AFTER: Final = 600.0


@dataclass(frozen=True)
class ProcessUsage:
    rss: int  # bytes
    user_ticks: int
    system_ticks: int
    start_ticks: int  # clock ticks after boot


@dataclass
class TreeUsage:
    """The sum over a task's processes, and each process's own share (Nomad's `Pids`)."""

    rss: int = 0
    user_ticks: int = 0
    system_ticks: int = 0
    #: The earliest start among the processes (clock ticks after boot), 0 if there is none.
    start_ticks: int = 0
    processes: dict[int, ProcessUsage] = field(default_factory=dict)

    @property
    def ticks(self) -> int:
        return self.user_ticks + self.system_ticks


def process_usage(pid: int) -> ProcessUsage | None:
    if pid <= 0:
        return None
    fields = stat_fields(pid)
    if fields is None:
        return None
    try:
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return None
    # proc(5) fields 14 utime, 15 stime, 22 starttime; stat_fields starts at field 3.
    return ProcessUsage(rss, int(fields[11]), int(fields[12]), int(fields[19]))


def children(pid: int) -> list[int]:
    """The pid's children, from each of its threads' `children` list."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        found += [int(c) for c in text.split()]
    return found


def tree_usage(pid: int) -> TreeUsage:
    """The usage of `pid` and all its descendants (up to MAX_PROCESSES processes)."""
    total = TreeUsage()
    pending = [pid] if pid > 0 else []
    while pending and len(total.processes) < MAX_PROCESSES:
        current = pending.pop()
        if current in total.processes:
            continue
        usage = process_usage(current)
        if usage is None:
            continue
        total.processes[current] = usage
        total.rss += usage.rss
        total.user_ticks += usage.user_ticks
        total.system_ticks += usage.system_ticks
        if not total.start_ticks or usage.start_ticks < total.start_ticks:
            total.start_ticks = usage.start_ticks
        pending += children(current)
    return total


def uptime() -> float:
    """Seconds since boot, the clock of /proc's start times."""
    return float(Path("/proc/uptime").read_text().split()[0])


@dataclass(frozen=True)
class CpuRate:
    """Percent of one core: in all, in user mode, in kernel mode."""

    percent: float
    user: float
    system: float

    def mhz(self, core_mhz: float) -> float:
        """Nomad's `TotalTicks`: the rate as MHz of this machine's cores."""
        return self.percent / 100.0 * core_mhz


class CpuRates:
    """Rates from successive readings of cumulative ticks, one series per key (alloc, task).

    `rate(key, now, usage, since_boot)`: `now` is any monotonic clock in seconds (the series'
    own), `since_boot` the seconds since boot at the same moment (for the first reading's
    average since the processes started). A counter that went down — the task restarted and its
    processes are new — starts the series again.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, int, int]] = {}

    def rate(self, key: tuple[str, str], now: float, usage: TreeUsage,
             since_boot: float) -> CpuRate:
        before = self._last.get(key)
        self._last[key] = (now, usage.user_ticks, usage.system_ticks)
        if len(self._last) > 64 and before is None:
            self.forget_older_than(now - FORGET_AFTER)
        if before is not None and now > before[0] and usage.user_ticks >= before[1] \
                and usage.system_ticks >= before[2]:
            seconds = now - before[0]
            user, system = usage.user_ticks - before[1], usage.system_ticks - before[2]
        else:
            seconds = since_boot - usage.start_ticks / TICKS_PER_S
            user, system = usage.user_ticks, usage.system_ticks
        if seconds <= 0 or not usage.processes:
            return CpuRate(0.0, 0.0, 0.0)
        scale = 100.0 / TICKS_PER_S / seconds
        return CpuRate((user + system) * scale, user * scale, system * scale)

    def forget_older_than(self, moment: float) -> None:
        for key in [k for k, (at, _, _) in self._last.items() if at < moment]:
            del self._last[key]

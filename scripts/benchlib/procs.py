"""Reading the systems under test from outside, through /proc only.

Every number the peer benchmark reports about children, memory and CPU comes from here, so
all systems are measured the same way whatever they say about themselves. Children are
recognised by a marker no other process has: `sleep <unique duration>` (sleep takes fractional
seconds), or a marker argument for the crash-loop command.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK")


def _cmdline(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw.decode(errors="replace").split("\0")[:-1] if raw else []


def pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def is_child(argv: list[str], marker: str) -> bool:
    """The workload's own process: `sleep <marker>` exactly (not a shim whose argv names it)."""
    return len(argv) == 2 and os.path.basename(argv[0]) == "sleep" and argv[1] == marker


def children(marker: str) -> list[int]:
    """Live (not zombie) `sleep <marker>` processes anywhere on the machine."""
    found = []
    for pid in pids():
        argv = _cmdline(pid)
        if argv and is_child(argv, marker):
            found.append(pid)
    return found


def carrying(marker: str) -> list[int]:
    """Every process whose command line mentions the marker (children, shims, wrappers)."""
    found = []
    me = os.getpid()
    for pid in pids():
        argv = _cmdline(pid)
        if pid != me and argv and any(marker in a for a in argv):
            found.append(pid)
    return found


def ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[1])


def descends_from(pid: int, ancestor: int) -> bool:
    seen = 0
    current: int | None = pid
    while current and current > 1 and seen < 64:
        if current == ancestor:
            return True
        current = ppid(current)
        seen += 1
    return False


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def cpu_seconds(pid: int) -> float:
    """CPU time of the process itself, every thread, the exited ones too (not its children).

    Read from the kernel's per-process CPU clock, in nanoseconds: utime + stime in /proc are in
    clock ticks (10 ms), too coarse for an idle window (0.1 % of a core over 10 s). /proc is
    the fallback where the clock cannot be read."""
    try:
        # Linux's CPU clock of another process: MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED).
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        pass
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def tree(root: int) -> list[int]:
    """root and every live descendant (by parent pid)."""
    parents: dict[int, list[int]] = {}
    for pid in pids():
        parent = ppid(pid)
        if parent is not None:
            parents.setdefault(parent, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, ()))
    return out


@dataclass(frozen=True)
class Memory:
    uss: int  # Private_Clean + Private_Dirty
    pss: int
    rss: int


def memory(pid: int) -> Memory:
    values: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                values[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return Memory(uss=values.get("Private_Clean", 0) + values.get("Private_Dirty", 0),
                  pss=values.get("Pss", 0), rss=values.get("Rss", 0))


def loadavg() -> float:
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def kill_all(targets: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def killpg(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_agent(agent: subprocess.Popen[bytes] | subprocess.Popen[str], sig: int = signal.SIGINT,
               timeout: float = 60.0) -> None:
    """Stops an agent started in its own process group: `sig`, then, past `timeout`, the
    whole group killed."""
    agent.send_signal(sig)
    try:
        agent.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        killpg(agent.pid)
        agent.wait()


def sweep(marker: str, timeout: float = 10.0) -> int:
    """SIGKILL everything that carries the marker until nothing does; the number left."""
    deadline = time.monotonic() + timeout
    while True:
        left = carrying(marker)
        if not left or time.monotonic() > deadline:
            return len(left)
        kill_all(left)
        time.sleep(0.05)


def kill_with_tasks(pid: int, data_dir: str, sig: int = signal.SIGKILL) -> list[int]:
    """Signal an agent and every task it runs: the processes whose command line names its
    data directory (its tasks' shims) and all their descendants (the tasks). Collected
    before any is signalled, so no task escapes to init in between. The pids signalled."""
    roots = [pid, *carrying(data_dir)]
    targets = sorted({p for root in roots for p in tree(root)})
    kill_all(targets, sig)
    return targets

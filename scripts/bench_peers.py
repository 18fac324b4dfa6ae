"""Benchmark: yurt against supervisord, circus, a minimal Trio supervisor and bare posix_spawn.

The same workloads run against every system, interleaved (the order rotates every run), N
children of `sleep <unique duration>` each, counted from outside through /proc:

  spawn    seconds from the request until the first child and until all N are live
  memory   the daemon's USS (Private_Clean + Private_Dirty) with N children; for yurt also the
           PSS of the shims between the agent and its tasks
  idle     the daemon's CPU (utime + stime, % of one core) over a quiet window with N running
  restart  SIGKILL one child at a time: time until its replacement is in /proc (delay 0)
  stop     stop-all request until no child is left
  sigkill  kill -9 the daemon, start it again: time until it runs N children again (yurt:
           until the API reports all N tasks running), the duplicates, and yurt's API delay
  crash    a task that exits at once (delay 0): the daemon's CPU time per spawn
  exec     yurt only: N tasks on the exec driver until all are live, beside the floor of the
           same N as `unshare ... chroot ROOTFS sleep`, and the host chroot's build time
           (cold, warm, found), measured once (benchlib/isolation.py)
  docker   yurt only: N tasks on the docker driver until all are live, beside the floor of
           `docker run -d` of the same N in a loop, both on one private dockerd
           (benchlib/containers.py)

yurt runs as users run it, ACLs on: its requests carry the management token its first start
wrote (benchlib/systems.py), so the spawn, stop and sigkill rows include the ACL check of
each request (the sigkill row: the restarted agent loads its ACL state before it answers).

A table with the median and range of every cell (and the load average of each run), then one
JSON line with every value. Each run cleans up what it started, checked through /proc.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import containers, isolation, procs
from benchlib.systems import STARTED, SYSTEMS, System, Timeout, Workload, make, wait_for
from rich.console import Console
from rich.table import Table

ROWS = ("spawn", "memory", "idle", "restart", "stop", "sigkill", "crash", "exec", "docker")
ROOT = Path(__file__).resolve().parent.parent
#: Markers of every workload of this benchmark, swept once more at the end.
MARKERS: list[str] = []
#: The exec row's chroot, built on its first use and removed at the end.
EXEC_ROOTFS = isolation.Rootfs()
#: The docker row's daemon, started on its first use and stopped at the end.
DOCKERD = containers.Daemon()
MIB = 2**20

err = Console(stderr=True, highlight=False)


def progress(message: str) -> None:
    err.print(f"[dim]{time.strftime('%H:%M:%S')}[/] {message}")


class Tracker:
    """The workload's live children, rescanning only processes newer than the tracker.

    "Newer" is by pid, and pids are reused: on a busy machine they wrap within a minute, so a
    child can get the pid of a process that was there when the tracker began and that the
    quick scan skips. `scan(full=True)` reads every process and starts over from there; the
    caller asks for it when the quick count stalls."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.base: set[int] = set()
        self.scan(full=True)

    def scan(self, full: bool = False) -> list[int]:
        found = []
        every = procs.pids()
        for pid in every:
            if pid in self.base and not full:
                continue
            argv = procs._cmdline(pid)
            if argv and procs.is_child(argv, self.marker):
                found.append(pid)
        if full:
            self.base = set(every) - set(found)
        return found


def new_marker() -> str:
    return f"36000.{random.randrange(10**8, 10**9)}"


@contextmanager
def session(name: str, yurt_bin: Path,
            factory: Callable[[Path], System] | None = None) -> Iterator[System]:
    """One system in its own temporary directory (made by `factory` from it, or by `make`);
    everything it started is gone afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix=f"peers-{name}-"))
    system = factory(workdir) if factory else make(name, workdir, yurt_bin)
    try:
        yield system
    finally:
        progress(f"{name}: cleaning up")
        started = time.monotonic()
        with procs_shielded():
            try:
                system.shutdown()
            except Exception as e:
                progress(f"[yellow]{name}: graceful shutdown failed: {e}")
            system.cleanup()
            left = sum(procs.sweep(m) for m in system.markers)
            MARKERS.extend(system.markers)
            remove_cgroups(workdir / "data" / "alloc")
            if left:
                progress(f"[red]{name}: {left} processes could not be killed")
            shutil.rmtree(workdir, ignore_errors=True)
        progress(f"{name}: cleaned up in {time.monotonic() - started:.1f} s")


@contextmanager
def procs_shielded() -> Iterator[None]:
    """Finish a cleanup even if Ctrl-C comes meanwhile, then act on that Ctrl-C."""
    received: list[int] = []

    def hold(signum: int, frame: object) -> None:
        received.append(signum)
    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        raise KeyboardInterrupt


def remove_cgroups(alloc_dir: Path) -> None:
    """yurt's per-task cgroups of allocations this run made, if a kill left them behind.

    All of them at once: kill what is inside every group, thaw the frozen ones, then remove
    each as soon as it is empty (a pause per group was minutes for 1,000 tasks)."""
    if not alloc_dir.is_dir():
        return
    allocs = {p.name for p in alloc_dir.iterdir()}
    groups = [group for parent in Path("/sys/fs/cgroup").glob("*/yurt")
              for group in parent.glob("*.*")
              if group.is_dir() and group.name.split(".")[0] in allocs]
    for group in groups:
        with suppress(OSError):
            procs.kill_all(int(p) for p in (group / "cgroup.procs").read_text().split())
            if (group / "freezer.state").exists():
                (group / "freezer.state").write_text("THAWED")
    deadline = time.monotonic() + 10
    while groups and time.monotonic() < deadline:
        left = []
        for group in groups:
            try:
                group.rmdir()
            except FileNotFoundError:
                pass
            except OSError:  # busy: its killed processes are not gone yet
                left.append(group)
        groups = left
        if groups:
            time.sleep(0.05)


def sleep_workload(n: int) -> Workload:
    marker = new_marker()
    return Workload(count=n, argv=["/bin/sleep", marker], marker=marker)


def spawn(system: System, workload: Workload, timeout: float) -> dict[str, Any]:
    """Launch, request, and wait until all N children are live."""
    system.markers.append(workload.marker)
    launched = time.monotonic()
    system.launch(workload)
    progress(f"{system.name}: launched in {time.monotonic() - launched:.1f} s")
    tracker = Tracker(workload.marker)
    start = time.perf_counter()
    system.request()
    first = None
    deadline = time.monotonic() + timeout
    counted, changed = 0, time.monotonic()
    while True:
        stalled = time.monotonic() - changed > 0.5  # a reused pid the quick scan skips?
        live = tracker.scan(full=stalled)
        now = time.perf_counter() - start
        if live and first is None:
            first = now
        if len(live) >= workload.count:
            return {"spawn_first_s": first, "spawn_all_s": now}
        if len(live) != counted or stalled:
            counted, changed = len(live), time.monotonic()
        if time.monotonic() > deadline:
            raise Timeout(f"{len(live)} of {workload.count} children after {timeout:.0f} s")
        time.sleep(0.005)  # the scan itself takes a few ms: leave the CPUs to the system


def memory(system: System, workload: Workload) -> dict[str, Any]:
    daemon = procs.memory(system.pid)
    out: dict[str, Any] = {"uss_mib": daemon.uss / MIB}
    shims = getattr(system, "shims", None)
    if shims is not None:
        found = []
        for pid in shims(procs.children(workload.marker)):
            with suppress(OSError):
                found.append(procs.memory(pid).pss)
        out["shims"] = len(found)
        out["shim_pss_mib"] = sum(found) / MIB
        out["shim_pss_kib"] = sum(found) / len(found) / 1024 if found else 0.0
    return out


def idle(system: System, spawned: tuple[float, float], settle: float,
         steady: float) -> dict[str, Any]:
    """The daemon's CPU in two windows after the spawn ended (`spawned`: its CPU seconds and
    perf_counter then): settling, the first `settle` seconds (what a burst leaves to do:
    yurt's post-burst heap freeze, the last commits); then steady, the `steady` seconds
    after it, what an idle node costs for as long as it runs."""
    cpu0, t0 = spawned
    time.sleep(max(0.0, t0 + settle - time.perf_counter()))
    cpu1, t1 = procs.cpu_seconds(system.pid), time.perf_counter()
    time.sleep(steady)
    cpu2, t2 = procs.cpu_seconds(system.pid), time.perf_counter()
    return {"idle_settle_cpu_pct": 100 * (cpu1 - cpu0) / (t1 - t0),
            "idle_cpu_pct": 100 * (cpu2 - cpu1) / (t2 - t1)}


def restart(system: System, workload: Workload, kills: int, budget: float) -> dict[str, Any]:
    """SIGKILL one child at a time; time until a new child with the marker is in /proc."""
    latencies: list[float] = []
    end = time.monotonic() + budget
    while len(latencies) < kills and time.monotonic() < end:
        live = procs.children(workload.marker)
        if len(live) < workload.count:  # the last replacement is not complete yet
            time.sleep(0.01)
            continue
        before = set(procs.pids())
        victim = random.choice(live)
        start = time.perf_counter()
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 15
        found = False
        while not found:
            current = procs.pids()
            for pid in current:
                if pid in before:
                    continue
                argv = procs._cmdline(pid)
                if argv and procs.is_child(argv, workload.marker):
                    found = True
                    break
            if time.monotonic() > deadline:
                raise Timeout(f"no replacement {len(latencies)} kills in")
            time.sleep(0.001)
        latencies.append(time.perf_counter() - start)
    if not latencies:
        raise Timeout(f"no restart in {budget:.0f} s")
    latencies.sort()
    return {"restart_p50_ms": 1000 * percentile(latencies, 50),
            "restart_p95_ms": 1000 * percentile(latencies, 95),
            "restart_kills": len(latencies)}


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def stop(system: System, workload: Workload, timeout: float) -> dict[str, Any]:
    live = set(procs.children(workload.marker))
    start = time.perf_counter()
    system.stop_all()
    deadline = time.monotonic() + timeout
    while True:
        live = {pid for pid in live if procs.alive(pid)}
        if not live:
            live = set(procs.children(workload.marker))
            if not live:
                return {"stop_s": time.perf_counter() - start}
        if time.monotonic() > deadline:
            raise Timeout(f"{len(live)} children left after {timeout:.0f} s")
        time.sleep(0.002)


def sigkill(system: System, workload: Workload, timeout: float) -> dict[str, Any]:
    """kill -9 the daemon with N running, start it again; until it runs N again, duplicates."""
    # Only once the daemon counts all N as its own: else this measures an unfinished start.
    waited = time.monotonic()
    wait_for(lambda: system.supervised(procs.children(workload.marker)) >= workload.count,
             timeout, "all children supervised before the kill", pause=0.1)
    progress(f"{system.name}: all supervised after {time.monotonic() - waited:.1f} s more")
    system.kill_daemon()
    start = time.perf_counter()
    system.relaunch()
    api = None
    deadline = time.monotonic() + timeout
    while True:
        if api is None and system.api_ready():
            api = time.perf_counter() - start
        live = procs.children(workload.marker)
        if api is not None and system.supervised(live) >= workload.count:
            now = time.perf_counter() - start
            break
        if time.monotonic() > deadline:
            raise Timeout(f"not all running after {timeout:.0f} s")
        time.sleep(0.02)
    time.sleep(2.0)  # duplicates show up late as often as not
    out = {"sigkill_all_s": now,
           "sigkill_duplicates": max(0, len(procs.children(workload.marker)) - workload.count)}
    if system.name == "yurt":
        out["sigkill_api_s"] = api
    return out


def crash(system: System, workdir: Path, tasks: int, seconds: float) -> dict[str, Any]:
    """Tasks that exit at once, restarted with delay 0: the daemon's CPU time per spawn.

    Each start appends a byte to a counter file named by the marker, so spawns are counted
    without asking the daemon."""
    marker = new_marker()
    counter = workdir / f"crash-{marker}"
    counter.touch()
    workload = Workload(count=tasks, argv=["/bin/sh", "-c", 'printf x >> "$0"; exec /bin/false',
                                       str(counter)], marker=marker)
    system.markers.append(marker)
    system.launch(workload)
    system.request()
    wait_for(lambda: counter.stat().st_size > 0, 30, "first crash-loop spawn")
    time.sleep(0.5)
    spawns0, cpu0 = counter.stat().st_size, procs.cpu_seconds(system.pid)
    time.sleep(seconds)
    spawns, cpu = counter.stat().st_size - spawns0, procs.cpu_seconds(system.pid) - cpu0
    if spawns < 2:
        raise Timeout(f"{spawns} spawns in {seconds:.0f} s")
    return {"crash_ms_per_spawn": 1000 * cpu / spawns, "crash_spawns_per_s": spawns / seconds}


class Results:
    def __init__(self) -> None:
        self.cells: dict[tuple[str, int, str], list[float | None]] = {}
        self.loads: dict[tuple[str, int], list[float]] = {}
        self.errors: list[str] = []

    def add(self, system: str, n: int, values: dict[str, Any]) -> None:
        for key, value in values.items():
            self.cells.setdefault((system, n, key), []).append(value)

    def fail(self, system: str, n: int, keys: tuple[str, ...], why: str) -> None:
        self.errors.append(f"{system} N={n}: {why}")
        for key in keys:
            self.cells.setdefault((system, n, key), []).append(None)


#: The keys each row produces, for "timeout" cells.
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "spawn": ("spawn_first_s", "spawn_all_s"),
    "memory": ("uss_mib",),
    "idle": ("idle_settle_cpu_pct", "idle_cpu_pct"),
    "restart": ("restart_p50_ms", "restart_p95_ms"),
    "stop": ("stop_s",),
    "sigkill": ("sigkill_all_s", "sigkill_duplicates"),
    "crash": ("crash_ms_per_spawn",),
    "exec": isolation.KEYS,
    "docker": containers.KEYS,
}


def rows_at(name: str, rows: set[str], first_n: bool) -> set[str]:
    """The selected rows that run for this system at this N.

    The restart and crash rows do not depend on N: the first N only. The peers' kill -9 row
    too: both start a second copy of everything, so at the larger N it is the slowest cell
    of the benchmark and tells nothing the first N does not; yurt's runs at every N (the
    issue's recovery target is at 1,000)."""
    once = {"restart", "crash"} | ({"sigkill"} if name != "yurt" else set())
    return rows if first_n else rows - once


def run_cell(name: str, n: int, rows: set[str], args: argparse.Namespace,
             results: Results, first_n: bool) -> None:
    """Every selected row for one system at one N, in as few daemon starts as possible."""
    timeout = max(60.0, n * 0.12)
    load = procs.loadavg()
    rows = rows_at(name, rows, first_n)
    running_rows: list[str] = [r for r in ("spawn", "memory", "idle", "restart", "stop")
                               if r in rows]
    if running_rows:
        with session(name, args.yurt_bin) as system:
            workload = sleep_workload(n)
            try:
                values = spawn(system, workload, timeout)
                spawned = procs.cpu_seconds(system.pid), time.perf_counter()
            except Timeout as e:
                for row in running_rows:
                    results.fail(name, n, ROW_KEYS[row], f"{row}: timeout ({e})")
                progress(f"[yellow]{name} N={n}: spawn timeout: {e}")
            else:
                progress(f"{name} N={n}: all live in {values['spawn_all_s']:.2f} s")
                if "spawn" in rows:
                    results.add(name, n, values)
                steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
                    ("memory", lambda: memory(system, workload)),
                    ("idle", lambda: idle(system, spawned, args.settle_seconds,
                                          args.idle_seconds)),
                    ("restart", lambda: restart(system, workload, args.kills,
                                                args.restart_budget)),
                    ("stop", lambda: stop(system, workload, timeout))]
                for row, step in steps:
                    if row not in running_rows:
                        continue
                    try:
                        values = step()
                    except Timeout as e:  # a stuck row: the cell says so, the next row runs
                        results.fail(name, n, ROW_KEYS[row], f"{row}: timeout ({e})")
                        progress(f"[yellow]{name} N={n}: {row} timeout: {e}")
                    else:
                        results.add(name, n, values)
                        progress(f"{name} N={n}: {row} {fmt_values(values)}")
    if "sigkill" in rows and make(name, Path("/"), args.yurt_bin).restartable:
        with session(name, args.yurt_bin) as system:
            workload = sleep_workload(n)
            try:
                spawn(system, workload, timeout)
                values = sigkill(system, workload, timeout)
                results.add(name, n, values)
                progress(f"{name} N={n}: sigkill {fmt_values(values)}")
            except Timeout as e:
                results.fail(name, n, ROW_KEYS["sigkill"], f"sigkill: timeout ({e})")
                progress(f"[yellow]{name} N={n}: sigkill timeout: {e}")
    if "crash" in rows:
        with session(name, args.yurt_bin) as system:
            try:
                values = crash(system, system.workdir, args.crash_tasks,
                               args.crash_seconds)
                results.add(name, n, values)
                progress(f"{name}: crash {fmt_values(values)}")
            except Timeout as e:
                results.fail(name, n, ROW_KEYS["crash"], f"crash: timeout ({e})")
                progress(f"[yellow]{name}: crash timeout: {e}")
    if "exec" in rows and name == "yurt":
        exec_row(n, args, results, timeout)
    if "docker" in rows and name == "yurt":
        docker_row(n, args, results, timeout)
    results.loads.setdefault((name, n), []).append(round(max(load, procs.loadavg()), 2))


def exec_row(n: int, args: argparse.Namespace, results: Results, timeout: float) -> None:
    """The exec row at one N (benchlib/isolation.py): yurt's exec tasks, then the unshare
    floor, each in its own session; the chroot's build the first time."""
    problem = isolation.why_not()
    if problem:
        results.fail("yurt", n, isolation.KEYS, f"exec: {problem}")
        return
    if EXEC_ROOTFS.timings is None:
        built = EXEC_ROOTFS.build()
        results.add("yurt", n, built)
        progress(f"exec: chroot built at {EXEC_ROOTFS.path} {fmt_values(built)}")
    rootfs = EXEC_ROOTFS.path
    against_floor("exec", n, args, results, timeout, isolation.KEYS, [
        ("yurt-exec", lambda w: isolation.exec_yurt(w, args.yurt_bin, rootfs)),
        ("unshare", lambda w: isolation.UnshareFloor(w, rootfs))])


def docker_row(n: int, args: argparse.Namespace, results: Results, timeout: float) -> None:
    """The docker row at one N (benchlib/containers.py): yurt's docker tasks, then the
    `docker run` loop, each in its own session, against the one private dockerd."""
    problem = containers.why_not()
    if problem:
        results.fail("yurt", n, containers.KEYS, f"docker: {problem}")
        return
    daemon = DOCKERD.get()
    against_floor("docker", n, args, results, timeout, containers.KEYS, [
        ("yurt-docker", lambda w: containers.docker_yurt(w, args.yurt_bin, daemon)),
        ("docker-run", lambda w: containers.DockerRunLoop(w, daemon))])


def against_floor(row: str, n: int, args: argparse.Namespace, results: Results,
                  timeout: float, keys: tuple[str, str, str],
                  cells: list[tuple[str, Callable[[Path], System]]]) -> None:
    """A driver row at one N: N `sleep`s through yurt's driver, then through its floor
    (`cells`, in that order, each in its own session), recorded under `keys` (yurt's time,
    the floor's, and the first over the second, both of this run)."""
    mine, floor, ratio = keys
    values: dict[str, Any] = {}
    for key, (label, factory) in zip((mine, floor), cells, strict=True):
        with session(label, args.yurt_bin, factory) as system:
            try:
                values[key] = spawn(system, sleep_workload(n), timeout)["spawn_all_s"]
            except Timeout as e:
                results.fail("yurt", n, keys, f"{row}: {label} timeout ({e})")
                progress(f"[yellow]{label} N={n}: spawn timeout: {e}")
                return
    values[ratio] = values[mine] / values[floor] if values[floor] else None
    results.add("yurt", n, values)
    progress(f"{row} N={n}: {fmt_values(values)}")


def fmt_values(values: dict[str, Any]) -> str:
    return " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in values.items())


#: (label, key, unit format, which N) rows of the printed table; "all" = every N.
TABLE = [
    ("all children live (s)", "spawn_all_s", "{:.2f}", "all"),
    ("  ÷ posix floor of the same run", "spawn_vs_posix", "{:.1f}", "all"),
    ("first child (s)", "spawn_first_s", "{:.3f}", "all"),
    ("daemon USS (MiB)", "uss_mib", "{:.1f}", "all"),
    ("shims' PSS total (MiB)", "shim_pss_mib", "{:.1f}", "all"),
    ("PSS per shim (KiB)", "shim_pss_kib", "{:.0f}", "all"),
    ("idle CPU, settling (% of a core)", "idle_settle_cpu_pct", "{:.2f}", "all"),
    ("idle CPU, steady (% of a core)", "idle_cpu_pct", "{:.2f}", "all"),
    ("restart p50 (ms)", "restart_p50_ms", "{:.0f}", "first"),
    ("restart p95 (ms)", "restart_p95_ms", "{:.0f}", "first"),
    ("stop-all until none left (s)", "stop_s", "{:.2f}", "all"),
    ("after SIGKILL: all running (s)", "sigkill_all_s", "{:.2f}", "all"),
    ("after SIGKILL: duplicates", "sigkill_duplicates", "{:.0f}", "all"),
    ("after SIGKILL: API answers (s)", "sigkill_api_s", "{:.2f}", "all"),
    ("crash loop: CPU per spawn (ms)", "crash_ms_per_spawn", "{:.2f}", "first"),
    ("crash loop: spawns/s", "crash_spawns_per_s", "{:.0f}", "first"),
    ("exec tasks: all live (s)", "exec_all_s", "{:.2f}", "all"),
    ("  unshare + chroot floor (s)", "exec_floor_s", "{:.2f}", "all"),
    ("  ÷ that floor, same run", "exec_vs_floor", "{:.1f}", "all"),
    ("docker tasks: all live (s)", "docker_all_s", "{:.2f}", "all"),
    ("  docker run loop floor (s)", "docker_floor_s", "{:.2f}", "all"),
    ("  ÷ that floor, same run", "docker_vs_floor", "{:.1f}", "all"),
    ("exec chroot build, cold (s)", "chroot_cold_s", "{:.2f}", "first"),
    ("exec chroot build, warm (s)", "chroot_warm_s", "{:.2f}", "first"),
    ("exec chroot found built (ms)", "chroot_found_ms", "{:.2f}", "first"),
]


#: yurt's targets (the performance issue's table), printed beside the measurements.
TARGETS = {
    "spawn_vs_posix": "≤ 2.5, linear in N", "spawn_first_s": "≤ 0.1", "uss_mib": "≤ 35",
    "shim_pss_kib": "≤ 100", "idle_cpu_pct": "≤ 0.3, flat in N", "restart_p50_ms": "≤ 15",
    "restart_p95_ms": "≤ 30", "stop_s": "≤ 0.3", "sigkill_all_s": "≤ 1.5 at N = 1,000",
    "sigkill_duplicates": "0", "sigkill_api_s": "≤ 0.3", "crash_ms_per_spawn": "≤ 1.5",
}


def add_ratios(results: Results, systems: list[str], ns: list[int]) -> None:
    """Each run's time to all-live over the posix floor's in the same run (same load)."""
    for n in ns:
        floor = results.cells.get(("posix", n, "spawn_all_s"))
        if not floor:
            continue
        for name in systems:
            mine = results.cells.get((name, n, "spawn_all_s"))
            if mine and len(mine) == len(floor):
                results.cells[(name, n, "spawn_vs_posix")] = [
                    None if a is None or not b else a / b for a, b in zip(mine, floor,
                                                                          strict=True)]


def cell_text(values: list[float | None], form: str) -> str:
    good = [v for v in values if v is not None]
    timeouts = len(values) - len(good)
    if not good:
        return "timeout"
    text = form.format(statistics.median(good))
    if len(good) > 1:
        text += f" ({form.format(min(good))}–{form.format(max(good))})"
    if timeouts:
        text += f" +{timeouts} timeout"
    return text


def summary(values: list[float | None]) -> dict[str, Any]:
    good = [v for v in values if v is not None]
    out: dict[str, Any] = {"runs": [None if v is None else round(v, 4) for v in values]}
    if good:
        out.update(median=round(statistics.median(good), 4), min=round(min(good), 4),
                   max=round(max(good), 4))
    return out


def report(results: Results, systems: list[str], ns: list[int], runs: int,
           windows: tuple[float, float]) -> None:
    """The tables, then one JSON line; `windows` are the idle row's settle and steady
    seconds."""
    console = Console(width=200)
    add_ratios(results, systems, ns)
    settle, steady = windows
    for n in ns:
        table = Table(title=f"N = {n:,} — median (min–max) of {runs} run(s), children counted "
                            f"from /proc\nidle CPU: settling = seconds 0–{settle:g} after all "
                            f"children are live, steady = seconds {settle:g}–"
                            f"{settle + steady:g}; the idle target is for the steady state",
                      title_justify="left")
        table.add_column("")
        for name in systems:
            table.add_column(name, justify="right")
        table.add_column("yurt target", style="dim")
        for label, key, form, which in TABLE:
            if which == "first" and n != ns[0]:
                continue
            row = [results.cells.get((name, n, key)) for name in systems]
            if not any(row):
                continue
            table.add_row(label, *("—" if c is None else cell_text(c, form) for c in row),
                          TARGETS.get(key, ""))
        table.add_row("load average per run", *(
            " / ".join(f"{v:.1f}" for v in results.loads.get((name, n), []))
            for name in systems), "", style="dim")
        console.print(table)
    for line in results.errors:
        console.print(f"[yellow]{line}")
    cells: dict[str, Any] = {}
    for (name, n, key), values in sorted(results.cells.items()):
        cells.setdefault(name, {}).setdefault(str(n), {})[key] = summary(values)
    for (name, n), loads in results.loads.items():
        cells.setdefault(name, {}).setdefault(str(n), {})["loadavg"] = loads
    print(json.dumps({"bench": "peers", "runs": runs, "n": ns, "systems": systems,
                      "idle_windows_s": {"settle": settle, "steady": steady},
                      "cpu_count": os.cpu_count(), "results": cells, "errors": results.errors,
                      "markers": MARKERS}))


def verify_clean() -> None:
    """Nothing this benchmark started may outlive it: look through /proc once more."""
    for process in STARTED:  # not reaped yet, so the pid is still ours: no risk of reuse
        if process.poll() is None:
            procs.killpg(process.pid)
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
    left = sum(procs.sweep(m) for m in MARKERS)
    daemons = [p.pid for p in STARTED if p.poll() is None]
    if left or daemons:
        progress(f"[red]left behind: {left} children, daemons {daemons}")
    else:
        progress(f"clean: no daemon and no child of {len(MARKERS)} workloads left in /proc")


def csv(kind: Callable[[str], Any], allowed: tuple[str, ...] | None = None
        ) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        items = [kind(item.strip()) for item in text.split(",") if item.strip()]
        if allowed is not None:
            unknown = [i for i in items if i not in allowed]
            if unknown:
                raise argparse.ArgumentTypeError(
                    f"unknown {', '.join(unknown)}; expected some of {', '.join(allowed)}")
        return items
    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=csv(int), default=[500, 1000],
                        help="children per system, comma-separated (default 500,1000)")
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (default 3)")
    parser.add_argument("--systems", type=csv(str, SYSTEMS), default=list(SYSTEMS),
                        help=f"default {','.join(SYSTEMS)}")
    parser.add_argument("--rows", type=csv(str, ROWS), default=list(ROWS),
                        help=f"default {','.join(ROWS)}")
    parser.add_argument("--yurt-bin", type=Path, default=ROOT / ".venv" / "bin" / "yurt",
                        help="the yurt console script to start as `yurt agent` "
                             "(default the repo's .venv/bin/yurt)")
    parser.add_argument("--quick", action="store_true", help="one run at N = 200")
    parser.add_argument("--settle-seconds", type=float, default=10.0,
                        help="idle row: the settling window, from the moment all children "
                             "are live (default 10)")
    parser.add_argument("--idle-seconds", type=float, default=10.0,
                        help="idle row: the steady window, right after the settling one "
                             "(default 10)")
    parser.add_argument("--kills", type=int, default=30, help="restart row: kills per cell")
    parser.add_argument("--restart-budget", type=float, default=12.0,
                        help="restart row: seconds per cell at most")
    parser.add_argument("--crash-seconds", type=float, default=5.0)
    parser.add_argument("--crash-tasks", type=int, default=10,
                        help="crash row: tasks in the crash loop (default 10)")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.n = 1, [200]
    if "yurt" in args.systems and not os.access(args.yurt_bin, os.X_OK):
        parser.error(f"--yurt-bin {args.yurt_bin} is not an executable")
    args.yurt_bin = args.yurt_bin.absolute()
    rows = set(args.rows)
    results = Results()
    started = time.monotonic()
    order = list(args.systems)

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)
    try:
        for run in range(args.runs):
            for n in args.n:
                for name in order:
                    progress(f"run {run + 1}/{args.runs} N={n}: {name} "
                             f"(load {procs.loadavg():.2f})")
                    run_cell(name, n, rows, args, results, first_n=n == args.n[0])
            order = order[1:] + order[:1]  # interleave: every system takes every slot
    except KeyboardInterrupt:
        progress("[red]interrupted: reporting what was measured")
    finally:
        with procs_shielded():
            verify_clean()
            EXEC_ROOTFS.cleanup()
            DOCKERD.cleanup()
    progress(f"done in {time.monotonic() - started:.0f} s")
    report(results, list(args.systems), list(args.n), args.runs,
           (args.settle_seconds, args.idle_seconds))


if __name__ == "__main__":
    main()

"""scripts/bench_peers: how it recognises children and which rows run where (layer 0), how it
reads CPU (layer 2), and a short real run (layer 3).

The benchmark counts every system's children from /proc by a marker, so a shim whose command
line merely names the marker must not count; the idle row splits the settling after a burst
from the steady state after it; the short run drives the two floors end to end and relies on
the script's own final /proc check that nothing it started is left.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_agent_e2e import YURT

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import bench_peers  # noqa: E402
from benchlib import procs  # noqa: E402
from benchlib.systems import Workload  # noqa: E402


def test_only_the_sleep_itself_is_a_child_not_a_shim_naming_it() -> None:
    marker = "36000.123456789"
    assert procs.is_child(["/bin/sleep", marker], marker)
    assert procs.is_child(["sleep", marker], marker)
    assert not procs.is_child(["/bin/sh", "-c", 'exec "$@"', "sh", "/bin/sleep", marker], marker)
    assert not procs.is_child(["/bin/sleep", "36000.1"], marker)
    assert not procs.is_child(["/bin/sleep", marker, "extra"], marker)


def test_restart_crash_and_the_peers_kill_9_run_at_the_first_n_only() -> None:
    every = set(bench_peers.ROWS)
    for name in ("posix", "supervisord", "circus", "yurt"):
        assert bench_peers.rows_at(name, every, first_n=True) == every
    once = {"restart", "crash"}
    assert bench_peers.rows_at("yurt", every, first_n=False) == every - once
    for name in ("supervisord", "circus"):  # they duplicate every child: the slowest cell
        assert bench_peers.rows_at(name, every, first_n=False) == every - once - {"sigkill"}
    assert bench_peers.rows_at("circus", {"spawn"}, first_n=False) == {"spawn"}


@pytest.mark.slow
def test_spawn_finds_children_whose_pids_the_quick_scan_skips(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Blind(bench_peers.Tracker):
        """As if every new pid had belonged to a process older than the tracker."""

        def scan(self, full: bool = False) -> list[int]:
            if not full:
                self.base |= set(procs.pids())
                return super().scan()
            return super().scan(full=True)

    class Daemon:  # spawn() asks a system only to launch and request
        name = "fake"

        def __init__(self) -> None:
            self.markers: list[str] = []
            self.children: list[subprocess.Popen[bytes]] = []

        def launch(self, workload: Workload) -> None:
            self.workload = workload

        def request(self) -> None:
            for _ in range(self.workload.count):
                self.children.append(subprocess.Popen(self.workload.argv))

    monkeypatch.setattr(bench_peers, "Tracker", Blind)
    daemon = Daemon()
    workload = bench_peers.sleep_workload(3)
    try:
        values = bench_peers.spawn(daemon, workload, timeout=10)  # type: ignore[arg-type]
    finally:
        for child in daemon.children:
            child.kill()
            child.wait()
    assert values["spawn_all_s"] > 0


BURNER = """
import sys, threading, time
def burn():
    end = time.thread_time() + 0.05
    while time.thread_time() < end:
        pass
worker = threading.Thread(target=burn)  # a thread that has exited must still count
worker.start()
worker.join()
print(time.process_time(), flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
def test_cpu_seconds_counts_exited_threads_finer_than_a_clock_tick() -> None:
    with subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            own = float(child.stdout.readline())  # the child blocks on stdin from now on
            measured = procs.cpu_seconds(child.pid)
        finally:
            child.kill()
    assert own >= 0.05
    assert own <= measured < own + 0.05
    assert abs(measured * 100 - round(measured * 100)) > 1e-6  # not whole ticks of /proc


@pytest.mark.slow
def test_the_idle_row_keeps_a_burst_out_of_the_steady_window() -> None:
    class Daemon:  # all the idle row reads of a system
        pid: int

    with subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        try:
            daemon = Daemon()
            daemon.pid = child.pid
            spawned = procs.cpu_seconds(child.pid), time.perf_counter()
            assert child.stdout is not None
            child.stdout.readline()  # the burst is over: the settling window holds it all
            values = bench_peers.idle(daemon, spawned, settle=0.0, steady=0.5)  # type: ignore[arg-type]
        finally:
            child.kill()
    assert values["idle_settle_cpu_pct"] > 0
    assert values["idle_cpu_pct"] < 1.0  # a process blocked on a read uses no CPU
    assert values["idle_cpu_pct"] < values["idle_settle_cpu_pct"]


@pytest.mark.slow
def test_a_short_run_of_both_floors_measures_every_cell_and_leaves_nothing() -> None:
    argv = [sys.executable, str(SCRIPTS / "bench_peers.py"), "--systems", "posix,trio",
            "--rows", "spawn,memory,idle,restart,stop,crash", "--n", "20", "--runs", "1",
            "--kills", "3", "--crash-seconds", "1", "--settle-seconds", "0.5",
            "--idle-seconds", "0.5"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as run:
        try:
            stdout, stderr = run.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            run.terminate()  # SIGTERM: the script stops what it started before it exits
            stdout, stderr = run.communicate(timeout=60)
            pytest.fail(f"bench_peers did not finish in 120 s:\n{stderr}")
    assert run.returncode == 0, stderr
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    assert report["idle_windows_s"] == {"settle": 0.5, "steady": 0.5}
    for name in ("posix", "trio"):
        cells = report["results"][name]["20"]
        assert cells["spawn_all_s"]["median"] > 0
        assert cells["uss_mib"]["median"] > 1
        assert cells["idle_settle_cpu_pct"]["median"] >= 0
        assert cells["idle_cpu_pct"]["median"] >= 0
        assert cells["restart_kills"]["runs"] == [3]
        assert cells["stop_s"]["median"] > 0
        assert cells["crash_spawns_per_s"]["median"] > 0
    assert "clean: no daemon and no child of 4 workloads left in /proc" in stderr
    assert len(report["markers"]) == 4
    for marker in report["markers"]:  # checked here too, not only by the script itself
        assert procs.carrying(marker) == []


def run_yurt_row(row: str, *, timeout: float) -> tuple[str, str]:
    """`bench_peers --systems yurt --rows ROW --n 3 --runs 1`: its stdout and stderr, once it
    exited 0 within `timeout` seconds."""
    argv = [sys.executable, str(SCRIPTS / "bench_peers.py"), "--systems", "yurt",
            "--rows", row, "--n", "3", "--runs", "1", "--yurt-bin", YURT]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as run:
        try:
            stdout, stderr = run.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            run.terminate()
            stdout, stderr = run.communicate(timeout=60)
            pytest.fail(f"bench_peers did not finish in {timeout:.0f} s:\n{stderr}")
    assert run.returncode == 0, stderr
    return stdout, stderr


@pytest.mark.slow
def test_the_exec_row_measures_exec_tasks_their_floor_and_the_chroot_build() -> None:
    stdout, stderr = run_yurt_row("exec", timeout=120)
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["errors"] == []
    cells = {k: v["median"] for k, v in report["results"]["yurt"]["3"].items()
             if k != "loadavg"}
    assert set(cells) == {"exec_all_s", "exec_floor_s", "exec_vs_floor", "chroot_cold_s",
                          "chroot_warm_s", "chroot_found_ms"}
    assert cells["exec_all_s"] > 0
    assert cells["exec_floor_s"] > 0
    assert cells["exec_vs_floor"] == pytest.approx(
        cells["exec_all_s"] / cells["exec_floor_s"], rel=0.05)  # each rounded to 4 places
    assert cells["chroot_cold_s"] > 0
    assert cells["chroot_warm_s"] > 0
    assert cells["chroot_found_ms"] < 100  # a marker's stat, not a build
    assert "exec tasks: all live (s)" in stdout
    assert "unshare + chroot floor (s)" in stdout
    assert "clean: no daemon and no child of 2 workloads left in /proc" in stderr
    for marker in report["markers"]:
        assert procs.carrying(marker) == []
    (built,) = re.findall(r"exec: chroot built at (\S+)", stderr)
    assert not Path(built).exists()  # removed with the benchmark's end


@pytest.mark.slow
def test_the_docker_row_measures_docker_tasks_against_a_docker_run_loop() -> None:
    stdout, stderr = run_yurt_row("docker", timeout=180)
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["errors"] == [], stderr
    cells = {k: v["median"] for k, v in report["results"]["yurt"]["3"].items()
             if k != "loadavg"}
    assert set(cells) == {"docker_all_s", "docker_floor_s", "docker_vs_floor"}
    assert cells["docker_all_s"] > 0
    assert cells["docker_floor_s"] > 0
    assert cells["docker_vs_floor"] == pytest.approx(
        cells["docker_all_s"] / cells["docker_floor_s"], rel=0.05)
    assert "docker tasks: all live (s)" in stdout
    assert "docker run loop floor (s)" in stdout
    assert "clean: no daemon and no child of 2 workloads left in /proc" in stderr

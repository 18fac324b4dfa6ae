"""The crash torture (scripts/torture.py): its checker (layer 0) and a short real run (layer 3).

The short run is the same code as `scripts/torture --kills 200` with a dozen kills and a fixed
seed: a real `yurt agent` process SIGKILLed at seeded random points while jobs are registered,
updated, scaled, stopped and restarted. It fails on any duplicate, orphan, wrong status, failed
restart or DB integrity error, and prints each with the operation the kill followed.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from tests.docker_support import IMAGE, DockerDaemon
from tests.proc_support import wait_for

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "torture.py"


def load_torture() -> ModuleType:
    """scripts/ is not a package: load the script as a module (registered for dataclasses)."""
    name = "yurt_scripts_torture"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


torture = load_torture()


def alloc(alloc_id: str, desired: str = "run", client: str = "running",
          **tasks: str) -> dict[str, Any]:
    return {"ID": alloc_id, "JobID": "j", "DesiredStatus": desired, "ClientStatus": client,
            "TaskStates": {t: {"State": s} for t, s in tasks.items()}}


def proc(pid: int, alloc_id: str, task: str = "main", ppid: int = 99) -> Any:
    return torture.TaskProcess(pid, ppid, alloc_id, task)


# --------------------------------------------------------------------- layer 0: the checker

def test_checker_accepts_one_process_per_running_task() -> None:
    found = torture.check_invariants(
        [alloc("a", main="running", init="dead"), alloc("b", "stop", "complete", main="dead")],
        [proc(10, "a")])
    assert (found.duplicates, found.orphans, found.wrong_statuses) == ({}, {}, {})


def test_checker_counts_duplicates_and_orphans() -> None:
    found = torture.check_invariants(
        [alloc("a", main="running"), alloc("b", "stop", "complete", main="dead"),
         alloc("c", "run", "failed", main="dead")],
        [proc(10, "a"), proc(11, "a", ppid=1), proc(12, "b"), proc(13, "c"), proc(14, "zz")])
    assert list(found.duplicates.values()) == ["2 processes [10, 11] for alloc a (j) task main"]
    assert sorted(found.orphans) == ["pid 11", "pid 12", "pid 13", "pid 14"]
    assert "pid 1 without its shim" in found.orphans["pid 11"]
    assert "wants it stop" in found.orphans["pid 12"]
    assert "allocation is failed" in found.orphans["pid 13"]
    assert "unknown to the API" in found.orphans["pid 14"]


def test_checker_counts_wrong_statuses_both_ways() -> None:
    found = torture.check_invariants(
        [alloc("a", main="running"), alloc("b", main="dead", side="pending")],
        [proc(10, "b"), proc(11, "b", "side")])
    assert sorted(found.wrong_statuses) == ["a main no process", "pid 10 not running",
                                            "pid 11 not running"]
    assert found.orphans == {}
    assert found.duplicates == {}


def test_settled_needs_no_pending_and_no_stop_still_running() -> None:
    assert torture.unsettled([alloc("a", main="running"),
                              alloc("b", "stop", "complete", main="dead")]) == []
    assert torture.unsettled([alloc("a", "run", "pending", main="pending")]) == [
        "alloc a (j) pending", "alloc a (j) task main pending"]
    assert torture.unsettled([alloc("a", "stop", "running", main="running")]) == [
        "alloc a (j) stop but running"]
    batch = {**alloc("a", main="running"), "JobType": "batch"}
    assert torture.unsettled([batch]) == ["alloc a (j) batch still running"]


def test_integrity_reports_a_damaged_db(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.executemany("INSERT INTO t VALUES (?)", [("y" * 500,)] * 200)
    db.commit()
    db.close()
    assert torture.integrity(path) == "ok"
    assert torture.integrity(tmp_path / "absent.db") == "ok"
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\xff" * 4096  # a B-tree page overwritten
    path.write_bytes(bytes(data))
    assert torture.integrity(path) != "ok"


# ------------------------------------------------------------- layer 2: /proc identification

@pytest.mark.slow
def test_scan_finds_task_processes_by_run_marker() -> None:
    run_id = f"scan-{os.getpid()}"
    env = {**os.environ, "YURT_TORTURE": run_id, "NOMAD_ALLOC_ID": "a1",
           "NOMAD_TASK_NAME": "main"}
    # A "task" whose parent (this test) has no marker, with a marked child of its own.
    task = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & wait"], env=env)
    try:
        wait_for(lambda: len(torture.scan_run(run_id)[1]) == 2, timeout=10)
        tasks, pids = torture.scan_run(run_id)
        assert [(t.pid, t.alloc_id, t.task, t.ppid) for t in tasks] == [
            (task.pid, "a1", "main", os.getpid())]
        assert task.pid in pids
        assert torture._kill_run(run_id) == 2
    finally:
        task.kill()
        task.wait(timeout=10)
    wait_for(lambda: torture.scan_run(run_id) == ([], []), timeout=10)


@pytest.mark.slow
def test_scan_counts_a_shims_session_leader_as_its_task_not_its_helpers(tmp_path: Path) -> None:
    run_id = f"scan-shim-{os.getpid()}"
    env = {**os.environ, "YURT_TORTURE": run_id, "NOMAD_ALLOC_ID": "a1",
           "NOMAD_TASK_NAME": "main"}
    # A stand-in for client/drivers/shim.sh: its task in a session of its own (as the shim
    # starts it), and a program of the shim's own beside it (what it runs once its task ended).
    shim = tmp_path / "shim.sh"
    shim.write_text("setsid sleep 30 &\nsleep 30 &\nwait\n")
    process = subprocess.Popen(["/bin/sh", str(shim)], env=env)
    try:
        wait_for(lambda: len(torture.scan_run(run_id)[1]) == 3, timeout=10)
        tasks, pids = torture.scan_run(run_id)
        assert len(tasks) == 1
        assert tasks[0].ppid == process.pid
        assert os.getsid(tasks[0].pid) == tasks[0].pid
        assert process.pid in pids
    finally:
        torture._kill_run(run_id)
        process.wait(timeout=10)
    wait_for(lambda: torture.scan_run(run_id) == ([], []), timeout=10)


# ----------------------------------------------------------------- layer 3: the short torture

@pytest.mark.slow
@pytest.mark.serial  # crashes and restarts agents against bounds: alone, not beside a worker
async def test_short_crash_torture(tmp_path: Path) -> None:
    lines: list[str] = []
    with trio.fail_after(150):
        result = await torture.torture(kills=12, seed=20261130, data_dir=tmp_path / "data",
                                       report=lines.append)
    assert result.kills == 12
    assert result.ok, "\n".join(result.details)


@pytest.mark.slow
@pytest.mark.serial
async def test_short_crash_torture_of_docker_tasks(tmp_path: Path, dockerd: DockerDaemon
                                                   ) -> None:
    """The same torture with every task a container of the test dockerd: containers outlive
    the agent, so every kill leaves them to be re-attached, one copy each."""
    lines: list[str] = []
    data = tmp_path / "data"
    try:
        with trio.fail_after(240):
            result = await torture.torture(kills=8, seed=20261208, data_dir=data,
                                           report=lines.append, docker_host=dockerd.host,
                                           docker_image=IMAGE)
    finally:
        left = dockerd.containers(f"label=io.yurt.alloc_root={data / 'alloc'}")
        if left:
            dockerd.cli("rm", "-f", *left, check=False)
    assert result.kills == 8
    assert result.ok, "\n".join(result.details + lines[-5:])
    assert left == []  # the torture removed what it started

"""`yurt run` end to end, as a user runs it: a real `yurt` process, real clock, real SQLite.

Every wait is bounded (subprocess timeouts); nothing sleeps to let things settle: the tests
read the process's own output until the record they wait for appears.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import IO, Any

import pytest

ROOT = Path(__file__).parent.parent
YURT = str(Path(sys.executable).parent / "yurt")
TIMEOUT = 60


@pytest.fixture(autouse=True)
def _temporary_dirs_in_tmp_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # `yurt run` keeps its temporary directory: make it one the test cleans up.
    monkeypatch.setenv("TMPDIR", str(tmp_path))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([YURT, "run", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=TIMEOUT, check=False)


def records(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def events_of(recs: list[dict[str, Any]], topic: str) -> list[dict[str, Any]]:
    return [e for r in recs for e in r["Events"] if e["Topic"] == topic]


def task_types(recs: list[dict[str, Any]], alloc_id: str, task: str) -> list[str]:
    return [e["Payload"]["Event"]["Type"] for e in events_of(recs, "Task")
            if e["Payload"]["AllocID"] == alloc_id and e["Payload"]["Task"] == task]


def final_allocs(recs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for e in events_of(recs, "Allocation"):
        latest[e["Key"]] = e["Payload"]["Allocation"]
    return latest


def write_job(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.nomad.hcl"
    path.write_text(text)
    return str(path)


def test_batch_job_json_records_and_exit_0() -> None:
    out = run("--json", "examples/mock.nomad.hcl")
    assert out.returncode == 0, out.stderr
    recs = records(out.stdout)
    indexes = [r["Index"] for r in recs]
    assert indexes == sorted(indexes)
    assert len(set(indexes)) == len(indexes)
    assert [e["Type"] for e in events_of(recs, "Job")] == ["JobRegistered"]
    assert [e["Type"] for e in events_of(recs, "Node")] == ["NodeRegistration"]
    allocs = final_allocs(recs)
    assert sorted(a["Name"] for a in allocs.values()) == ["mock-demo.g[0]", "mock-demo.g[1]"]
    for alloc_id, alloc in allocs.items():
        assert alloc["ClientStatus"] == "complete"
        assert set(alloc["TaskStates"]) == {"init", "main", "sidecar"}
        assert task_types(recs, alloc_id, "main") == ["Received", "Task Setup", "Started",
                                                      "Terminated"]
        assert task_types(recs, alloc_id, "sidecar")[-4:] == ["Main Tasks Dead", "Killing",
                                                              "Terminated", "Killed"]
        event = next(e for e in events_of(recs, "Task") if e["Payload"]["AllocID"] == alloc_id)
        assert set(event["Payload"]) == {"AllocID", "JobID", "TaskGroup", "Task", "Event"}
        assert isinstance(event["Payload"]["Event"]["Time"], int)


def test_failing_batch_job_exits_1(tmp_path: Path) -> None:
    job = write_job(tmp_path, '''job "f" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "mock_driver"
      config {
        run_for   = "10ms"
        exit_code = 7
      }
    }
  }
}''')
    out = run("--json", job)
    assert out.returncode == 1, out.stderr
    (alloc,) = final_allocs(records(out.stdout)).values()
    assert alloc["ClientStatus"] == "failed"
    assert alloc["TaskStates"]["t"]["Failed"] is True


def test_human_output_ends_with_a_status_table() -> None:
    out = run("examples/mock.nomad.hcl")
    assert out.returncode == 0, out.stderr
    assert "mock-demo.g[0]" in out.stdout
    assert "Task started by client" in out.stdout
    assert "final state" in out.stdout
    assert "complete" in out.stdout.split("final state")[1]


def test_invalid_job_exits_2(tmp_path: Path) -> None:
    bad = write_job(tmp_path, 'job "x" {\n  group "g" {\n    task "t" {\n'
                              '      driver = "mock_driver"\n      bogus = 1\n    }\n  }\n}\n')
    out = run(bad)
    assert out.returncode == 2
    assert f"{bad}:5:7: job.x.group.g.task.t.bogus" in out.stderr


SERVICE = '''job "svc" {
  group "g" {
    task "web" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
    task "cleanup" {
      driver = "mock_driver"
      lifecycle { hook = "poststop" }
      config { run_for = "50ms" }
    }
  }
}'''


def run_until_started_then_signal(args: list[str], sig: int) -> tuple[int, list[dict[str, Any]]]:
    """Start `yurt run --json`, wait for a task's Started record, send `sig`, collect all."""
    proc = subprocess.Popen([YURT, "run", "--json", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            rec = json.loads(line)
            if any(e["Topic"] == "Task" and e["Payload"]["Event"]["Type"] == "Started"
                   for e in rec["Events"]):
                break
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, records("".join(lines) + rest)


def test_service_job_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    rc, recs = run_until_started_then_signal([write_job(tmp_path, SERVICE)], signal.SIGTERM)
    assert rc == 0
    (alloc_id, alloc), = final_allocs(recs).items()
    assert alloc["ClientStatus"] == "complete"
    assert task_types(recs, alloc_id, "web")[-3:] == ["Killing", "Terminated", "Killed"]
    assert task_types(recs, alloc_id, "cleanup") == ["Received", "Task Setup", "Started",
                                                     "Terminated"]
    index = {(e["Payload"]["Task"], e["Payload"]["Event"]["Type"]): e["Index"]
             for e in events_of(recs, "Task")}
    assert index[("web", "Killed")] < index[("cleanup", "Started")]


def test_interrupted_batch_job_exits_130(tmp_path: Path) -> None:
    job = write_job(tmp_path, SERVICE.replace('job "svc" {', 'job "b" {\n  type = "batch"'))
    rc, recs = run_until_started_then_signal([job], signal.SIGINT)
    assert rc == 130
    (alloc,) = final_allocs(recs).values()
    assert alloc["TaskStates"]["web"]["Events"][-1]["Type"] == "Killed"


def test_state_is_in_the_data_dir(tmp_path: Path) -> None:
    out = run("--json", "--data-dir", str(tmp_path / "data"), "examples/mock.nomad.hcl")
    assert out.returncode == 0, out.stderr
    conn = sqlite3.connect(tmp_path / "data" / "state" / "state.db")
    try:
        rows = conn.execute("SELECT value FROM alloc WHERE kind = 'alloc'").fetchall()
        tasks = conn.execute("SELECT COUNT(*) FROM task WHERE kind = 'task_state'").fetchone()
    finally:
        conn.close()
    assert sorted(json.loads(v)["ClientStatus"] for (v,) in rows) == ["complete", "complete"]
    assert tasks == (6,)


HUNG_STOP = '''job "hung" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      kill_timeout = "100ms"
      config {
        run_for    = "1h"
        kill_after = "1h"
      }
    }
  }
}'''


def test_interrupted_run_is_bounded_when_the_driver_never_reports_the_exit(
        tmp_path: Path) -> None:
    # The driver takes an hour to stop the task: the stop gives up after the kill timeout
    # and its grace, then a grace for the exit (~10 s: the kill timeout is short, the two
    # graces are the product's), reports the task killed with the reason, and `run` ends.
    proc = subprocess.Popen([YURT, "run", "--json", write_job(tmp_path, HUNG_STOP)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if '"Started"' in line:
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    recs = records("".join(lines) + rest)
    assert proc.returncode == 130  # Ctrl-C, as a shell reports it; nothing failed
    (alloc,) = final_allocs(recs).values()
    assert alloc["ClientStatus"] == "complete"
    killed = alloc["TaskStates"]["t"]["Events"][-1]
    assert killed["Type"] == "Killed"
    assert "did not exit" in killed["Details"]["kill_error"]


def test_a_stop_cut_by_a_crash_is_finished_by_the_next_run(tmp_path: Path) -> None:
    """Ctrl-C starts a graceful stop; `yurt run` is SIGKILLed during its kill wait. Run again
    on the same data dir, it finishes that stop (and exits) rather than placing a second copy
    next to the first."""
    from tests.proc_support import processes_with_env, wait_for

    job_id = f"cut-stop-{uuid.uuid4().hex[:8]}"
    job = write_job(tmp_path, f'''job "{job_id}" {{
  type = "service"
  group "g" {{
    task "t" {{
      driver = "raw_exec"
      kill_timeout = "3s"
      config {{
        command = "/bin/sh"
        args = ["-c", "trap '' INT; echo up; while :; do sleep 0.2; done"]
      }}
    }}
  }}
}}''')
    data = str(tmp_path / "data")

    def tasks() -> list[int]:
        return processes_with_env(NOMAD_JOB_ID=job_id, NOMAD_TASK_NAME="t")

    first = subprocess.Popen([YURT, "run", "--json", "--data-dir", data, job], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        wait_for_task_event(first.stdout, "Started")
        wait_for(lambda: "up" in _log(tmp_path))  # printed once its trap is set: no event
        first.send_signal(signal.SIGINT)  # the task ignores it: a 3 s kill wait begins
        wait_for_task_event(first.stdout, "Killing")
        first.kill()  # in the middle of the kill wait
        first.wait(timeout=TIMEOUT)
        assert tasks(), "the task should outlive the killed run"
        again = run("--json", "--data-dir", data, job)
        recs = records(again.stdout)
        assert tasks() == []
        final = final_allocs(recs)
        assert len(final) == 1, final  # the resumed allocation, no second placement
        (alloc,) = final.values()
        assert alloc["ClientStatus"] == "complete"
    finally:
        if first.poll() is None:
            first.kill()
        for pid in tasks():
            os.kill(pid, signal.SIGKILL)


def wait_for_task_event(stdout: IO[str], event_type: str) -> None:
    """Read `yurt run --json` records until a task event of this type (each read is bounded by
    the run's own progress: the caller's process timeout ends a stuck one)."""
    for line in stdout:
        if any(e["Payload"]["Event"]["Type"] == event_type
               for e in events_of([json.loads(line)], "Task")):
            return
    raise AssertionError(f"no {event_type} event before the run ended")


def _log(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in (tmp_path / "data" / "alloc").glob(
        "*/alloc/logs/t.stdout.0"))

"""Layer 3: `kill -9` the agent, start it again, nothing lost, duplicated or orphaned.

Drives `yurt run --json --data-dir D` as a user would. While the agent is dead, one task keeps
printing and another prints 30 lines and exits with code 3; the second `yurt run` on the same
data dir must re-attach: same pid for the running task, no second process, no new `Started`
event, the exit code 3 reported and put through the restart policy, and the lines printed
during the outage (by both tasks) in the log files. Real clock, real processes; every wait has
a deadline."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import pytest

from tests.proc_support import wait_for
from yurt.runtime.lib.procfs import stat_fields

pytestmark = pytest.mark.slow

YURT = str(Path(sys.executable).parent / "yurt")
MARKER = "yurt-e2e-web-7c1f"

WEB = ("echo $$ > $NOMAD_TASK_DIR/pid; i=0; "
       "while :; do i=$((i+1)); echo tick $i; echo $i > $NOMAD_TASK_DIR/count; sleep 0.05; done")
QUITTER = ("echo $$ > $NOMAD_TASK_DIR/pid; "
           "while [ ! -f $NOMAD_ALLOC_DIR/quit ]; do sleep 0.05; done; "
           "i=1; while [ $i -le 30 ]; do echo bye $i; i=$((i+1)); done; exit 3")

JOB = f'''job "resume" {{
  group "g" {{
    restart {{
      attempts = 3
      delay    = "100ms"
      interval = "1m"
      mode     = "fail"
    }}
    task "web" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "{WEB}", "{MARKER}"]
      }}
    }}
    task "quitter" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "{QUITTER}"]
      }}
    }}
  }}
}}'''


def alive(pid: int) -> bool:
    """Running (not a zombie), in one read of /proc: a process may end and be reaped between
    any two looks, so a check in two steps (signal 0, then the stat file) races its exit."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != b"Z"


def processes_with(marker: str) -> list[int]:
    """Task processes whose command line carries `marker` (not their shims). A child the task
    forked (for its `sleep`) has the same command line until it execs: one whose parent is such
    a process is part of that task, not another copy of it."""
    found: dict[int, int] = {}  # pid: parent pid
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            fields = stat_fields(int(entry))
            if (marker.encode() in cmdline and b"shim.sh" not in cmdline
                    and fields is not None and fields[0] != b"Z"):
                found[int(entry)] = int(fields[1])
    return sorted(pid for pid, parent in found.items() if parent not in found)


def task_events(records: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    return [e["Payload"]["Event"] for r in records for e in r["Events"]
            if e["Topic"] == "Task" and e["Payload"]["Task"] == task]


def read_until(stream: TextIO, records: list[dict[str, Any]],
               done: Callable[[list[dict[str, Any]]], bool]) -> None:
    for line in stream:
        records.append(json.loads(line))
        if done(records):
            return
    raise AssertionError("agent output ended early")


def started(records: list[dict[str, Any]], task: str) -> int:
    return sum(1 for e in task_events(records, task) if e["Type"] == "Started")


def handles_saved(data: Path, alloc_id: str, tasks: tuple[str, ...]) -> bool:
    """Whether the agent has committed a task handle for each of `tasks` (their `local_state`
    rows, store/base.py's key layout, in the SQLite file of store/sqlite.py). `yurt run` prints
    `Started` before that commit (`TaskRunner._start` persists after it appends the event):
    a kill before it leaves a start that no handle accounts for, which the restarted agent
    stops and starts afresh (runtime/client/drivers/orphans.py), not the run to re-attach to."""
    db = data / "state" / "state.db"
    if not db.exists():
        return False
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute("SELECT task, value FROM task WHERE alloc_id = ? AND "
                            "kind = 'local_state'", (alloc_id,)).fetchall()
    except sqlite3.OperationalError as e:  # the agent is still creating its tables
        if "no such table" in str(e):
            return False
        raise
    finally:
        conn.close()
    handles = {task: json.loads(value).get("TaskHandle") for task, value in rows}
    return all(handles.get(task) for task in tasks)


def start_agent(job: Path, data: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([YURT, "run", "--json", "--data-dir", str(data), str(job)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_agent_kill_9_and_restart_reattaches(tmp_path: Path) -> None:
    job = tmp_path / "resume.nomad.hcl"
    job.write_text(JOB)
    data = tmp_path / "data"
    first = start_agent(job, data)
    second: subprocess.Popen[str] | None = None
    try:
        assert first.stdout is not None
        records: list[dict[str, Any]] = []
        read_until(first.stdout, records,
                   lambda r: started(r, "web") == 1 and started(r, "quitter") == 1)
        alloc_id = next(e["Key"] for r in records for e in r["Events"]
                        if e["Topic"] == "Allocation")
        alloc_dir = data / "alloc" / alloc_id
        pid_file = {t: alloc_dir / t / "local" / "pid" for t in ("web", "quitter")}
        wait_for(lambda: all(p.exists() and p.read_text().strip() for p in pid_file.values()))
        wait_for(lambda: handles_saved(data, alloc_id, ("web", "quitter")))
        web_pid = int(pid_file["web"].read_text())
        quitter_pid = int(pid_file["quitter"].read_text())

        first.kill()  # SIGKILL: no cleanup at all
        first.wait(timeout=10)
        assert alive(web_pid)
        assert alive(quitter_pid)

        # The outage: quitter exits 3, web keeps printing into the pipe.
        (alloc_dir / "alloc" / "quit").touch()
        wait_for(lambda: not alive(quitter_pid))
        (alloc_dir / "alloc" / "quit").unlink()  # so its restart stays up
        count_file = alloc_dir / "web" / "local" / "count"

        def count() -> int:  # the task rewrites the file: it may be caught empty
            text = count_file.read_text().strip()
            return int(text) if text else 0

        wait_for(lambda: count() > 0)
        at_kill = count()
        wait_for(lambda: count() > at_kill + 5)
        during_outage = count()

        second = start_agent(job, data)
        assert second.stdout is not None
        again: list[dict[str, Any]] = []
        read_until(second.stdout, again, lambda r: started(r, "quitter") >= 1)
        logs = alloc_dir / "alloc" / "logs"
        wait_for(lambda: f"tick {during_outage}\n" in "".join(
            p.read_text() for p in logs.glob("web.stdout.*")))

        assert int(pid_file["web"].read_text()) == web_pid
        assert alive(web_pid)
        assert processes_with(MARKER) == [web_pid]  # one web process: no duplicate
        quitter = task_events(again, "quitter")
        assert [e["Type"] for e in quitter][:3] == ["Terminated", "Restarting", "Started"]
        assert quitter[0]["ExitCode"] == 3
        assert quitter[0]["DisplayMessage"] == "Exit Code: 3"
        # Its last words, written while no agent read the pipe, were kept, in order.
        said = (logs / "quitter.stdout.0").read_text().splitlines()
        assert said == [f"bye {i}" for i in range(1, 31)]

        second.send_signal(signal.SIGTERM)
        # Through the same reader as above: `communicate` reads the pipe itself and would lose
        # what that reader had buffered (a record cut in two).
        watchdog = threading.Timer(30, second.kill)
        watchdog.start()
        try:
            rest = second.stdout.read()
            second.wait()
        finally:
            watchdog.cancel()
        again += [json.loads(line) for line in rest.splitlines() if line.strip()]
        assert second.returncode == 0
        web = task_events(again, "web")
        assert "Started" not in [e["Type"] for e in web]  # re-attached, never restarted
        assert [e["Type"] for e in web][-3:] == ["Killing", "Terminated", "Killed"]
        wait_for(lambda: not alive(web_pid))
        assert processes_with(MARKER) == []
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in processes_with(MARKER):
            os.kill(pid, signal.SIGKILL)

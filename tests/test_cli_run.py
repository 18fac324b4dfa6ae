"""`yurt run` for humans, as a user runs it: a real `yurt` process, real tasks (raw_exec), real
clock. Where it keeps things, the tasks' output behind their names, time order, no task left
running after any signal that ends it, and no name from the job file that drives the
operator's terminal.

Every wait is bounded (subprocess timeouts, `wait_for`); nothing sleeps to let things settle:
the tests read the process's own output until the line they wait for appears.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from tests.cli_proc_support import YURT
from tests.proc_support import processes_with_env, wait_for
from tests.test_cli_scripting import read_terminal

ROOT = Path(__file__).parent.parent
TIMEOUT = 60


@pytest.fixture(autouse=True)
def _temporary_dirs_in_tmp_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # `yurt run` keeps its temporary directory: make it one the test cleans up.
    monkeypatch.setenv("TMPDIR", str(tmp_path))


def write_job(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.nomad.hcl"
    path.write_text(text)
    return str(path)


def two_tasks(job_id: str) -> str:
    return f'''job "{job_id}" {{
  type = "batch"
  group "g" {{
    task "writer" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "echo first line; echo to stderr >&2; printf 'no newline'"]
      }}
    }}
    task "counter" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "for i in 1 2 3; do echo count $i; sleep 0.1; done"]
      }}
    }}
  }}
}}'''


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [YURT, "run", *args], capture_output=True, text=True, cwd=ROOT, timeout=TIMEOUT, check=False
    )


def test_names_its_directory_at_start_and_end_and_keeps_it(tmp_path: Path) -> None:
    out = run(write_job(tmp_path, two_tasks("where")))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    (kept,) = tmp_path.glob("yurt-run-*")
    state = kept / "state" / "state.db"
    assert lines[0] == f"==> state file: {state}"
    assert re.fullmatch(
        rf"==> allocation where\.g\[0\] \([0-9a-f]{{8}}\): {kept}/alloc/\S+ "
        r"\(task logs in alloc/logs\)",
        lines[1],
    ), lines[1]
    assert lines[2] == f"==> {kept} is a new temporary directory, kept after the run"
    assert lines[-3:-1] == lines[0:2]  # named again at the end
    assert f"`yurt run JOBFILE --data-dir {kept}` reuses it" in lines[-1]
    assert state.is_file()
    alloc_dir = Path(lines[1].split(": ", 1)[1].split(" ")[0])
    assert (alloc_dir / "alloc" / "logs" / "writer.stdout.0").read_text() == (
        "first line\nno newline"
    )


def test_task_output_streams_behind_task_names_and_quiet_hides_it(tmp_path: Path) -> None:
    job = write_job(tmp_path, two_tasks("out"))
    out = run(job)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "writer  | first line" in lines
    assert "writer  | to stderr" in lines
    assert "writer  | no newline" in lines  # a last line without its newline still shows
    counts = [line for line in lines if line.startswith("counter | ")]
    assert counts == ["counter | count 1", "counter | count 2", "counter | count 3"]
    table = next(i for i, line in enumerate(lines) if line.startswith("final state"))
    assert lines.index("counter | count 3") < table  # every line before the final table
    quiet = run("--quiet", job)
    assert quiet.returncode == 0, quiet.stderr
    assert " | " not in quiet.stdout
    # Into a pipe the final table is plain columns, as every table of the command line.
    assert not set("┃│┏┡└━") & set(out.stdout)
    assert any(line.split()[:3] == ["allocation", "id", "status"] for line in lines)


def test_human_output_is_in_time_order(tmp_path: Path) -> None:
    out = run("examples/demo.nomad.hcl")
    assert out.returncode == 0, out.stderr
    offsets = [float(m.group(1)) for m in re.finditer(r"^\s*(\d+\.\d+)s  ", out.stdout, re.M)]
    assert len(offsets) > 10
    assert offsets == sorted(offsets)


def test_json_output_keeps_stdout_to_records(tmp_path: Path) -> None:
    out = run("--json", write_job(tmp_path, two_tasks("js")))
    assert out.returncode == 0, out.stderr
    assert all(line.startswith("{") for line in out.stdout.splitlines())
    assert "==> state file:" in out.stderr


SERVICE = """job "%s" {
  group "g" {
    task "stubborn" {
      driver = "raw_exec"
      kill_timeout = "1s"
      config {
        command = "/bin/sh"
        args = ["-c", "trap '' INT TERM HUP; sleep 1000 & echo up; while :; do sleep 0.2; done"]
      }
    }
    task "child" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", "sleep 1000 & echo up; wait"]
      }
    }
  }
}"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_no_task_process_outlives_the_run(tmp_path: Path, sig: signal.Signals) -> None:
    job_id = f"left-{uuid.uuid4().hex[:8]}"

    def tasks() -> list[int]:
        return processes_with_env(NOMAD_JOB_ID=job_id)

    proc = subprocess.Popen(
        [YURT, "run", write_job(tmp_path, SERVICE % job_id)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # The read below ends with the output: a run that never says "up" is killed, and fails.
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        up = set()
        for line in proc.stdout:
            if line.endswith("| up\n"):
                up.add(line.split()[0])
                if up == {"stubborn", "child"}:
                    break
        watchdog.cancel()
        assert up == {"stubborn", "child"}
        assert len(tasks()) >= 4  # two shells, two background sleeps
        proc.send_signal(sig)
        proc.communicate(timeout=TIMEOUT)
        # Ctrl-C is 130 as a shell reports it; a stop asked for by SIGTERM or SIGHUP is 0.
        assert proc.returncode == (130 if sig == signal.SIGINT else 0)
        assert tasks() == []
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in tasks():
            os.kill(pid, signal.SIGKILL)


def test_a_closed_stdout_does_not_stop_the_run(tmp_path: Path) -> None:
    job = write_job(
        tmp_path,
        """job "pipe" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", "seq 1 20000; sleep 0.5; echo finished > ${NOMAD_ALLOC_DIR}/data/marker"]
      }
    }
  }
}""",
    )
    proc = subprocess.Popen(
        [YURT, "run", job], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"==> state file:")
        proc.stdout.close()  # `| head -1`
        _, err = proc.communicate(timeout=TIMEOUT)
        assert proc.returncode == 0, err
        wait_for(lambda: any(tmp_path.glob("yurt-run-*/alloc/*/alloc/data/marker")))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_tasks_output_comes_before_its_end(tmp_path: Path) -> None:
    tasks = "\n".join(
        f"""    task "t{i}" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args = ["-c", "echo last words of t{i}"]
      }}
    }}"""
        for i in range(4)
    )
    job = write_job(tmp_path, f'job "order" {{\n  type = "batch"\n  group "g" {{\n{tasks}\n}}\n}}')
    out = run(job)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for i in range(4):
        said = lines.index(f"t{i} | last words of t{i}")
        ended = next(
            n for n, line in enumerate(lines) if re.search(rf"\bt{i}\s+Terminated\b", line)
        )
        assert said < ended, out.stdout


# Names and a message that are commands to a terminal (retitle the window, clear the screen).
EVIL_JOB = "j\x1b]0;job\x07"
EVIL_GROUP = "g\x1b]0;group\x07"
EVIL_TASK = "t\x1b[2J"
EVIL_UNPLACED = "u\x1b]0;unplaced\x07"
EVIL_EVENT = "boom \x1b]0;event\x07"
TASK_OUTPUT = "raw\x1b]0;task\x07"  # the task's own output: shown as it is, on purpose


def evil_job(tmp_path: Path) -> str:
    """A JSON job whose names hold ESC and BEL: a task with such a name, a task that prints
    them, a poststop task whose start error (an event message) holds them, and a group that
    no node can take, its constraint's value holding them too."""
    shell = {"command": "/bin/sh"}
    job = {"Job": {"ID": EVIL_JOB, "Type": "batch", "TaskGroups": [
        {"Name": EVIL_GROUP, "Count": 1,
         "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
         "Tasks": [
             {"Name": EVIL_TASK, "Driver": "raw_exec",
              "Config": {**shell, "args": ["-c", "echo plain"]}},
             {"Name": "talker", "Driver": "raw_exec",
              "Config": {**shell, "args": ["-c", r"printf 'raw\033]0;task\007\n'"]}},
             {"Name": "failing", "Driver": "mock_driver", "Lifecycle": {"Hook": "poststop"},
              "Config": {"start_error": EVIL_EVENT}},
         ]},
        {"Name": EVIL_UNPLACED, "Count": 1,
         "Constraints": [{"LTarget": "${attr.kernel.name}", "Operand": "=",
                          "RTarget": "plan9\x1b]0;c\x07"}],
         "Tasks": [{"Name": "x", "Driver": "mock_driver", "Config": {"run_for": "1s"}}]},
    ]}}
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(job))
    return str(path)


def test_names_from_the_job_file_never_drive_the_terminal(tmp_path: Path) -> None:
    """Every name and message shown to a person is escaped (runtime/lib/printable.py), into a
    pipe and at a terminal (where rich draws the final table); the task's own output alone
    stays raw; `--json` keeps the exact names."""
    job = evil_job(tmp_path)
    piped = run(job)
    code, at_terminal = read_terminal([YURT, "run", job], {**os.environ, "TERM": "xterm"})
    for status, shown in ((piped.returncode, piped.stdout + piped.stderr),
                          (code, at_terminal)):
        assert status == 1, shown  # the poststop task failed, a group was not placed
        lines = shown.splitlines()
        talker = [line for line in lines if re.match(r"talker\s* \| ", line)]
        assert [line.split("| ", 1)[1] for line in talker] == [TASK_OUTPUT], shown
        others = "".join(line for line in lines if line not in talker)
        assert not {"\x1b", "\x07"} & set(others), shown
        # Shown escaped, not dropped: the allocation, the task, the message, the final table.
        assert r"j\x1b]0;job\a.g\x1b]0;group\a[0]" in others
        assert r"t\x1b[2J" in others
        assert r"boom \x1b]0;event\a" in others
        assert r"u\x1b]0;unplaced\x07" in others
        assert "final state" in others
        assert r"t\x1b[2J | plain" in others  # its output's label, escaped as well
    assert set("┃│┏┡└━") & set(at_terminal)  # the drawn table was checked too

    exact = run("--json", job)
    assert exact.returncode == 1, exact.stderr
    assert not {"\x1b", "\x07"} & set(exact.stderr), exact.stderr
    events = [e for line in exact.stdout.splitlines() for e in json.loads(line)["Events"]]
    tasks = {e["Payload"]["Task"] for e in events if e["Topic"] == "Task"}
    assert tasks == {EVIL_TASK, "talker", "failing"}
    messages = {e["Payload"]["Event"]["DisplayMessage"] for e in events if e["Topic"] == "Task"}
    assert EVIL_EVENT in messages
    allocs = {e["Payload"]["Allocation"]["Name"] for e in events if e["Topic"] == "Allocation"}
    assert allocs == {f"{EVIL_JOB}.{EVIL_GROUP}[0]"}

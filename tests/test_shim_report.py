"""The raw_exec shim's report pipe when nobody reads it (layer 2: the real shim, real `sh`).

A `yurt run` stopping, or an agent that gave up on a start, closes the read end of the report
pipe while the task starts. The task runs anyway (SIGPIPE is ignored for that write), and the
failed write must not put dash's "echo: I/O error" into the task's stderr, which the operator
reads as the task's own output (runtime/client/drivers/shim.sh, taskstart.sh).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from yurt.runtime.client.drivers.rawexec import SHIM

pytestmark = pytest.mark.slow


def run_shim(tmp_path: Path, *, reader: bool) -> tuple[str, str, str]:
    """Run a task that prints "hi" through the shim, its report pipe read (`reader`) or
    closed before the start; the task's stdout, stderr and the shim's own log."""
    state = tmp_path / "state"
    state.mkdir()
    out, err = tmp_path / "out", tmp_path / "err"
    read_end, write_end = os.pipe()
    if not reader:
        os.close(read_end)
    try:
        process = subprocess.Popen(
            ["/bin/sh", str(SHIM), str(state), str(out), str(err), str(tmp_path), "",
             "/bin/sh", "-c", "echo hi; echo oops >&2"],
            stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.DEVNULL,
            start_new_session=True)
    finally:
        os.close(write_end)
    assert process.wait(timeout=20) == 0
    if reader:
        with os.fdopen(read_end, "rb") as report:
            lines = report.read().decode().splitlines()
        # "TASK_PID START_TIME", then the exit status (no subreaper here).
        assert len(lines[0].split()) == 2, lines
        assert lines[1] == "0", lines
    log = (state / "shim.log").read_text() if (state / "shim.log").exists() else ""
    assert (state / "exit").read_text().strip() == "0"
    return out.read_text(), err.read_text(), log


def test_a_report_nobody_reads_leaves_no_word_in_the_tasks_output(tmp_path: Path) -> None:
    stdout, stderr, log = run_shim(tmp_path, reader=False)
    assert stdout == "hi\n"
    assert stderr == "oops\n"  # the task's own words only
    assert "I/O error" not in log


def test_a_read_report_still_carries_the_pid_and_the_status(tmp_path: Path) -> None:
    stdout, stderr, _ = run_shim(tmp_path, reader=True)
    assert (stdout, stderr) == ("hi\n", "oops\n")

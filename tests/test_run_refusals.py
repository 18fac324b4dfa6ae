"""`yurt run` with a job that does not run when registered (runtime/cli/run.py): a periodic
job launches children on a schedule, a parameterized one runs when dispatched. Both are
refused with exit 2 and a message saying how to run them under an agent, before anything is
made; they used to end at once, exit 0, with an empty table and no word.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.browser_support import YURT
from yurt.runtime.cli.run import foreground_refusal
from yurt.runtime.jobspec import parse_job

BODY = """
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/echo"
        args    = ["ran"]
      }
    }
  }
"""


def job_file(tmp_path: Path, block: str) -> Path:
    path = tmp_path / "job.nomad.hcl"
    path.write_text(f'job "nightly" {{\n  type = "batch"\n{block}\n{BODY}}}\n')
    return path


PERIODIC = '  periodic {\n    crons = ["0 3 * * *"]\n  }'
DISABLED = '  periodic {\n    crons = ["0 3 * * *"]\n    enabled = false\n  }'
PARAMETERIZED = '  parameterized {\n    payload = "optional"\n  }'


def test_which_jobs_are_refused_and_what_the_words_say(tmp_path: Path) -> None:
    def refusal(block: str) -> str | None:
        path = job_file(tmp_path, block)
        return foreground_refusal(parse_job(path.read_text(), filename=str(path)), "job.hcl")

    assert refusal("") is None
    periodic = refusal(PERIODIC)
    assert periodic is not None
    assert periodic.startswith("job 'nightly' is periodic (cron '0 3 * * *'): ")
    assert "`yurt job run job.hcl`" in periodic
    assert "`yurt job periodic force nightly` launches one now" in periodic
    disabled = refusal(DISABLED)
    assert disabled is not None
    assert "(cron '0 3 * * *', disabled)" in disabled
    parameterized = refusal(PARAMETERIZED)
    assert parameterized is not None
    assert parameterized.startswith("job 'nightly' is parameterized: ")
    assert "`yurt job dispatch nightly [PAYLOAD]`" in parameterized


@pytest.mark.slow
@pytest.mark.parametrize(("block", "words"), [(PERIODIC, "is periodic"),
                                             (PARAMETERIZED, "is parameterized")])
def test_yurt_run_refuses_them_with_exit_2_before_making_anything(
        tmp_path: Path, block: str, words: str) -> None:
    path = job_file(tmp_path, block)
    data = tmp_path / "data"
    done = subprocess.run([YURT, "run", str(path), "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith(f"yurt run: job 'nightly' {words}")
    assert f"`yurt job run {path}`" in done.stderr
    assert not data.exists()

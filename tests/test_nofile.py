"""The descriptor limit: raised at agent and `yurt run` start by the one policy
(runtime/lib/nofile.py), and reported as what it allows. Layer 2 where the limit is real: it is
lowered in a child process, never in the test runner; layer 0 for a hard limit Linux cannot
have (`RLIM_INFINITY`), with the limits faked."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_proc_support import YURT
from yurt.runtime.lib.nofile import raise_nofile_limit

CHILD = r'''
import json, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_NOFILE, (256, int(sys.argv[2])))
from yurt.runtime.client.fingerprint import fingerprint_node
from yurt.runtime.lib.nofile import raise_nofile_limit
nofile = raise_nofile_limit()
node = fingerprint_node(Path(sys.argv[1]), nofile=nofile)
print(json.dumps({"soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                  "nofile": node.attributes["yurt.nofile"],
                  "max_tasks": node.attributes["yurt.max_tasks"]}))
'''

#: `yurt run` started with a soft limit of 256 under a hard one of argv[1].
YURT_RUN_CHILD = r'''
import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, int(sys.argv[1])))
os.execv(sys.argv[2], sys.argv[2:])
'''

#: A task that prints the soft limit it inherited from `yurt run`.
ULIMIT_JOB = '''job "nofile" {
  type = "batch"
  group "g" {
    task "limit" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args = ["-c", "echo soft=$(ulimit -n)"]
      }
    }
  }
}'''


def run_child(data_dir: Path, hard: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(data_dir), str(hard)],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def test_soft_limit_is_raised_to_the_hard_one_and_reported(tmp_path: Path) -> None:
    got = run_child(tmp_path, 4096)
    assert got["soft"] == 4096
    assert got["nofile"] == "4096"
    # (4096 - 128 reserved) // 6 per task
    assert got["max_tasks"] == "661"


def test_yurt_run_raises_the_soft_limit_for_its_tasks(tmp_path: Path) -> None:
    job = tmp_path / "nofile.nomad.hcl"
    job.write_text(ULIMIT_JOB)
    done = subprocess.run(
        [sys.executable, "-c", YURT_RUN_CHILD, "4096", YURT, "run", "--data-dir",
         str(tmp_path / "data"), str(job)],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "soft=4096" in done.stdout


def test_an_unlimited_hard_limit_raises_the_soft_one_to_the_kernels_ceiling(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # setrlimit(2) refuses a descriptor limit above /proc/sys/fs/nr_open, so "unlimited" (as
    # other kernels report a hard limit) must become that ceiling, never RLIM_INFINITY itself.
    limits = {"soft": 256, "hard": resource.RLIM_INFINITY}

    def getrlimit(which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return limits["soft"], limits["hard"]

    def setrlimit(which: int, pair: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        limits["soft"], limits["hard"] = pair

    monkeypatch.setattr(resource, "getrlimit", getrlimit)
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
    assert raise_nofile_limit() == ceiling
    assert limits == {"soft": ceiling, "hard": resource.RLIM_INFINITY}

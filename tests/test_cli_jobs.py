"""`yurt job plan|history|revert|scale|inspect|eval`, `yurt eval list|status`, and `yurt job
run` ending on a placement failure, against a real `yurt agent` (layer 3)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_agent_e2e import YURT, free_port

pytestmark = pytest.mark.slow

JOB = '''job "web" {
  priority = %d
  group "g" {
    count = %d
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 1
        memory = %d
      }
    }
  }
}'''


@contextmanager
def agent(tmp: Path) -> Iterator[dict[str, str]]:
    port = free_port()
    env = {**os.environ, "YURT_ADDR": f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen([YURT, "agent", "--data-dir", str(tmp / "data"),
                             "--port", str(port)], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on" in line, line
        yield env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([YURT, *args], capture_output=True, text=True, env=env, timeout=60,
                          check=False)


def job_file(tmp: Path, name: str, priority: int = 50, count: int = 1,
             memory: int = 10) -> str:
    path = tmp / name
    path.write_text(JOB % (priority, count, memory))
    return str(path)


def test_job_lifecycle_verbs(tmp_path: Path) -> None:
    with agent(tmp_path) as env:
        first = job_file(tmp_path, "v0.hcl")
        assert run(env, "job", "run", "--detach", first).returncode == 0
        # plan: an unchanged job changes nothing (exit 0); a bigger count would (exit 1).
        same = run(env, "job", "plan", first)
        assert same.returncode == 0, same.stderr
        assert 'Task Group: "g" (1 ignore)' in same.stdout
        bigger = run(env, "job", "plan", job_file(tmp_path, "v1.hcl", count=3))
        assert bigger.returncode == 1, bigger.stderr
        assert 'Task Group: "g" (2 create, 1 in-place update)' in bigger.stdout, bigger.stdout
        assert '  +/- Count: "1" => "3"' in bigger.stdout, bigger.stdout  # the field diff
        plan_json = json.loads(run(env, "job", "plan", "-json-output",
                                   job_file(tmp_path, "v1.hcl", count=3)).stdout)
        assert plan_json["Annotations"]["DesiredTGUpdates"]["g"]["Place"] == 2
        huge = run(env, "job", "plan", job_file(tmp_path, "huge.hcl", memory=1 << 30))
        assert "Failed to place all allocations" in huge.stdout
        assert 'Dimension "memory" exhausted on 1 nodes' in huge.stdout
        assert huge.returncode == 1, huge.stderr  # Nomad: allocations would (fail to) place
        bad = tmp_path / "bad.hcl"
        bad.write_text('job "web" {\n  group "g" {\n    count = "x"\n  }\n}\n')
        assert run(env, "job", "plan", str(bad)).returncode == 255  # Nomad's: no plan
        gone = run({**env, "YURT_ADDR": "http://127.0.0.1:1"}, "job", "plan", first)
        assert gone.returncode == 255, gone.stderr
        # history, revert, inspect
        assert run(env, "job", "run", "--detach",
                   job_file(tmp_path, "v1.hcl", priority=60)).returncode == 0
        history = run(env, "job", "history", "-p", "web")
        assert history.returncode == 0, history.stderr
        assert 'Priority: "50" => "60"' in history.stdout
        assert re.search(r"Submit Date = \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}",
                         history.stdout), history.stdout
        versions = json.loads(run(env, "job", "history", "--json", "web").stdout)
        assert [v["Version"] for v in versions] == [1, 0]
        reverted = run(env, "job", "revert", "web", "0")
        assert reverted.returncode == 0, reverted.stderr
        inspected = json.loads(run(env, "job", "inspect", "web").stdout)
        assert (inspected["Job"]["Version"], inspected["Job"]["Priority"]) == (2, 50)
        old = json.loads(run(env, "job", "inspect", "--version", "1", "web").stdout)
        assert old["Job"]["Priority"] == 60
        assert run(env, "job", "revert", "web", "2").returncode == 2  # the current one
        assert run(env, "job", "inspect", "--version", "9", "web").returncode == 2
        # scale, eval, eval list/status
        scaled = run(env, "job", "scale", "web", "2")
        assert scaled.returncode == 0, scaled.stderr
        status = json.loads(run(env, "job", "status", "--json", "web").stdout)
        assert len([a for a in status["Allocations"] if a["DesiredStatus"] == "run"]) == 2
        assert run(env, "job", "scale", "web", "g", "x").returncode == 2
        forced = run(env, "job", "eval", "web")
        assert forced.returncode == 0, forced.stderr
        assert "complete" in forced.stdout
        evals = json.loads(run(env, "eval", "list", "--json", "--job", "web").stdout)
        assert {e["TriggeredBy"] for e in evals} == {"job-register", "job-scaling"}
        shown = run(env, "eval", "status", evals[-1]["ID"])
        assert shown.returncode == 0, shown.stderr
        assert f"ID                 = {evals[-1]['ID'][:8]}\n" in shown.stdout
        assert "Placed Allocations" in shown.stdout  # Nomad's formatEvalStatus sections
        wide = run(env, "eval", "status", "-verbose", evals[-1]["ID"][:6])
        assert f"ID                 = {evals[-1]['ID']}\n" in wide.stdout, wide
        assert run(env, "eval", "status", "ffffffff-0000").returncode == 1  # unknown: 404
        table = run(env, "eval", "list").stdout
        newest_first = sorted(evals, key=lambda e: -e["CreateIndex"])
        known = {e["ID"][:8] for e in evals}
        shown_ids = [i for i in re.findall(r"\b[0-9a-f]{8}\b", table) if i in known]
        assert shown_ids[:2] == [e["ID"][:8] for e in newest_first[:2]], table


def test_job_run_explains_a_placement_failure_and_exits_2(tmp_path: Path) -> None:
    with agent(tmp_path) as env:
        out = run(env, "job", "run", job_file(tmp_path, "huge.hcl", memory=1 << 30))
        assert out.returncode == 2, (out.stdout, out.stderr)
        assert "failed to place all allocations" in out.stdout
        assert 'Task Group "g" (failed to place 1 allocation)' in out.stdout
        assert 'Dimension "memory" exhausted on 1 nodes' in out.stdout
        assert "waiting for additional capacity" in out.stdout
        (blocked,) = json.loads(run(env, "eval", "list", "--json", "--status",
                                    "blocked").stdout)
        assert blocked["JobID"] == "web"

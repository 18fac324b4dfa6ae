"""Constraints as a user meets them, against a real `yurt agent` (layer 3): `yurt job plan`
and `yurt job run` explain a job the node does not fit with Nomad's "Constraint …: 1 nodes
excluded by filter", the evaluation carries Nomad's AllocMetric, a job that fits runs, and a
jobspec mistake in a constraint is refused with its file, line and Nomad's message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli_jobs import agent, run

pytestmark = pytest.mark.slow

JOB = '''job "web" {
  group "g" {
    count = 2
    %s
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 1
        memory = 10
      }
      %s
    }
  }
}'''


def write(tmp: Path, name: str, group_block: str = "", task_block: str = "") -> str:
    path = tmp / name
    path.write_text(JOB % (group_block, task_block))
    return str(path)


def test_job_plan_and_run_explain_a_constraint_the_node_fails(tmp_path: Path) -> None:
    windows = write(tmp_path, "windows.hcl", task_block='constraint {\n'
                    '  attribute = "${attr.kernel.name}"\n  value = "windows"\n}')
    reason = 'Constraint "${attr.kernel.name} = windows": 1 nodes excluded by filter'
    with agent(tmp_path) as env:
        plan = run(env, "job", "plan", windows)
        assert plan.returncode == 1, (plan.stdout, plan.stderr)  # Nomad's: would place
        assert "WARNING: Failed to place all allocations." in plan.stdout
        assert 'Task Group "g" (failed to place 2 allocations)' in plan.stdout
        assert reason in plan.stdout
        out = run(env, "job", "run", windows)
        assert out.returncode == 2, (out.stdout, out.stderr)
        assert reason in out.stdout
        assert "waiting for additional capacity" in out.stdout
        (ev,) = [e for e in json.loads(run(env, "eval", "list", "--json", "--job",
                                           "web").stdout) if e["TriggeredBy"] == "job-register"]
        metric = ev["FailedTGAllocs"]["g"]
        assert metric["ConstraintFiltered"] == {"${attr.kernel.name} = windows": 1}
        assert (metric["NodesEvaluated"], metric["NodesFiltered"]) == (1, 1)
        assert metric["CoalescedFailures"] == 1
        status = json.loads(run(env, "job", "status", "--json", "web").stdout)
        assert status["Allocations"] == []


def test_distinct_hosts_places_one_and_explains_the_other(tmp_path: Path) -> None:
    job = write(tmp_path, "distinct.hcl", group_block="constraint { distinct_hosts = true }")
    with agent(tmp_path) as env:
        out = run(env, "job", "run", job)
        assert out.returncode == 2, (out.stdout, out.stderr)
        assert 'Constraint "distinct_hosts": 1 nodes excluded by filter' in out.stdout
        assert 'Task Group "g" (failed to place 1 allocation)' in out.stdout
        status = json.loads(run(env, "job", "status", "--json", "web").stdout)
        assert len(status["Allocations"]) == 1


def test_a_job_whose_constraints_hold_runs(tmp_path: Path) -> None:
    job = write(tmp_path, "linux.hcl",
                group_block='constraint {\n  attribute = "${attr.kernel.name}"\n'
                            '  value = "linux"\n}\n'
                            'affinity {\n  attribute = "${node.datacenter}"\n'
                            '  value = "dc9"\n  weight = 50\n}',
                task_block='constraint {\n  attribute = "${attr.cpu.numcores}"\n'
                           '  operator = ">="\n  value = "1"\n}')
    with agent(tmp_path) as env:
        out = run(env, "job", "run", "--detach", job)
        assert out.returncode == 0, (out.stdout, out.stderr)
        inspect = json.loads(run(env, "job", "inspect", "web").stdout)["Job"]
        group = inspect["TaskGroups"][0]
        assert group["Constraints"] == [{"LTarget": "${attr.kernel.name}", "RTarget": "linux",
                                         "Operand": "="}]
        assert group["Affinities"] == [{"LTarget": "${node.datacenter}", "RTarget": "dc9",
                                        "Operand": "=", "Weight": 50}]
        assert group["Tasks"][0]["Constraints"][0]["Operand"] == ">="
        status = json.loads(run(env, "job", "status", "--json", "web").stdout)
        assert len(status["Allocations"]) == 2


def test_a_bad_constraint_is_refused_with_its_place_and_nomads_message(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.hcl", group_block='constraint {\n  attribute = "${attr.v}"\n'
                                                 '  version = ">= one"\n}')
    out = run({}, "job", "validate", bad)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"{bad}:4:5: job.web.group.g.constraint.0: Version constraint is invalid: " \
           "Malformed constraint: >= one" in out.stderr

"""HCL2 variables end to end: `yurt job validate|run|plan -var … -var-file …` against a real
`yurt agent`, NOMAD_VAR_* from the environment, and `/v1/jobs/parse` with `Variables`
(layers 2 and 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.agent_support import running_agent
from tests.test_cli_jobs import agent, run

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data"

JOB = '''variable "replicas" {
  type    = number
  default = 1
  validation {
    condition     = var.replicas <= 3
    error_message = "At most 3 replicas fit the lab."
  }
}
variable "run_for" {
  type = string
}
variable "labels" {
  type    = map(string)
  default = {}
}
locals {
  meta = merge({ owner = "lab" }, var.labels)
}
job "web" {
  meta = local.meta
  group "g" {
    count = var.replicas
    task "t" {
      driver = "mock_driver"
      config { run_for = var.run_for }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
'''


def test_job_commands_take_var_and_var_file(tmp_path: Path) -> None:
    job = tmp_path / "web.hcl"
    job.write_text(JOB)
    values = tmp_path / "lab.hcl"
    values.write_text('replicas = 3\nlabels = { room = "attic" }\n')
    values_json = tmp_path / "lab.json"
    values_json.write_text('{"run_for": "1h"}')
    with agent(tmp_path) as env:
        unset = run(env, "job", "validate", str(job))
        assert unset.returncode == 2
        assert f'{job}:9:1: variable.run_for: unset variable "run_for"' in unset.stderr
        too_many = run(env, "job", "validate", "-var", "run_for=1h", "-var", "replicas=5",
                       str(job))
        assert too_many.returncode == 2
        assert "At most 3 replicas fit the lab." in too_many.stderr
        undeclared = run(env, "job", "run", "-var", "run_for=1h", "-var", "color=red",
                         str(job))
        assert undeclared.returncode == 2
        assert 'undefined -var variable: "color"' in undeclared.stderr
        assert run(env, "job", "status", "web").returncode != 0  # nothing was registered

        ran = run(env, "job", "run", "--detach", "-var-file", str(values),
                  "-var-file", str(values_json), "-var=replicas=2", str(job))
        assert ran.returncode == 0, ran.stderr
        inspected = json.loads(run(env, "job", "inspect", "web").stdout)["Job"]
        assert inspected["TaskGroups"][0]["Count"] == 2  # -var wins over the var file
        assert inspected["Meta"] == {"owner": "lab", "room": "attic"}
        assert inspected["TaskGroups"][0]["Tasks"][0]["Config"] == {"run_for": "1h"}

        plan = run({**env, "NOMAD_VAR_run_for": "1h", "NOMAD_VAR_replicas": "3"},
                   "job", "plan", "-var-file", str(values), str(job))
        assert plan.returncode == 1, plan.stderr  # the var file's 3 wins over the env
        assert '  +/- Count: "2" => "3"' in plan.stdout, plan.stdout


def test_the_homelab_job_validates_with_values_from_the_environment(tmp_path: Path) -> None:
    with agent(tmp_path) as env:
        ok = run({**env, "NOMAD_VAR_replicas": "2"}, "job", "validate",
                 str(DATA / "homelab_vars.nomad.hcl"))
        assert ok.returncode == 0, ok.stderr
        assert "2 allocations" in ok.stdout, ok.stdout
        bad = run({**env, "NOMAD_VAR_replicas": "two"}, "job", "validate",
                  str(DATA / "homelab_vars.nomad.hcl"))
        assert bad.returncode == 2
        assert "var.replicas" in bad.stderr
        assert "number required" in bad.stderr


async def test_jobs_parse_takes_variables(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as a:
            parsed = await a.client.post("/v1/jobs/parse", json={
                "JobHCL": JOB, "Variables": 'run_for = "5m"\nreplicas = 3\nunknown = 1\n'})
            assert parsed.status_code == 200, parsed.text
            job = parsed.json()
            assert job["TaskGroups"][0]["Count"] == 3
            assert job["TaskGroups"][0]["Tasks"][0]["Config"] == {"run_for": "5m"}
            missing = await a.client.post("/v1/jobs/parse", json={"JobHCL": JOB})
            assert missing.status_code == 400
            assert 'unset variable "run_for"' in missing.text
            no_fs = await a.client.post("/v1/jobs/parse", json={
                "JobHCL": JOB.replace("var.run_for", 'file("/etc/passwd")'),
                "Variables": 'run_for = "1m"'})
            assert no_fs.status_code == 400
            assert "filesystem function disabled" in no_fs.text

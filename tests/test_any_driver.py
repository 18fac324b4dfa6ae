"""Any driver name parses, as in Nomad: `config` of a driver yurt lacks is opaque to the
jobspec, and placement says which nodes lack the driver (Nomad's "missing drivers" filter
reason, scheduler/feasible/feasible.go `DriverChecker`). Layer 0 for the jobspec, layer 2
for `yurt job validate|plan|run|status` against a real agent."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.agent_support import running_agent
from tests.cli_proc_support import yurt
from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import parse_job

DOCKER = '''job "web" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "nginx:1.25"
        ports = ["http"]
        args  = ["-g", "daemon off;"]
        mount {
          type   = "bind"
          source = "local"
          target = "/etc/nginx"
        }
      }
    }
  }
}
'''

EXEC = '''job "batch" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/echo"
        args    = ["hi"]
      }
    }
  }
}
'''


# ------------------------------------------------------------------------- layer 0


@pytest.mark.parametrize(("text", "driver"), [(DOCKER, "docker"), (EXEC, "exec")])
def test_drivers_yurt_lacks_parse_with_their_config_as_written(text: str,
                                                               driver: str) -> None:
    job = parse_job(text)
    task = job.task_groups[0].tasks[0]
    assert task.driver == driver
    assert task.config["args"] == (["-g", "daemon off;"] if driver == "docker" else ["hi"])


def test_config_of_drivers_yurt_has_is_still_checked() -> None:
    text = EXEC.replace('"exec"', '"raw_exec"').replace('command = "/bin/echo"', "")
    with pytest.raises(JobSpecError, match="raw_exec needs"):
        parse_job(text)


# ------------------------------------------------------------------------- layer 2


async def test_a_job_of_a_driver_yurt_lacks_validates_and_is_blocked_for_it(
        tmp_path: Path) -> None:
    path = tmp_path / "web.nomad.hcl"
    # podman: a driver yurt has no plugin for (docker's fingerprint would depend on whether
    # this host runs a Docker daemon at the default socket).
    path.write_text(DOCKER.replace('driver = "docker"', 'driver = "podman"'))
    exec_path = tmp_path / "batch.nomad.hcl"
    exec_path.write_text(EXEC)
    with trio.fail_after(40):
        async with running_agent(tmp_path / "data") as a:
            for file in (path, exec_path):
                valid = await yurt(a.address, "job", "validate", str(file))
                assert valid.returncode == 0, valid.stderr
                assert valid.stdout.decode().rstrip().endswith("— valid")
            plan = await yurt(a.address, "job", "plan", str(path))
            text = plan.stdout.decode()
            assert plan.returncode == 1, (text, plan.stderr)
            assert "- WARNING: Failed to place all allocations." in text
            assert ('    * Constraint "missing drivers": 1 nodes excluded by filter'
                    in text), text
            run = await yurt(a.address, "job", "run", str(path))
            assert run.returncode == 2, (run.stdout, run.stderr)
            assert ('      * Constraint "missing drivers": 1 nodes excluded by filter'
                    in run.stdout.decode())
            evals = (await a.client.get("/v1/job/web/evaluations")).json()
            failed = next(e for e in evals if e.get("FailedTGAllocs"))
            metric = failed["FailedTGAllocs"]["g"]
            assert metric["NodesEvaluated"] == 1
            assert metric["NodesFiltered"] == 1
            assert metric["ConstraintFiltered"] == {"missing drivers": 1}
            assert any(e["Status"] == "blocked" for e in evals)
            status = await yurt(a.address, "job", "status", "web")
            assert ('Placement Failure\nTask Group "g":\n'
                    '  * Constraint "missing drivers": 1 nodes excluded by filter'
                    in status.stdout.decode()), status.stdout

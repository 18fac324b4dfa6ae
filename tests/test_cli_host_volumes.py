"""Host volumes against a real `yurt agent` (layer 3): a job asking for a host volume parses,
and is refused at placement as Nomad's HostVolumeChecker refuses a node lacking the volume
(scheduler/feasible/feasible.go: "missing compatible host volumes"), since yurt's nodes have
none; the evaluation carries it as the filter reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli_jobs import agent, run

pytestmark = pytest.mark.slow

JOB = '''job "web" {
  group "g" {
    volume "data" {
      type      = "host"
      source    = "data"
      read_only = true
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      volume_mount {
        volume      = "data"
        destination = "/srv"
      }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}'''


def test_a_host_volume_the_node_lacks_is_refused_at_placement(tmp_path: Path) -> None:
    path = tmp_path / "web.hcl"
    path.write_text(JOB)
    reason = 'Constraint "missing compatible host volumes": 1 nodes excluded by filter'
    with agent(tmp_path) as env:
        assert run(env, "job", "validate", str(path)).returncode == 0
        out = run(env, "job", "run", str(path))
        assert out.returncode == 2, (out.stdout, out.stderr)
        assert reason in out.stdout
        (ev,) = [e for e in json.loads(run(env, "eval", "list", "--json", "--job",
                                           "web").stdout) if e["TriggeredBy"] == "job-register"]
        metric = ev["FailedTGAllocs"]["g"]
        assert metric["ConstraintFiltered"] == {"missing compatible host volumes": 1}
        group = json.loads(run(env, "job", "inspect", "web").stdout)["Job"]["TaskGroups"][0]
        assert group["Volumes"]["data"]["Source"] == "data"
        assert group["Tasks"][0]["VolumeMounts"][0]["Destination"] == "/srv"

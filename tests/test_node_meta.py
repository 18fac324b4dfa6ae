"""The node's `meta` and `node_class` from the agent's config file, against a real `yurt
agent` (layer 2): shown on /v1/node/:id and /v1/nodes, and used by placement through
`${meta.<key>}` and `${node.class}` constraints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest

from tests.test_cli_jobs import YURT, free_port, run
from tests.token_support import AUTH

pytestmark = pytest.mark.slow

CONFIG = '''node_class = "gpu"

[meta]
rack = "r1"
"owner.team" = "infra"
'''

JOB = '''job "web" {
  group "g" {
    count = 2
    constraint {
      attribute = "${meta.rack}"
      value     = "%s"
    }
    constraint {
      attribute = "${node.class}"
      value     = "gpu"
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}'''


@contextmanager
def agent(tmp: Path) -> Iterator[dict[str, str]]:
    config = tmp / "agent.toml"
    config.write_text(CONFIG)
    port = free_port()
    env = {**os.environ, "YURT_ADDR": f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen([YURT, "agent", "--config", str(config), "--data-dir",
                             str(tmp / "data"), "--port", str(port)],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on" in line, line
        yield env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_meta_and_class_reach_the_node_and_its_constraints(tmp_path: Path) -> None:
    with agent(tmp_path) as env:
        address = env["YURT_ADDR"]
        (stub,) = httpx2.get(f"{address}/v1/nodes", headers=AUTH, timeout=10).json()
        assert stub["NodeClass"] == "gpu"
        node = httpx2.get(f"{address}/v1/node/{stub['ID']}", headers=AUTH, timeout=10).json()
        assert node["NodeClass"] == "gpu"
        assert node["Meta"] == {"rack": "r1", "owner.team": "infra"}
        fits = tmp_path / "fits.hcl"
        fits.write_text(JOB % "r1")
        out = run(env, "job", "run", "--detach", str(fits))
        assert out.returncode == 0, (out.stdout, out.stderr)
        status = json.loads(run(env, "job", "status", "--json", "web").stdout)
        assert len(status["Allocations"]) == 2
        other = tmp_path / "other.hcl"
        other.write_text((JOB % "r2").replace('job "web"', 'job "other"'))
        out = run(env, "job", "run", str(other))
        assert out.returncode == 2, (out.stdout, out.stderr)
        assert 'Constraint "${meta.rack} = r2": 1 nodes excluded by filter' in out.stdout

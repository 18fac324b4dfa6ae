"""Static host volumes against a real `yurt agent` (layer 3): an agent whose config offers
`[host_volume.data]` (read-only) registers it as the node's `HostVolumes` (/v1/node/:id,
`node status -verbose`), places a job mounting it read-only, and refuses at placement, as
Nomad's HostVolumeChecker (scheduler/feasible/feasible.go), a job asking for a volume the
node lacks or asking read-write of the read-only one: `job run` exits 2 naming
"missing compatible host volumes", the evaluation's metrics count it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_agent_e2e import YURT, free_port
from tests.test_cli_jobs import run

pytestmark = pytest.mark.slow

JOB = '''job "%s" {
  group "g" {
    volume "v" {
      type      = "host"
      source    = "%s"
      read_only = %s
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
      volume_mount {
        volume      = "v"
        destination = "/srv"
        read_only   = %s
      }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}'''


@contextmanager
def agent(tmp: Path, config: Path) -> Iterator[dict[str, str]]:
    port = free_port()
    env = {**os.environ, "YURT_ADDR": f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen([YURT, "agent", "--data-dir", str(tmp / "data"), "--config",
                             str(config), "--port", str(port)],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on" in line, line
        yield env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _job(tmp: Path, name: str, source: str, read_only: bool) -> str:
    path = tmp / f"{name}.hcl"
    flag = str(read_only).lower()
    path.write_text(JOB % (name, source, flag, flag))
    return str(path)


def test_an_agents_host_volume_is_registered_and_honoured_at_placement(
        tmp_path: Path) -> None:
    volume = tmp_path / "shared"
    volume.mkdir()
    config = tmp_path / "agent.toml"
    config.write_text(f'[host_volume.data]\npath = "{volume}"\nread_only = true\n')
    with agent(tmp_path, config) as env:
        (stub,) = json.loads(run(env, "node", "status", "-json").stdout)
        token = (tmp_path / "data" / "server" / "bootstrap.token").read_text().strip()
        request = urllib.request.Request(f"{env['YURT_ADDR']}/v1/node/{stub['ID']}",
                                         headers={"X-Nomad-Token": token})
        with urllib.request.urlopen(request, timeout=10) as reply:
            node = json.load(reply)
        assert node["HostVolumes"] == {
            "data": {"Name": "data", "Path": str(volume), "ReadOnly": True, "ID": ""}}
        verbose = run(env, "node", "status", "-verbose", stub["ID"]).stdout
        section = verbose.split("Host Volumes\n", 1)[1].splitlines()
        assert section[0].split() == ["Name", "ReadOnly", "Source"]
        assert section[1].split() == ["data", "true", str(volume)]

        placed = run(env, "job", "run", _job(tmp_path, "reader", "data", True))
        assert placed.returncode == 0, (placed.stdout, placed.stderr)
        (alloc,) = json.loads(run(env, "job", "allocs", "-json", "reader").stdout)
        assert alloc["NodeID"] == stub["ID"]

        reason = 'Constraint "missing compatible host volumes": 1 nodes excluded by filter'
        for name, source, read_only in (("missing", "nope", True),
                                         ("writer", "data", False)):
            out = run(env, "job", "run", _job(tmp_path, name, source, read_only))
            assert out.returncode == 2, (name, out.stdout, out.stderr)
            assert reason in out.stdout, out.stdout
            (ev,) = [e for e in json.loads(run(env, "eval", "list", "--json", "--job",
                                               name).stdout)
                     if e["TriggeredBy"] == "job-register"]
            assert ev["FailedTGAllocs"]["g"]["ConstraintFiltered"] == {
                "missing compatible host volumes": 1}

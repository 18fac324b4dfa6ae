"""`yurt volume create|register|status|delete` against a real `yurt agent` (layer 3), as
Nomad's volume verbs (command/volume_*_host.go): a spec file made by the `mkdir` plugin under
`-host-volumes-dir`, its status as Nomad's tables, `-json` and `-t`, prefix IDs and names; a
bad spec refused with its file and line; the volume ready again after `kill -9` of the agent
and a restart; deleted by name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.test_agent_e2e import YURT, free_port
from tests.test_cli_jobs import run

pytestmark = pytest.mark.slow

SPEC = '''type      = "host"
name      = "%s"
plugin_id = "mkdir"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

parameters {
  mode = "0750"
}
'''


@contextmanager
def agent(tmp: Path, port: int) -> Iterator[tuple[dict[str, str], subprocess.Popen[str]]]:
    env = {**os.environ, "YURT_ADDR": f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen([YURT, "agent", "--data-dir", str(tmp / "data"), "--port",
                             str(port), "-host-volumes-dir", str(tmp / "volumes")],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on" in line, line
        yield env, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _spec(tmp: Path, name: str, text: str = SPEC) -> str:
    path = tmp / f"{name}.hcl"
    path.write_text(text % name if "%s" in text else text)
    return str(path)


def test_volume_verbs_and_a_restart(tmp_path: Path) -> None:
    port = free_port()
    with agent(tmp_path, port) as (env, proc):
        made = run(env, "volume", "create", _spec(tmp_path, "data"))
        assert made.returncode == 0, made.stderr
        assert made.stdout.startswith("Created host volume data with ID ")
        vol_id = made.stdout.split()[-1]
        host = tmp_path / "volumes" / vol_id
        assert host.is_dir()
        assert oct(host.stat().st_mode & 0o777) == "0o750"

        listed = run(env, "volume", "status", "-type", "host")
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0] == "Dynamic Host Volumes"
        assert lines[1].split() == ["ID", "Name", "Namespace", "Plugin", "ID", "Node", "ID",
                                    "Node", "Pool", "State"]
        assert lines[2].split()[:4] == [vol_id[:8], "data", "default", "mkdir"]
        assert lines[2].split()[-1] == "ready"

        one = run(env, "volume", "status", vol_id[:6])
        assert one.returncode == 0, one.stderr
        assert f"ID        = {vol_id}" in one.stdout
        assert f"Host Path = {host}" in one.stdout
        assert "single-node-writer  file-system" in one.stdout
        assert one.stdout.rstrip().endswith("No allocations placed")
        as_json = json.loads(run(env, "volume", "status", "-json", "data").stdout)
        assert (as_json["ID"], as_json["State"]) == (vol_id, "ready")
        templated = run(env, "volume", "status", "-t", "{{.Name}}:{{.State}}", vol_id)
        assert templated.stdout == "data:ready"

        both = run(env, "volume", "status")
        assert both.stdout.splitlines()[0] == "Dynamic Host Volumes"
        assert both.stdout.splitlines()[-2:] == ["", "Container Storage Interface"]
        assert both.stderr.strip() == "No CSI volumes"

        # -id updates the volume in place: same ID, same directory, state ready again.
        updated = run(env, "volume", "create", "-id", vol_id[:5], _spec(tmp_path, "data"))
        assert updated.returncode == 0, updated.stderr
        assert updated.stdout.strip() == f"Created host volume data with ID {vol_id}"
        assert json.loads(run(env, "volume", "status", "-json", vol_id).stdout)[
            "ModifyIndex"] > as_json["ModifyIndex"]

        bad = run(env, "volume", "create", _spec(tmp_path, "bad", 'type = "host"\n'
                                                 'name = "x"\nplugin-id = "mkdir"\n'))
        assert bad.returncode == 2
        assert f'{tmp_path}/bad.hcl:3: unknown key "plugin-id"' in bad.stderr
        taken = run(env, "volume", "create", _spec(tmp_path, "data"))
        assert taken.returncode == 1
        assert "Error creating volume: could not place volume \"data\"" in taken.stderr
        nfs = run(env, "volume", "create", _spec(tmp_path, "other", SPEC.replace(
            '"mkdir"', '"nfs"')))
        assert nfs.returncode == 1
        assert "1 nodes were infeasible" in nfs.stderr

        existing = tmp_path / "existing"
        existing.mkdir()
        node_id = json.loads(run(env, "node", "status", "-json").stdout)[0]["ID"]
        registered = run(env, "volume", "register", _spec(tmp_path, "shared", (
            f'type = "host"\nname = "shared"\nnode_id = "{node_id}"\n'
            f'host_path = "{existing}"\n')))
        assert registered.returncode == 0, registered.stderr
        assert registered.stdout.startswith("Registered host volume shared with ID ")
        unnamed = run(env, "volume", "register", _spec(tmp_path, "nowhere", (
            'type = "host"\nname = "nowhere"\n')))
        assert (unnamed.returncode, unnamed.stderr.strip()) == (
            1, "yurt: Node ID is required for registering")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    with agent(tmp_path, port) as (env, _):
        again = json.loads(run(env, "volume", "status", "-json", vol_id).stdout)
        assert (again["State"], again["HostPath"]) == ("ready", str(host))
        gone = run(env, "volume", "delete", "data")
        assert gone.returncode == 0, gone.stderr
        assert gone.stdout.strip() == f'Successfully deleted volume "{vol_id}"!'
        assert not host.exists()
        assert run(env, "volume", "delete", "shared").returncode == 0
        assert existing.is_dir()  # a registered volume's directory stays
        empty = run(env, "volume", "status", "-type", "host")
        assert (empty.stdout.strip(), empty.stderr.strip()) == (
            "Dynamic Host Volumes", "No dynamic host volumes")
        missing = run(env, "volume", "delete", "nope")
        assert missing.returncode == 1
        assert ('Could not find existing host volume to delete: no volumes with prefix or ID '
                '"nope" found') in missing.stderr

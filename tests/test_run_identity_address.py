"""`yurt run` (layer 3: the real command, a raw_exec task): a task's workload identity and
the address it is given, as under `yurt agent -dev`.

`identity { env = true }` gave an empty `NOMAD_TOKEN` under `yurt run`: its wiring had no
signer, so the identity hook was never added (runtime/agent/foreground.py `_signer`). The
node's address is loopback (`NOMAD_IP_<label>`), as Nomad's `-dev` has it.
"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.browser_support import YURT
from yurt.runtime.server import workload_keys

pytestmark = pytest.mark.slow

JOB = """
job "ident" {
  type = "batch"
  group "g" {
    network {
      port "http" {}
    }
    task "t" {
      driver = "raw_exec"
      %s
      config {
        command = "/bin/sh"
        args    = ["-c", "echo token=$NOMAD_TOKEN; echo ip=$NOMAD_IP_http"]
      }
    }
  }
}
"""


def b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def run(tmp_path: Path, identity: str) -> tuple[dict[str, str], Path]:
    """Run the job with `yurt run`; what its task printed (KEY=VALUE lines), and the data
    dir."""
    job = tmp_path / "ident.nomad.hcl"
    job.write_text(JOB % identity)
    data = tmp_path / "data"
    done = subprocess.run([YURT, "run", str(job), "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    said = dict(line.split("| ", 1)[1].split("=", 1) for line in done.stdout.splitlines()
                if line.startswith("t | "))
    return said, data


def test_identity_env_gives_the_task_a_token_signed_by_the_runs_key(tmp_path: Path) -> None:
    said, data = run(tmp_path, "identity {\n        env = true\n      }")
    assert said["ip"] == "127.0.0.1"
    header, claims, signature = said["token"].split(".")
    payload: dict[str, Any] = json.loads(b64(claims))
    assert (payload["nomad_job_id"], payload["nomad_task"]) == ("ident", "t")
    assert payload["sub"] == "global:default:ident:g:t:default"
    (key,) = workload_keys.load_or_create(data / "identity").jwks()["keys"]
    assert json.loads(b64(header))["kid"] == key["kid"]
    public = rsa.RSAPublicNumbers(int.from_bytes(b64(key["e"]), "big"),
                                  int.from_bytes(b64(key["n"]), "big")).public_key()
    public.verify(b64(signature), f"{header}.{claims}".encode(), padding.PKCS1v15(),
                  hashes.SHA256())  # raises if the token is not the key's


def test_a_job_without_exposed_identities_makes_no_key(tmp_path: Path) -> None:
    said, data = run(tmp_path, "")
    assert said == {"token": "", "ip": "127.0.0.1"}
    assert not (data / "identity").exists()

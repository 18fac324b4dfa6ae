"""A default `yurt agent` against a local user of the same machine (layer 3: a real agent
process as root, the attacker uid 4242 with no groups in a child process, real sockets).

Before ACLs, uid 4242 posted a raw_exec job to 127.0.0.1:4646 and its task ran as root. Now the
agent has ACLs on by default and bootstraps itself, the management token readable by root
alone: the local user can read nothing and change nothing, while root's CLI works with no
setup at all (it finds the token in the default data dir).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from tests.cli_proc_support import YURT
from tests.test_agent_e2e import free_port
from tests.token_support import bootstrap_token, without_suite_token

ATTACKER = 4242

#: Run by uid 4242: every request a local user could make, and what came back.
_ATTACK = r"""
import errno, json, sys, urllib.request, urllib.error
base, job, token_path = sys.argv[1], sys.argv[2], sys.argv[3]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
found = {}
def ask(method, path, body=None):
    req = urllib.request.Request(base + path, data=body, method=method)
    try:
        with opener.open(req, timeout=20) as r:
            found[f"{method} {path}"] = [r.status, r.read(200).decode()]
    except urllib.error.HTTPError as e:
        found[f"{method} {path}"] = [e.code, e.read(200).decode()]
for method, path, body in [
        ("GET", "/v1/jobs", None), ("POST", "/v1/jobs", job.encode()),
        ("PUT", "/v1/job/owned", job.encode()), ("GET", "/v1/allocations", None),
        ("GET", "/v1/nodes", None), ("GET", "/v1/agent/self", None),
        ("GET", "/v1/vars", None), ("GET", "/v1/namespaces", None),
        ("GET", "/v1/event/stream", None), ("PUT", "/v1/acl/bootstrap", b"{}"),
        ("GET", "/v1/acl/tokens", None), ("GET", "/v1/acl/policies", None),
        ("PUT", "/v1/acl/token/onetime", b"{}"), ("PUT", "/v1/system/gc", b""),
        ("GET", "/v1/client/gc", None), ("GET", "/v1/agent/health", None)]:
    ask(method, path, body)
try:
    open(token_path).read()
    found["read token"] = "done"
except OSError as e:
    found["read token"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(found))
"""


def _job(marker: Path) -> str:
    return json.dumps({"Job": {"ID": "owned", "Type": "batch", "TaskGroups": [{
        "Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {
            "command": "/bin/sh", "args": ["-c", f"id > {marker}"]}}]}]}})


@contextmanager
def default_agent(home: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`yurt agent --port P` as root with nothing else: its default data dir (under
    `$XDG_DATA_HOME`, here `home`), ACLs as they come. The CLI environment of root."""
    port = free_port()
    env = {**without_suite_token(), "XDG_DATA_HOME": str(home)}
    process = subprocess.Popen([YURT, "agent", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        assert "listening on" in process.stderr.readline()
        bootstrap_token(home / "yurt")  # written before the agent is ready
        yield f"http://127.0.0.1:{port}", {**env, "YURT_ADDR": f"http://127.0.0.1:{port}"}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def test_a_local_user_can_read_nothing_and_change_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "owned-by"
    tmp_path.chmod(0o777)  # the attacker's task could write there, were it ever run
    with default_agent(home) as (address, root_env):
        token_file = home / "yurt" / "server" / "bootstrap.token"
        ran = subprocess.run(
            ["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups",
             sys.executable, "-I", "-c", _ATTACK, address, _job(marker), str(token_file)],
            capture_output=True, text=True, timeout=120, check=False)
        assert ran.returncode == 0, ran.stderr
        found = json.loads(ran.stdout)
        assert found.pop("GET /v1/agent/health")[0] == 200  # public, as Nomad's
        assert found.pop("read token") == "EACCES"
        # The bootstrap was done by the agent's first start: nobody else gets one.
        status, text = found.pop("PUT /v1/acl/bootstrap")
        assert status == 400
        assert text.startswith("ACL bootstrap already done"), text
        # Lists Nomad filters by what the token may see: nothing, for the anonymous token.
        for listed in ("GET /v1/namespaces", "GET /v1/vars", "GET /v1/acl/policies"):
            assert found.pop(listed) in ([200, "[]"], [403, "Permission denied"]), listed
        assert found == {key: [403, "Permission denied"] for key in found}, found

        # The same local user with the CLI: refused in words, no traceback.
        cli = subprocess.run(
            ["setpriv", f"--reuid={ATTACKER}", f"--regid={ATTACKER}", "--clear-groups",
             sys.executable, YURT, "tasks"], capture_output=True, text=True, timeout=60,
            check=False,
            env={"PATH": os.environ["PATH"], "YURT_ADDR": address, "HOME": "/nonexistent"})
        assert cli.returncode != 0
        assert "permission denied" in cli.stderr.lower()
        assert "Traceback" not in cli.stderr

        # Root's CLI, with no token anywhere in its environment, finds the agent's.
        status = subprocess.run([YURT, "node", "status", "--json"], capture_output=True,
                                text=True, timeout=60, check=False, env=root_env)
        assert status.returncode == 0, status.stderr
        management = token_file.read_text().strip()
        with httpx2.Client(base_url=address, headers={"X-Nomad-Token": management},
                           timeout=20) as api:
            assert api.get("/v1/job/owned").status_code == 404  # never registered
    assert not marker.exists()  # and so never ran

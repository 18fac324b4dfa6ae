"""Where the token lives (layer 3: the agent and the CLI as processes): never on a command line
(every user reads /proc/PID/cmdline), never in a query string; in a file or the environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.test_agent_e2e import YURT, free_port
from tests.token_support import stranger_env

pytestmark = pytest.mark.slow


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([YURT, *args], capture_output=True, text=True, timeout=60,
                          check=False, env=env)


def test_token_on_the_command_line_is_refused(tmp_path: Path) -> None:
    out = run("agent", "--data-dir", str(tmp_path), "--port", "0", "--token", "s3cret")
    assert out.returncode == 2
    assert "--token-file" in out.stderr
    assert "YURT_AGENT_TOKEN" in out.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    out = run("agent", "--data-dir", str(tmp_path), "--token-file", str(empty))
    assert (out.returncode, "empty" in out.stderr) == (2, True)
    out = run("agent", "--data-dir", str(tmp_path), "--token-file", str(tmp_path / "none"))
    assert (out.returncode, "cannot read the token file" in out.stderr) == (2, True)


def test_unknown_signal_names_are_refused_before_the_agent_is_asked() -> None:
    env = {**os.environ, "YURT_ADDR": f"http://127.0.0.1:{free_port()}"}  # nobody listens
    out = run("alloc", "signal", "-s", "BOGUS", "abcd", env=env)
    assert out.returncode == 2
    assert 'unknown signal "BOGUS"' in out.stderr


@pytest.mark.parametrize("source", ["file", "environment"])
def test_agent_and_client_take_the_token_from_a_file_or_the_environment(
        tmp_path: Path, source: str) -> None:
    import httpx2

    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    args = [YURT, "agent", "--data-dir", str(tmp_path / "data"), "--port", str(port)]
    env = dict(os.environ)
    if source == "file":
        args += ["--token-file", str(token_file)]
    else:
        env["YURT_AGENT_TOKEN"] = "s3cret"
    agent = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert agent.stderr is not None
        assert "listening on" in agent.stderr.readline()
        cmdline = Path(f"/proc/{agent.pid}/cmdline").read_bytes()
        assert b"s3cret" not in cmdline
        environ = Path(f"/proc/{agent.pid}/environ").read_bytes()
        assert b"s3cret" not in environ or source == "environment"
        addr = f"http://127.0.0.1:{port}"
        assert httpx2.get(f"{addr}/v1/jobs").status_code == 403
        assert httpx2.get(f"{addr}/v1/jobs", params={"token": "s3cret"}).status_code == 403
        assert httpx2.get(f"{addr}/v1/jobs",
                          headers={"X-Nomad-Token": "s3cret"}).status_code == 200

        client_env = stranger_env({**os.environ, "YURT_ADDR": addr})  # no suite token
        denied = run("job", "status", env=client_env)
        assert denied.returncode == 1
        assert "permission denied" in denied.stderr
        by_file = run("job", "status", "--json", env={**client_env,
                                                      "YURT_TOKEN_FILE": str(token_file)})
        assert (by_file.returncode, json.loads(by_file.stdout)) == (0, []), by_file.stderr
        # The websocket carries the token in its header too.
        events = subprocess.Popen([YURT, "events", "--index", "0", "--json"],
                                  stdout=subprocess.PIPE, text=True,
                                  env={**client_env, "YURT_TOKEN": "s3cret"})
        assert events.stdout is not None
        record = json.loads(events.stdout.readline())
        events.terminate()
        events.wait(timeout=10)
        assert record["Events"][0]["Topic"] == "Node"
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)

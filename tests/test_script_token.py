"""scripts/benchlib/agent_token.py: how the scripts that start `yurt agent` get in (layer 0 for
the environment and header helpers, layer 3 against real agents).

Every benchmark, the torture and the python-nomad harness rely on it: a token exported by the
caller (the suite exports its own, tests/token_support.py) must not reach the agent a script
starts, the script must wait for and send the token that agent's first start wrote, and an
agent whose ACLs are off must be reached without one rather than waited on until a timeout.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.cli_proc_support import YURT
from tests.test_agent_e2e import free_port
from tests.token_support import SUITE_TOKEN

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from benchlib.agent_token import (
    agent_env,
    cli_env,
    header_line,
    headers,
    read_token,
    token_path,
    wait_token,
)

ALL_TOKEN_VARIABLES = {"YURT_AGENT_TOKEN": SUITE_TOKEN, "YURT_TOKEN": SUITE_TOKEN,
                       "YURT_TOKEN_FILE": "/elsewhere", "NOMAD_TOKEN": SUITE_TOKEN}


def test_no_token_variable_of_the_caller_reaches_a_started_agent_or_command(
        tmp_path: Path) -> None:
    caller = {"PATH": "/bin", "YURT_ADDR": "http://127.0.0.1:1", **ALL_TOKEN_VARIABLES}
    assert agent_env(caller) == {"PATH": "/bin", "YURT_ADDR": "http://127.0.0.1:1"}
    assert cli_env(tmp_path, caller) == {
        "PATH": "/bin", "YURT_ADDR": "http://127.0.0.1:1",
        "YURT_TOKEN_FILE": str(tmp_path / "server" / "bootstrap.token")}


def test_the_token_travels_only_as_the_nomad_header() -> None:
    assert headers("s3cret") == {"X-Nomad-Token": "s3cret"}
    assert header_line("s3cret") == b"X-Nomad-Token: s3cret\r\n"
    assert headers("") == {}
    assert header_line("") == b""


def test_a_token_file_counts_once_it_has_a_secret(tmp_path: Path) -> None:
    assert read_token(tmp_path) is None
    token_path(tmp_path).parent.mkdir()
    token_path(tmp_path).write_text("\n")
    assert read_token(tmp_path) is None
    token_path(tmp_path).write_text("abc\n")
    assert read_token(tmp_path) == "abc"


@contextmanager
def agent(data: Path, *extra: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A `yurt agent` started as the scripts start it, under this suite's token variables."""
    port = free_port()
    env = agent_env()
    assert "YURT_AGENT_TOKEN" not in env
    process = subprocess.Popen([YURT, "agent", "--data-dir", str(data), "--port", str(port),
                                *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env, start_new_session=True)
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=60)


def status(base: str, token: str) -> int:
    request = urllib.request.Request(base + "/v1/jobs", headers=headers(token))
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.slow
def test_a_script_gets_the_token_the_first_start_wrote_and_nothing_else_admits(
        tmp_path: Path) -> None:
    with agent(tmp_path / "data") as (base, process):
        token = wait_token(base, tmp_path / "data", timeout=60, exited=process.poll)
        assert token not in ("", SUITE_TOKEN)
        assert status(base, token) == 200
        assert status(base, "") == 403
        assert status(base, SUITE_TOKEN) == 403  # the caller's token never reached it


@pytest.mark.slow
def test_an_agent_with_acls_off_is_reached_without_a_token(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[acl]\nenabled = false\n")
    with agent(tmp_path / "data", "--config", str(config)) as (base, process):
        assert wait_token(base, tmp_path / "data", timeout=60, exited=process.poll) == ""
        assert status(base, "") == 200
    assert read_token(tmp_path / "data") is None


@pytest.mark.slow
def test_an_agent_that_exits_ends_the_wait_at_once(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[acl]\nbootstrap = \"sometimes\"\n")
    with (agent(tmp_path / "data", "--config", str(config)) as (base, process),
          pytest.raises(RuntimeError, match="the agent exited")):
        wait_token(base, tmp_path / "data", timeout=60, exited=process.poll)

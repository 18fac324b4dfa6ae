"""`yurt server`'s options: what can never work exits 2 with one line; an etcd that does not
answer exits 1 and says so."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.cli_proc_support import YURT
from yurt.runtime.cli import cli
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE
from yurt.runtime.server.cluster.etcd.process import free_port


@pytest.mark.parametrize(("args", "said"), [
    (["--etcd", "foo"], "--etcd 'foo' is not a URL"),
    (["--etcd", ","], "--etcd needs at least one etcd URL"),
    (["--etcd", "http://127.0.0.1:2379", "--bind", "0.0.0.0"],
     "refusing to bind beyond loopback without a token"),
    (["--etcd", "http://127.0.0.1:2379", "--bind", "0.0.0.0", "--token-file", "{token}"],
     "needs --advertise"),
    (["--etcd", "http://127.0.0.1:2379", "--advertise", "10.0.0.1:4646"],
     "--advertise '10.0.0.1:4646' is not a URL"),
    (["--etcd", "http://127.0.0.1:2379", "--prefix", "yurt"], "must start and end with /"),
    (["--etcd", "http://127.0.0.1:2379", "--port", "70000"], "is not a TCP port"),
    (["--etcd", "http://127.0.0.1:2379", "--heartbeat-grace", "0"],
     "--heartbeat-grace must be above 0"),
    (["--etcd", "http://127.0.0.1:2379", "--leader-ttl", "0"], "--leader-ttl must be at least"),
    (["--etcd", "http://127.0.0.1:2379", "--allowed-host", "http://yurt.example.com"],
     "--allowed-host 'http://yurt.example.com' is a URL; give the host name alone"),
])
def test_options_that_can_never_work_exit_2(args: list[str], said: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("YURT_AGENT_TOKEN", raising=False)  # the suite's (conftest.py)
    token = tmp_path / "token"
    token.write_text("t\n")
    result = CliRunner().invoke(cli, ["server", "--data-dir", str(tmp_path),
                                      *(arg.format(token=token) for arg in args)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert said in result.output
    assert "Traceback" not in result.output


def test_no_etcd_option_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["server"])
    assert result.exit_code == EXIT_USAGE
    assert "--etcd" in result.output


def test_an_etcd_that_does_not_answer_exits_1(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    result = subprocess.run([YURT, "server", "--etcd", dead, "--port", "0", "--data-dir",
                             str(tmp_path)], capture_output=True, timeout=60, check=False)
    assert result.returncode == EXIT_FAILED
    err = result.stderr.decode()
    assert f"cannot start the server: no etcd member answered ({dead})" in err
    assert "Traceback" not in err

"""No command takes a secret on its command line (layers 0 and 3).

The attack: `yurt server --token T` was accepted, and every local user reads a process's
command line in /proc/PID/cmdline for as long as it runs. Every command of the tree now refuses
`--token` (and Nomad's `-token`) with exit 2 and says where the token goes instead
(runtime/cli/secret_options.py); the daemons read it from `--token-file` or
`$YURT_AGENT_TOKEN`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.cli_proc_support import YURT
from yurt.runtime.cli import cli
from yurt.runtime.cli.flags import nomad_spelling
from yurt.runtime.cli.lazy import subcommands
from yurt.runtime.cli.secret_options import refuse_secret_options
from yurt.runtime.errors import EXIT_USAGE
from yurt.runtime.server.cluster.etcd.process import free_port

DAEMONS = {("agent",), ("server",), ("nodesim",)}


def _paths(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if isinstance(command, click.Group):
        for name, sub in sorted(subcommands(command).items()):
            yield from _paths(sub, (*path, name))


EVERY_COMMAND = list(_paths(cli))


@pytest.mark.parametrize("path", EVERY_COMMAND, ids=lambda p: " ".join(p) or "yurt")
@pytest.mark.parametrize("spelling", ["--token", "-token", "--token=", "-token="])
def test_every_command_refuses_a_token_argument(path: tuple[str, ...], spelling: str) -> None:
    given = [f"{spelling}s3cret"] if spelling.endswith("=") else [spelling, "s3cret"]
    result = CliRunner().invoke(cli, nomad_spelling(cli, [*path, *given]))
    assert result.exit_code == EXIT_USAGE, result.output
    assert "token is refused: every user can read a command line in /proc" in result.output
    sources = ("--token-file FILE or $YURT_AGENT_TOKEN" if path in DAEMONS
               else "$YURT_TOKEN or $YURT_TOKEN_FILE")
    assert sources in result.output
    assert "s3cret" not in result.output
    assert "Traceback" not in result.output


def test_alloc_exec_refuses_nomads_token_flag_among_its_own() -> None:
    for given in (["-token", "s3cret"], ["-token=s3cret"], ["--token", "s3cret"]):
        result = CliRunner().invoke(cli, ["alloc", "exec", *given, "abcd", "/bin/true"])
        assert result.exit_code == EXIT_USAGE, result.output
        assert "token is refused" in result.output
        assert "$YURT_TOKEN or $YURT_TOKEN_FILE" in result.output
    # After ALLOC, a `-token` is the command's own argument (exec passes it through).
    from yurt.runtime.cli.exec import parse_flags

    assert parse_flags(["abcd", "app", "-token", "x"])[1] == ["abcd", "app", "-token", "x"]


def test_an_option_that_only_ends_in_token_is_not_refused() -> None:
    """`job dispatch -idempotency-token` names a request, not a secret (its parameter is also
    called `token`: the refusal must not take its value for its own)."""
    result = CliRunner().invoke(cli, nomad_spelling(cli, [
        "job", "dispatch", "-idempotency-token", "t1", "batch"]),
        env={"YURT_ADDR": f"http://127.0.0.1:{free_port()}"})  # nobody listens
    assert "refused" not in result.output
    assert "cannot reach the agent" in result.output


def test_a_command_cannot_declare_a_secret_option() -> None:
    @click.group()
    def root() -> None: ...

    @root.command()
    @click.option("--token")
    def leaky(token: str) -> None: ...

    with pytest.raises(TypeError, match="leaky: --token carries a secret"):
        refuse_secret_options(root)


@pytest.mark.slow
@pytest.mark.parametrize("daemon", ["server", "agent"])
def test_a_daemon_given_a_token_argument_exits_2_and_never_starts(daemon: str, tmp_path: Path
                                                                  ) -> None:
    args = ["--etcd", f"http://127.0.0.1:{free_port()}"] if daemon == "server" else []
    env = {k: v for k, v in os.environ.items() if k != "YURT_AGENT_TOKEN"}
    out = subprocess.run([YURT, daemon, *args, "--port", "0", "--data-dir", str(tmp_path),
                          "--token", "s3cret"], capture_output=True, text=True, timeout=60,
                         check=False, env=env)
    assert out.returncode == EXIT_USAGE, out.stderr
    assert out.stderr == ("yurt: --token is refused: every user can read a command line in "
                          "/proc; use --token-file FILE or $YURT_AGENT_TOKEN\n")
    assert out.stdout == ""  # no log line: nothing started
    assert list(tmp_path.iterdir()) == []  # not even the data directory was touched


def test_the_server_reads_its_token_from_a_file_or_the_environment(tmp_path: Path) -> None:
    """A non-loopback bind needs a token: given either way, the next check is reached."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    base = ["server", "--etcd", "http://127.0.0.1:2379", "--data-dir", str(tmp_path),
            "--bind", "0.0.0.0"]
    for args, env in (([*base, "--token-file", str(token)], {}),
                      (base, {"YURT_AGENT_TOKEN": "s3cret"})):
        result = CliRunner().invoke(cli, args, env=env)
        assert result.exit_code == EXIT_USAGE, result.output
        assert "needs --advertise" in result.output
    result = CliRunner().invoke(cli, base, env={"YURT_AGENT_TOKEN": ""})
    assert "refusing to bind beyond loopback without a token (--token-file FILE or " \
           "$YURT_AGENT_TOKEN)" in result.output

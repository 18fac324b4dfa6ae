"""Where the CLI finds its token (runtime/cli/api_client.py `client_token`): `$YURT_TOKEN`,
`$NOMAD_TOKEN`, the file at `$YURT_TOKEN_FILE`, then the default agent's bootstrap token file
when this user may read it.

Layer 0 for the order (environment and files under tmp_path, the function called in this
process). Layer 2 for what another user sees: root reads every file, so the unprivileged case
runs `client_token` as uid 4242 in a child process (setpriv), against root's 0600 files in
directories that user may traverse, as an agent's data dir under /var/lib is.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from yurt.runtime.cli.api_client import client_token
from yurt.runtime.lib.datadir import bootstrap_token_path, default_data_dir

OTHER_USER = 4242


@contextmanager
def listening() -> Iterator[str]:
    """A socket this process (root, as the agent and its token file) listens on: where the
    bootstrap token may be sent (api_client.py `_served_by`). Its address."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[pytest.MonkeyPatch]:
    """No token in the environment; the default data dir under tmp_path; `$YURT_ADDR` a
    port root listens on."""
    for name in ("YURT_TOKEN", "NOMAD_TOKEN", "YURT_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    with listening() as address:
        monkeypatch.setenv("YURT_ADDR", address)
        yield monkeypatch


def write_bootstrap(text: str) -> Path:
    path = bootstrap_token_path(default_data_dir())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_the_default_data_dir_is_xdg_then_home(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "x"))
    assert default_data_dir() == tmp_path / "x" / "yurt"
    assert bootstrap_token_path(default_data_dir()) == (
        tmp_path / "x" / "yurt" / "server" / "bootstrap.token")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_dir() == tmp_path / "home" / ".local" / "share" / "yurt"


def test_the_agent_uses_the_same_default_data_dir(env: pytest.MonkeyPatch) -> None:
    from yurt.runtime.cli.agent_options import AgentOptions, build_config

    config = build_config(AgentOptions())[0]
    assert config.data_dir == default_data_dir().absolute()


def test_each_source_wins_over_the_ones_after_it(env: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    write_bootstrap("from-bootstrap\n")
    assert client_token() == "from-bootstrap"
    token_file = tmp_path / "token"
    token_file.write_text("  from-file\n")
    env.setenv("YURT_TOKEN_FILE", str(token_file))
    assert client_token() == "from-file"
    env.setenv("NOMAD_TOKEN", "from-nomad\n")
    assert client_token() == "from-nomad"
    env.setenv("YURT_TOKEN", "from-yurt")
    assert client_token() == "from-yurt"
    env.setenv("YURT_TOKEN", "  ")  # blank is unset, as before
    assert client_token() == "from-nomad"


def test_nothing_anywhere_is_anonymous(env: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert client_token() == ""
    write_bootstrap("")  # an empty file is no token either
    assert client_token() == ""
    assert capsys.readouterr().err == ""


def test_an_unreadable_token_file_named_by_the_user_is_an_error(
        env: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_bootstrap("from-bootstrap")  # never a fallback for the file the user named
    env.setenv("YURT_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(SystemExit) as exited:
        client_token()
    assert exited.value.code == 2
    assert f"cannot read $YURT_TOKEN_FILE {tmp_path / 'missing'}: No such file" in (
        capsys.readouterr().err)
    (tmp_path / "empty").write_text("\n")
    env.setenv("YURT_TOKEN_FILE", str(tmp_path / "empty"))
    with pytest.raises(SystemExit) as exited:
        client_token()
    assert exited.value.code == 2
    assert "is empty" in capsys.readouterr().err


def test_a_broken_bootstrap_token_file_is_reported_and_skipped(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = bootstrap_token_path(default_data_dir())
    path.mkdir(parents=True)  # a directory where the file should be
    assert client_token() == ""
    assert f"ignoring the bootstrap token file {path}: Is a directory" in (
        capsys.readouterr().err)


def test_no_home_at_all_is_anonymous(env: pytest.MonkeyPatch) -> None:
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")  # as Path.home() does

    env.delenv("XDG_DATA_HOME")
    env.setattr(Path, "home", staticmethod(no_home))
    assert client_token() == ""


# --------------------------------------------------------------------------- another user

_AS_OTHER_USER = """
import json, sys
from yurt.runtime.cli.api_client import client_token
try:
    print(json.dumps({"token": client_token()}))
except SystemExit as e:
    print(json.dumps({"exit": e.code}))
"""


@pytest.fixture
def public_root() -> Iterator[Path]:
    """A directory every user may traverse, as /var/lib is (pytest's tmp tree is root's)."""
    path = Path(tempfile.mkdtemp(prefix="yurt-token-"))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def as_other_user(env: dict[str, str]) -> tuple[dict[str, object], str]:
    """`client_token()` run by uid 4242 (no groups) with `env`: what it returned (or the exit
    status it ended with) and its stderr."""
    ran = subprocess.run(
        ["setpriv", f"--reuid={OTHER_USER}", f"--regid={OTHER_USER}", "--clear-groups",
         sys.executable, "-c", _AS_OTHER_USER],
        capture_output=True, text=True, timeout=60, check=False, env=env)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout), ran.stderr


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root to act as uid 4242")
def test_another_user_skips_a_bootstrap_token_it_may_not_read(public_root: Path) -> None:
    data = public_root / "xdg" / "yurt"
    token = bootstrap_token_path(data)
    token.parent.mkdir(parents=True)
    for directory in (public_root / "xdg", data, token.parent):
        directory.chmod(0o711)  # traversable, as the agent's data dir is
    token.write_text("root-secret\n")
    token.chmod(0o600)
    env = {k: v for k, v in os.environ.items()
           if k not in ("YURT_TOKEN", "NOMAD_TOKEN", "YURT_TOKEN_FILE")}
    env["XDG_DATA_HOME"] = str(public_root / "xdg")
    # Permission denied: anonymous, without a word on stderr (every command would say it).
    assert as_other_user(env) == ({"token": ""}, "")
    # A directory it may not even enter: the same.
    token.parent.chmod(0o700)
    assert as_other_user(env) == ({"token": ""}, "")
    # Once the file is the user's to read, it is the token (for the agent root runs).
    token.parent.chmod(0o711)
    token.chmod(0o644)
    with listening() as address:
        assert as_other_user({**env, "YURT_ADDR": address}) == ({"token": "root-secret"}, "")
    # $YURT_TOKEN_FILE it may not read stays an error: the user asked for that file.
    token.chmod(0o600)
    found, err = as_other_user({**env, "YURT_TOKEN_FILE": str(token)})
    assert found == {"exit": 2}
    assert f"cannot read $YURT_TOKEN_FILE {token}: Permission denied" in err


def test_the_bootstrap_token_goes_only_to_the_agents_own_listener(
        env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Root's management token is never sent to another machine, nor to a port another local
    user took while the agent was down: that user would be handed root."""
    write_bootstrap("root-secret\n")
    assert client_token() == "root-secret"  # root's own listener (the fixture's)
    env.setenv("YURT_ADDR", "http://192.0.2.7:4646")
    assert client_token() == ""
    # uid 4242 listens on a loopback port; root's CLI pointed there sends nothing.
    squatter = subprocess.Popen(
        ["setpriv", f"--reuid={OTHER_USER}", f"--regid={OTHER_USER}", "--clear-groups",
         sys.executable, "-I", "-c",
         "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
         "print(s.getsockname()[1], flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert squatter.stdout is not None
        port = int(squatter.stdout.readline())
        env.setenv("YURT_ADDR", f"http://127.0.0.1:{port}")
        capsys.readouterr()
        assert client_token() == ""
        assert "not sending the agent's bootstrap token to 127.0.0.1" in capsys.readouterr().err
    finally:
        squatter.kill()
        squatter.wait(timeout=10)

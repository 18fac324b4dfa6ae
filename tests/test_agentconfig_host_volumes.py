"""The agent config's `[host_volume.NAME]` tables (layer 0, and the CLI's refusal): Nomad's
client `host_volume "NAME" { path, read_only }`, checked at start as Nomad's agent checks
them (command/agent/command.go `isValidConfig`, client/client.go `setupNode`), carried into
the agent's config (runtime/agent/config.py `FileConfig.host_volumes`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli import yurt
from yurt.runtime.agent.config import ConfigError, load_config
from yurt.runtime.cli.agent_options import AgentOptions, build_config
from yurt.runtime.structs import ClientHostVolumeConfig


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def test_host_volumes_become_the_nodes_with_absolute_paths(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    sock = tmp_path / "docker.sock"
    sock.write_text("")  # a file is a host volume too, as in Nomad
    path = _write(tmp_path, f'[host_volume.data]\npath = "{tmp_path / "data"}"\n'
                            f'[host_volume.sock]\npath = "{sock}"\nread_only = true\n')
    config, _, _ = build_config(AgentOptions(config_file=path, data_dir=tmp_path / "d"))
    assert config.host_volumes == {
        "data": ClientHostVolumeConfig(name="data", path=str(tmp_path / "data")),
        "sock": ClientHostVolumeConfig(name="sock", path=str(sock), read_only=True)}


def test_a_relative_path_is_made_absolute_against_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rel").mkdir()
    monkeypatch.chdir(tmp_path)
    file = load_config(_write(tmp_path, '[host_volume.r]\npath = "rel"\n'))
    assert file.host_volumes()["r"].path == str(tmp_path / "rel")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ValueError, match=r"host_volume\.r\.path: failed to validate volume r"):
        file.host_volumes(cwd=tmp_path / "elsewhere")


@pytest.mark.parametrize(("text", "message"), [
    ('[host_volume.data]\nread_only = true\n',
     "host_volume.data.path: Missing path in host_volume config"),
    ('[host_volume.data]\npath = "/no/such/dir"\n',
     "host_volume.data.path: failed to validate volume data: '/no/such/dir': No such file or "
     "directory; expected an existing directory or file"),
    ('[host_volume.data]\npath = "/tmp"\nreadonly = true\n',
     'host_volume.data: unknown key "readonly"; did you mean "read_only"\\?'),
    ('[host_volume.data]\npath = "/tmp"\nread_only = "yes"\n',
     'host_volume.data.read_only: must be true or false'),
    ('host_volume = "data"\n', "host_volume: must be a table"),
])
def test_a_bad_host_volume_names_the_file_the_key_and_what_was_expected(
        tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"^{path}: {message}"):
        load_config(path)


def test_the_agent_refuses_to_start_with_a_missing_volume_path(tmp_path: Path) -> None:
    path = _write(tmp_path, f'[host_volume.data]\npath = "{tmp_path / "gone"}"\n')
    out = yurt("agent", "--config", str(path), "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2
    assert out.stderr == (f"yurt: {path}: host_volume.data.path: failed to validate volume "
                          f"data: '{tmp_path / 'gone'}': No such file or directory; expected "
                          "an existing directory or file\n")

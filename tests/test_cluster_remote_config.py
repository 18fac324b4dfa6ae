"""`yurt agent --servers` and `servers = [...]` in the agent's config file (layer 0, and
the command's exit status for a wrong URL)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from yurt.runtime.cli import cli
from yurt.runtime.cli.agent_options import AgentOptions, UsageError, build_config
from yurt.runtime.errors import EXIT_USAGE


def test_no_servers_is_the_embedded_server(tmp_path: Path) -> None:
    config, _, _ = build_config(AgentOptions(data_dir=tmp_path))
    assert config.servers == ()


def test_servers_option_is_split_and_completed(tmp_path: Path) -> None:
    config, _, _ = build_config(AgentOptions(
        data_dir=tmp_path, servers="http://10.0.0.1:4646, 10.0.0.2:4646/,https://s3:443"))
    assert config.servers == ("http://10.0.0.1:4646", "http://10.0.0.2:4646", "https://s3:443")


def test_node_name_option_overrides_the_file(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text('node_name = "from-file"\n')
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path))
    assert config.node_name == "from-file"
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path,
                                             node_name="n7"))
    assert config.node_name == "n7"


def test_servers_from_the_config_file(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text('servers = ["127.0.0.1:4646", "http://127.0.0.2:4646"]\n')
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path))
    assert config.servers == ("http://127.0.0.1:4646", "http://127.0.0.2:4646")
    # The option overrides the file.
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path,
                                             servers="http://10.1.1.1:4646"))
    assert config.servers == ("http://10.1.1.1:4646",)


@pytest.mark.parametrize(("given", "said"), [
    ("ftp://s:21", "is not a server URL; give http://host:port"),
    ("http://s", "is not a server URL; give http://host:port"),
    ("http://s:4646/v1", "has a path; give only http://host:port"),
    ("http://s:99999", "is not a server URL"),
    ("", "is not a server URL"),
])
def test_a_wrong_server_url_is_a_usage_error(tmp_path: Path, given: str, said: str) -> None:
    with pytest.raises(UsageError, match="^" + re.escape(f"--servers: {given!r} {said}")):
        build_config(AgentOptions(data_dir=tmp_path, servers=given))


def test_a_wrong_server_url_in_the_file_names_the_file(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text('servers = ["http://s:4646/v1"]\n')
    with pytest.raises(UsageError, match="^" + re.escape(
            f"{file}: servers: 'http://s:4646/v1' has a path")):
        build_config(AgentOptions(config_file=file, data_dir=tmp_path))


def test_servers_of_the_wrong_type_in_the_file(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text('servers = "http://s:4646"\n')
    with pytest.raises(UsageError, match=r"servers.*must be a list of strings"):
        build_config(AgentOptions(config_file=file, data_dir=tmp_path))


def test_the_command_exits_2_on_a_wrong_server_url(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["agent", "--data-dir", str(tmp_path),
                                      "--servers", "http://s:4646/v1"])
    assert result.exit_code == EXIT_USAGE
    assert "yurt: --servers: 'http://s:4646/v1' has a path" in result.output


def test_datacenter_and_meta_options_over_the_file(tmp_path: Path) -> None:
    file = tmp_path / "agent.toml"
    file.write_text('datacenter = "dc9"\n[meta]\nrack = "r1"\nzone = "z1"\n')
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path,
                                             datacenter="dc2", meta=("rack=r7", "gpu=")))
    assert config.datacenter == "dc2"
    assert config.meta == {"rack": "r7", "zone": "z1", "gpu": ""}
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path))
    assert (config.datacenter, config.meta) == ("dc9", {"rack": "r1", "zone": "z1"})


@pytest.mark.parametrize("pair", ["rack", "=r1", " =x"])
def test_a_meta_option_without_a_key_is_a_usage_error(tmp_path: Path, pair: str) -> None:
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        build_config(AgentOptions(data_dir=tmp_path, meta=(pair,)))

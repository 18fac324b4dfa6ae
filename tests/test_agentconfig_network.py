"""The agent's network settings and `-dev`'s data dir, as the config and options give them
(layer 0 and the file system: runtime/agent/config.py, runtime/cli/agent.py, lib/netif.py,
lib/datadir.py). tests/test_agent_dev_fresh.py runs real agents with them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from yurt.runtime.agent.config import ConfigError, load_config, normalize_advertise
from yurt.runtime.cli.agent_options import (
    AgentOptions,
    UsageError,
    build_config,
    remove_dev_data_dir,
)
from yurt.runtime.lib.datadir import make_private_parents
from yurt.runtime.lib.netif import interface_address, interface_names


@pytest.mark.parametrize(("given", "port", "expected"), [
    ("10.0.0.5", 4646, "10.0.0.5:4646"), ("10.0.0.5:80", 4646, "10.0.0.5:80"),
    ("yurt.example.com", 4647, "yurt.example.com:4647"), ("::1", 4648, "[::1]:4648"),
    ("[fd00::2]:99", 4646, "[fd00::2]:99"), ("[fd00::2]", 4646, "[fd00::2]:4646"),
])
def test_an_advertise_address_gets_the_services_port_when_it_names_none(
        given: str, port: int, expected: str) -> None:
    assert normalize_advertise(given, port, "advertise.http") == expected


@pytest.mark.parametrize("given", ["", "http://10.0.0.5:4646", "a:b:c", "10.0.0.5:0",
                                   "10.0.0.5:70000", "[nope]:1", "host/path"])
def test_what_is_no_advertise_address_is_refused_in_words(given: str) -> None:
    with pytest.raises(ValueError, match=r'^advertise\.rpc: .* is not an address; give '
                                         r'"host" or "host:port"$'):
        normalize_advertise(given, 4647, "advertise.rpc")


@pytest.mark.parametrize("given", ["0.0.0.0", "::", "0.0.0.0:4646"])
def test_a_wildcard_is_no_address_to_advertise(given: str) -> None:
    with pytest.raises(ValueError, match="is no address others can reach"):
        normalize_advertise(given, 4646, "advertise.http")


def test_the_config_file_carries_network_interface_and_advertise(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('network_interface = "lo"\n[advertise]\nhttp = "yurt.example.com"\n'
                    'rpc = "10.0.0.5"\n')
    file = load_config(path)
    assert (file.network_interface, file.advertise.http) == ("lo", "yurt.example.com")
    assert "yurt.example.com" in file.allowed_hosts()  # the name it is reached at
    config, _, _ = build_config(AgentOptions(config_file=path, data_dir=tmp_path / "d",
                                             port=5000))
    assert config.node_ip == interface_address("lo") == "127.0.0.1"
    assert (config.advertise_http, config.advertise_rpc, config.advertise_serf) == (
        "yurt.example.com:5000", "10.0.0.5:4647", "")
    assert not config.temporary_data_dir


def test_a_misspelt_or_bad_advertise_key_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('[advertise]\nhtp = "10.0.0.5"\nserf = "0.0.0.0"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f'{path}: advertise: unknown key "htp"; did you mean "http"?'
    path.write_text('[advertise]\nserf = "0.0.0.0"\n')
    with pytest.raises(ConfigError, match=rf"^{path}: advertise\.serf: '0\.0\.0\.0' is no "):
        load_config(path)


def test_an_unknown_interface_names_the_ones_there_are(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('network_interface = "nosuch0"\n')
    with pytest.raises(UsageError) as caught:
        build_config(AgentOptions(config_file=path, data_dir=tmp_path / "d"))
    message = str(caught.value)
    assert message.startswith(f"{path}: network_interface: no network interface 'nosuch0' on "
                              "this machine; its interfaces are ")
    assert message.endswith(", ".join(interface_names()))


def test_dev_without_a_data_dir_gets_a_temporary_one_and_loopback(tmp_path: Path) -> None:
    config, _, _ = build_config(AgentOptions(dev_mode=True))
    try:
        assert config.temporary_data_dir
        assert config.data_dir.name.startswith("yurt-dev-")
        assert stat.S_IMODE(config.data_dir.stat().st_mode) == 0o711
        assert config.node_ip == "127.0.0.1"
        assert config.bind == "127.0.0.1"
        (config.data_dir / "client").mkdir()
        (config.data_dir / "client" / "state.db").write_text("x")
    finally:
        assert remove_dev_data_dir(config.data_dir) is None
    assert not config.data_dir.exists()
    given, _, _ = build_config(AgentOptions(dev_mode=True, data_dir=tmp_path / "mine"))
    assert (given.temporary_data_dir, given.data_dir) == (False, tmp_path / "mine")
    plain, _, _ = build_config(AgentOptions(data_dir=tmp_path / "mine"))
    assert plain.node_ip == ""  # the default route's interface (client/fingerprint.py)


def test_missing_parents_of_the_default_data_dir_are_made_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    target = home / ".local" / "share" / "yurt"
    old = os.umask(0o022)
    try:
        make_private_parents(target)
    finally:
        os.umask(old)
    assert not target.exists()  # the agent makes the data dir itself (0711)
    for made in (home / ".local", home / ".local" / "share"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert stat.S_IMODE(home.stat().st_mode) == 0o755  # what was there is left alone
    make_private_parents(target)  # all there: nothing to do

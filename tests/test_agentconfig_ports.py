"""The agent config's port settings (layer 0): Nomad's client `min_dynamic_port`,
`max_dynamic_port` and `reserved { reserved_ports }`, with Nomad's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from yurt.runtime.agent.config import ConfigError, load_config


def test_port_settings_default_to_nomads_and_can_be_set(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("")
    config = load_config(path)
    assert (config.min_dynamic_port, config.max_dynamic_port) == (20000, 32000)
    assert config.reserved.reserved_ports == ""
    path.write_text('min_dynamic_port = 30000\nmax_dynamic_port = 30100\n'
                    '[reserved]\nreserved_ports = "22,8000-8100"\n')
    config = load_config(path)
    assert (config.min_dynamic_port, config.max_dynamic_port) == (30000, 30100)
    assert config.reserved.reserved_ports == "22,8000-8100"


@pytest.mark.parametrize(("text", "message"), [
    ("min_dynamic_port = 0\n", "Invalid dynamic port range: min_dynamic_port=0"),
    ("max_dynamic_port = 70000\n", "Invalid dynamic port range: max_dynamic_port=70000"),
    ("min_dynamic_port = 30000\nmax_dynamic_port = 29000\n",
     "Invalid dynamic port range: min_dynamic_port=30000 and max_dynamic_port=29000"),
    ('[reserved]\nreserved_ports = "22-"\n', "reserved.reserved_ports: "),
    ('[reserved]\nports = "22"\n',
     'reserved: unknown key "ports"; did you mean "reserved_ports"\\?'),
])
def test_bad_port_settings_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)

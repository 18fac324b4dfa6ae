"""The agent's TOML config file (layer 0), and its errors through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli import yurt
from yurt.runtime.agent.config import ConfigError, load_config

GOOD = '''
data_dir = "/srv/yurt"
port = 4700
datacenter = "eu-1"
node_class = "gpu"

[meta]
rack = "r1"
"zone.name" = "a"

[drivers]
allow = ["raw_exec"]
[drivers.config.raw_exec]
enabled = true

[[devices.fake]]
id = "nvidia/gpu/T4"
instances = ["GPU-0", "GPU-1"]

[gc]
interval = "30s"
max_allocs = 10
'''


def test_a_full_config(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(GOOD)
    config = load_config(path)
    assert (config.data_dir, config.port, config.datacenter) == ("/srv/yurt", 4700, "eu-1")
    assert (config.node_class, config.meta) == ("gpu", {"rack": "r1", "zone.name": "a"})
    assert config.drivers.allow == ["raw_exec"]
    assert config.drivers.config == {"raw_exec": {"enabled": True}}
    (group,) = config.fake_devices()
    assert (group.id, [i.id for i in group.instances]) == ("nvidia/gpu/T4", ["GPU-0", "GPU-1"])
    gc = config.gc_config()
    assert (gc.interval, gc.max_allocs, gc.disk_threshold) == (30.0, 10, 80.0)


@pytest.mark.parametrize(("text", "message"), [
    ("prot = 4646\n", 'unknown key "prot"; did you mean "port"\\?'),
    ("port = \"high\"\n", 'port: must be a whole number, got a string "high"'),
    ("[[devices.fake]]\nid = \"gpu\"\ninstances = [\"a\"]\n", "vendor/type/name=ID"),
    ("[gc]\ninterval = \"soon\"\n", "expected a duration"),
    ("port = \n", "Invalid value"),
    ("[meta]\nrack = 3\n", "meta.rack: must be a string, got a number 3"),
    ("[meta]\n\"a..b\" = \"x\"\n", "Invalid Client.Meta key: a..b"),
    ("[meta]\n\".a\" = \"x\"\n", r"Invalid Client.Meta key: \.a"),
    ("node_class = 1\n", "node_class: must be a string, got a number 1"),
    ("[drivers]\nallow = \"raw_exec\"\n",
     'drivers.allow: must be a list of strings, got a string "raw_exec"'),
    ("[[devices.fake]]\nid = \"a/b/c\"\n", 'devices.fake.0: missing the required key "instances"'),
    ("[drivers.config.raw_exec]\nenv_alow = []\n",
     'drivers.config.raw_exec: unknown key "env_alow"; did you mean "env_allow"\\?'),
    ("[artifact]\nhttp_read_timeout = 5\n", "artifact.http_read_timeout: must be a string"),
])
def test_config_errors_name_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_agent_refuses_a_bad_config_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("prot = 4646\n")
    out = yurt("agent", "--config", str(path))
    assert out.returncode == 2
    assert out.stderr == f'yurt: {path}: unknown key "prot"; did you mean "port"?\n'


def test_the_http_idle_timeout_is_a_duration_of_at_least_a_second(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text("")
    assert load_config(path).idle_timeout() == 300.0  # the default: five minutes
    path.write_text('http_idle_timeout = "90s"\n')
    assert load_config(path).idle_timeout() == 90.0
    for bad in ('"500ms"', '"soon"'):
        path.write_text(f"http_idle_timeout = {bad}\n")
        with pytest.raises(ConfigError, match="http_idle_timeout"):
            load_config(path)


def test_every_problem_of_a_config_file_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('prot = 5\nport = "x"\n[drivers]\nallow = "raw_exec"\nblok = []\n'
                    '[drivers.config.raw_exec]\nenv_allow = "PATH"\n[gc]\nmax_allocs = true\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).splitlines() == [
        f'{path}: unknown key "prot"; did you mean "port"?',
        f'{path}: port: must be a whole number, got a string "x"',
        f'{path}: drivers.allow: must be a list of strings, got a string "raw_exec"',
        f'{path}: drivers: unknown key "blok"; did you mean "block"?',
        f"{path}: gc.max_allocs: must be a whole number, got true",
        f'{path}: drivers.config.raw_exec.env_allow: must be a list of strings, '
        f'got a string "PATH"',
    ]
    assert "`" not in str(caught.value)  # none of msgspec's wording


def test_the_agent_prints_every_config_problem_on_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('prot = 5\n[gc]\nintervall = "1m"\n')
    out = yurt("agent", "--config", str(path))
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        f'yurt: {path}: unknown key "prot"; did you mean "port"?',
        f'yurt: {path}: gc: unknown key "intervall"; did you mean "interval"?',
    ]


def test_log_settings_come_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text('log_level = "debug"\nlog_json = true\n')
    config = load_config(path)
    assert (config.log_level, config.log_json) == ("debug", True)

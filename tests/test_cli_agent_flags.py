"""Nomad's `agent` flags (runtime/cli/agent_flags.py) on a real `yurt agent`: the node's class,
pool and address as /v1/node/:id reports them, a job constrained to `${node.class}` placed,
the client's state and the allocations' directories where `-state-dir`/`-alloc-dir` say,
`-acl-enabled` both ways, `-log-include-location` in the log's lines, and the refusals (a
region other than `global`, the plugin and host volume directories, the intro token)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.agent_support import mock_job
from tests.browser_support import YURT, free_port, poll


@dataclass
class Started:
    address: str
    data: Path
    log: Path
    api: httpx2.Client

    def node(self) -> dict[str, Any]:
        nodes = self.api.get("/v1/nodes")
        nodes.raise_for_status()
        answer = self.api.get(f"/v1/node/{nodes.json()[0]['ID']}")
        answer.raise_for_status()
        node: dict[str, Any] = answer.json()
        return node


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("YURT_AGENT_TOKEN", "YURT_TOKEN", "NOMAD_TOKEN")}


@contextmanager
def agent(tmp: Path, *args: str, token: str = "") -> Iterator[Started]:
    """`yurt agent --dev --data-dir TMP/data <args>` until the block ends (then SIGTERM)."""
    tmp.mkdir(parents=True, exist_ok=True)
    data, log = tmp / "data", tmp / "agent.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [YURT, "agent", "--dev", "--data-dir", str(data), "--port", str(free_port()),
             *args], stdout=out, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "listening on" in line, f"the agent did not start: {line}{process.stderr.read()}"
        address = line.split("listening on ", 1)[1].split()[0]
        headers = {"X-Nomad-Token": token} if token else {}
        with httpx2.Client(base_url=address, headers=headers, timeout=20) as api:
            yield Started(address, data, log, api)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise


def refused(tmp: Path, *args: str) -> str:
    """`yurt agent <args>`'s stderr; it must have exited 2 without starting."""
    done = subprocess.run([YURT, "agent", "--dev", "--data-dir", str(tmp / "never"),
                           "--port", "0", *args], capture_output=True, text=True,
                          env=_env(), timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "listening on" not in done.stderr
    return done.stderr


@pytest.mark.slow
def test_node_flags_and_directories(tmp_path: Path) -> None:
    state, allocs = tmp_path / "elsewhere" / "state", tmp_path / "elsewhere" / "allocs"
    with agent(tmp_path, "-region=global", "-node-class", "web", "-node-pool", "pool-x",
               "-network-interface", "lo", "-preferred-address-family", "ipv6",
               "-state-dir", str(state), "-alloc-dir", str(allocs),
               "-network-speed", "2500", "-acl-enabled=false",
               "-log-include-location") as running:
        node = running.node()
        assert (node["NodeClass"], node["NodePool"]) == ("web", "pool-x")
        assert node["Attributes"]["unique.network.ip-address"] == "::1"
        network = node["NodeResources"]["Networks"][0]
        assert (network["Device"], network["IP"], network["CIDR"], network["MBits"]) == (
            "lo", "::1", "::1/128", 2500)

        job = mock_job("classy")
        job["Job"]["Constraints"] = [{"LTarget": "${node.class}", "RTarget": "web",
                                      "Operand": "="}]
        job["Job"]["NodePool"] = "pool-x"
        # ACLs off: no token needed.
        running.api.post("/v1/jobs", json=job).raise_for_status()

        def placed() -> dict[str, Any] | None:
            found = running.api.get("/v1/job/classy/allocations").json()
            return next((a for a in found if a["ClientStatus"] == "running"), None)

        alloc = poll(placed, 30, "the class-constrained job running")
        assert alloc["NodeID"] == node["ID"]
        assert (allocs / alloc["ID"]).is_dir()
        assert not (running.data / "alloc").exists()
        assert any(state.iterdir())  # the client's state database
        assert not (running.data / "client").exists()
        assert not (running.data / "server" / "bootstrap.token").exists()
        lines = running.log.read_text().splitlines()
        assert any(re.search(r"\]\s+runtime/[\w/]+\.py:\d+: ", line) for line in lines), lines[:5]


@pytest.mark.slow
def test_acl_enabled_overrides_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[acl]\nenabled = false\n")
    with agent(tmp_path, "--config", str(config), "-acl-enabled") as running:
        assert running.api.get("/v1/jobs").status_code == 403  # on: a token is needed
        token = (running.data / "server" / "bootstrap.token").read_text().strip()
        assert running.api.get("/v1/jobs", headers={"X-Nomad-Token": token}).status_code == 200
        lines = running.log.read_text().splitlines()
        assert not any(re.search(r"\]\s+runtime/[\w/]+\.py:\d+: ", line) for line in lines)


@pytest.mark.slow
def test_acls_on_by_default_and_off_when_told(tmp_path: Path) -> None:
    with agent(tmp_path / "on") as running:
        assert running.api.get("/v1/jobs").status_code == 403
        token = (running.data / "server" / "bootstrap.token").read_text().strip()
        running.api.headers["X-Nomad-Token"] = token
        network = running.node()["NodeResources"]["Networks"][0]
        # Loopback reports no speed of its own: Nomad's default.
        assert (network["Device"], network["IP"], network["MBits"]) == ("lo", "127.0.0.1", 1000)
    with agent(tmp_path / "off", "-acl-enabled=false") as running:
        assert running.api.get("/v1/jobs").status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize(("args", "words"), [
    (("-region", "eu-west"), "-region 'eu-west': yurt has one region, \"global\""),
    (("-plugin-dir", "/opt/plugins"), "-plugin-dir is not supported: yurt loads no external"),
    (("-client-intro-token", "x"), "-client-intro-token is not supported"),
    (("-node-pool", "all"), 'node is not allowed to register in node pool "all"'),
    (("-network-interface", "nosuch0"), "-network-interface: no network interface 'nosuch0'"),
    (("-preferred-address-family", "ipx"), "'ipx' is not one of 'ipv4', 'ipv6'"),
    (("-network-speed", "-5"), "-5 is not in the range x>=0"),
])
def test_refusals_name_the_flag(tmp_path: Path, args: tuple[str, ...], words: str) -> None:
    assert words in refused(tmp_path, *args)
    assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------------- the config file's keys


def test_config_keys_and_the_flags_over_them(tmp_path: Path) -> None:
    from yurt.runtime.cli.agent_options import AgentOptions, build_config

    file = tmp_path / "agent.toml"
    file.write_text('network_interface = "lo"\npreferred_address_family = "ipv6"\n'
                    'network_speed = 100\nstate_dir = "st"\nalloc_dir = "/srv/allocs"\n'
                    'region = "global"\nlog_include_location = true\nnode_class = "file"\n')
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path))
    assert (config.node_ip, config.network_speed, config.log_include_location) == (
        "::1", 100, True)
    assert (config.state_dir, config.alloc_dir) == (Path("st").absolute(), Path("/srv/allocs"))
    assert (config.client_state_dir, config.alloc_root, config.node_class) == (
        Path("st").absolute(), Path("/srv/allocs"), "file")

    config, _, _ = build_config(AgentOptions(
        config_file=file, data_dir=tmp_path, preferred_address_family="ipv4", network_speed=7,
        state_dir=tmp_path / "s", log_include_location=False, node_class="flag"))
    assert (config.node_ip, config.network_speed, config.log_include_location) == (
        "127.0.0.1", 7, False)
    assert (config.client_state_dir, config.alloc_root, config.node_class) == (
        tmp_path / "s", Path("/srv/allocs"), "flag")

    config, _, _ = build_config(AgentOptions(data_dir=tmp_path))  # neither: the data dir's
    assert (config.client_state_dir, config.alloc_root) == (
        tmp_path.absolute() / "client", tmp_path.absolute() / "alloc")
    assert config.host_volumes_root == tmp_path.absolute() / "host_volumes"


def test_host_volumes_dir_from_the_file_or_the_flag(tmp_path: Path) -> None:
    from yurt.runtime.cli.agent_options import AgentOptions, build_config

    file = tmp_path / "agent.toml"
    file.write_text('host_volumes_dir = "/srv/volumes"\n')
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path))
    assert config.host_volumes_root == Path("/srv/volumes")
    config, _, _ = build_config(AgentOptions(config_file=file, data_dir=tmp_path,
                                             host_volumes_dir=tmp_path / "v"))
    assert config.host_volumes_root == tmp_path / "v"


@pytest.mark.parametrize(("text", "words"), [
    ('region = "eu"', "region 'eu': yurt has one region"),
    ('preferred_address_family = "ipx"', 'preferred_address_family must be "ipv4" or "ipv6"'),
    ("network_speed = -1", "network_speed must be 0 or more"),
])
def test_config_keys_are_checked(tmp_path: Path, text: str, words: str) -> None:
    from yurt.runtime.cli.agent_options import AgentOptions, UsageError, build_config

    file = tmp_path / "agent.toml"
    file.write_text(text + "\n")
    with pytest.raises(UsageError, match=re.escape(words)):
        build_config(AgentOptions(config_file=file, data_dir=tmp_path))


def test_nomads_short_spellings_of_datacenter_and_node_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """command/agent/command.go: `-dc` and `-node`, beside yurt's `--datacenter`/`--node-name`."""
    from click.testing import CliRunner

    from yurt.runtime.cli import agent as cli_agent
    from yurt.runtime.cli import cli
    from yurt.runtime.cli.agent_options import AgentOptions
    from yurt.runtime.cli.flags import nomad_spelling

    seen: list[AgentOptions] = []
    monkeypatch.setattr(cli_agent, "run_agent", lambda options: seen.append(options) or 0)
    result = CliRunner().invoke(cli, nomad_spelling(cli, ["agent", "-dc", "east", "-node", "n1",
                                                          "-node-class", "gpu"]))
    assert result.exit_code == 0, result.output
    assert (seen[0].datacenter, seen[0].node_name) == ("east", "n1")

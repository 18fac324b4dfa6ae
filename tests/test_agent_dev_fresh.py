"""`yurt agent -dev` on a fresh machine, and where an agent says it is (layer 3: real agents).

A fresh machine has no `~/.local/share`: `-dev` needs no data dir at all (a temporary one,
removed when the agent stops) and everything it advertises is loopback, as Nomad's `-dev`
(command/agent/config.go `DevConfig`: bind 127.0.0.1, network_interface "lo"): the node's
HTTP address, its `unique.network.ip-address`, the allocation's network, the task's
`NOMAD_IP_<label>`, the service's address. `network_interface` in the config file picks the
interface (an unknown one is refused, exit 2, with the names of those there are), and
`advertise` the node's HTTP address and the server's RPC name.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.browser_support import YURT, free_port, poll
from yurt.runtime.lib.netif import interface_names

pytestmark = pytest.mark.slow

LOOPBACK = "127.0.0.1"


@dataclass
class DevAgent:
    process: subprocess.Popen[str]
    address: str
    data_dir: Path
    api: httpx2.Client
    lines: list[str]


def fresh_env(home: Path) -> dict[str, str]:
    """A user with an empty home: no `.local`, no XDG_DATA_HOME, no token of the caller's,
    and a runtime dir of its own (lib/datadir.py `private_runtime_dir`)."""
    run = home.with_name(home.name + "-run")  # beside the home: the home stays empty
    if not home.exists():
        home.mkdir()
        run.mkdir(mode=0o700)
    drop = {"XDG_DATA_HOME", "YURT_AGENT_TOKEN", "YURT_TOKEN", "NOMAD_TOKEN",
            "YURT_TOKEN_FILE", "YURT_ADDR", "NOMAD_ADDR"}
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "HOME": str(home),
            "XDG_RUNTIME_DIR": str(run)}


@contextmanager
def dev_agent(home: Path, *args: str) -> Iterator[DevAgent]:
    """`yurt agent -dev ARGS` with nothing else: its address, data dir and the session token
    it prints (ACLs are on, as -dev has them: runtime/agent/aclsetup.py)."""
    process = subprocess.Popen([YURT, "agent", "-dev", "-port", str(free_port()), *args],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=fresh_env(home), cwd=home)
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline()]
        assert "listening on" in lines[0], lines[0] + process.stderr.read()
        while not lines[-1].startswith("UI: "):  # the ACL lines end with the sign-in link
            lines.append(process.stderr.readline())
            assert lines[-1], f"the agent said no more: {lines}"
        address = lines[0].split("listening on ", 1)[1].split()[0]
        data_dir = Path(lines[0].split("(data dir ", 1)[1].split(",")[0].strip().rstrip(")"))
        token = next(line for line in lines if line.startswith("dev session token")
                     ).rsplit(" ", 1)[1].strip()
        with httpx2.Client(base_url=address, headers={"X-Nomad-Token": token},
                           timeout=20) as api:
            yield DevAgent(process, address, data_dir, api, lines)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise


def web_job() -> dict[str, Any]:
    """A raw_exec service with a dynamic port `http` and a Nomad service on it, whose task
    prints the address it was given."""
    task = {"Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh",
                       "args": ["-c", 'echo "ip=$NOMAD_IP_http addr=$NOMAD_ADDR_http"; '
                                      "exec sleep 600"]}}
    group = {"Name": "g", "Tasks": [task],
             "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
             "Services": [{"Name": "dev-web", "PortLabel": "http", "Provider": "nomad"}],
             "RestartPolicy": {"Attempts": 0, "Mode": "fail"}}
    return {"Job": {"ID": "web", "Type": "service", "TaskGroups": [group]}}


def running_alloc(api: httpx2.Client) -> dict[str, Any] | None:
    allocs = api.get("/v1/job/web/allocations").json()
    if allocs and allocs[0]["ClientStatus"] == "running":
        return api.get(f"/v1/allocation/{allocs[0]['ID']}").json()  # type: ignore[no-any-return]
    return None


def test_a_fresh_machine_runs_a_dev_agent_that_advertises_loopback_only(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    with dev_agent(home) as agent:
        data = agent.data_dir
        assert "temporary: removed when the agent stops" in agent.lines[0]
        assert agent.address.startswith(f"http://{LOOPBACK}:")
        assert data.is_relative_to(tempfile.gettempdir())
        assert stat.S_IMODE(data.stat().st_mode) == 0o711  # tasks of other users reach theirs
        # Every URL it printed is loopback.
        assert all(f"http://{LOOPBACK}:" in line for line in agent.lines if "http" in line)

        (node,) = agent.api.get("/v1/nodes").json()
        detail = agent.api.get(f"/v1/node/{node['ID']}").json()
        assert detail["HTTPAddr"] == agent.address.removeprefix("http://")
        assert detail["Attributes"]["unique.network.ip-address"] == LOOPBACK
        assert detail["Attributes"]["nomad.advertise.address"].startswith(f"{LOOPBACK}:")

        assert agent.api.post("/v1/jobs", json=web_job()).status_code == 200
        alloc = poll(lambda: running_alloc(agent.api), 30, "the web allocation running")
        shared = alloc["AllocatedResources"]["Shared"]
        assert shared["Networks"][0]["IP"] == LOOPBACK
        (port,) = shared["Ports"]
        assert port["HostIP"] == LOOPBACK
        log = data / "alloc" / alloc["ID"] / "alloc" / "logs" / "t.stdout.0"
        said = poll(lambda: log.exists() and log.read_text(), 10, "the task's output")
        assert said == f"ip={LOOPBACK} addr={LOOPBACK}:{port['Value']}\n"
        services = poll(lambda: agent.api.get("/v1/service/dev-web").json(), 10,
                        "the service registered")
        assert [(s["Address"], s["Port"]) for s in services] == [(LOOPBACK, port["Value"])]

        agent.process.send_signal(signal.SIGTERM)
        assert agent.process.wait(timeout=30) == 0
    assert not data.exists(), "the temporary data dir outlived the agent"
    assert list(home.iterdir()) == [], "a dev agent wrote into the user's home"


def test_a_data_dir_given_to_a_dev_agent_is_kept(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    with dev_agent(tmp_path / "home", "-data-dir", str(kept)) as agent:
        assert agent.data_dir == kept
        assert "temporary" not in agent.lines[0]
    assert (kept / "node-id").exists()


def test_network_interface_lo_gives_the_node_a_loopback_address(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('network_interface = "lo"\n[advertise]\nhttp = "localhost"\n'
                      'rpc = "127.0.0.1:4999"\n')
    with dev_agent(tmp_path / "home", "-config", str(config)) as agent:
        (node,) = agent.api.get("/v1/nodes").json()
        detail = agent.api.get(f"/v1/node/{node['ID']}").json()
        assert detail["Attributes"]["unique.network.ip-address"] == LOOPBACK
        # advertise.http without a port takes the agent's; its name is one the API admits.
        port = agent.address.rsplit(":", 1)[1]
        assert detail["HTTPAddr"] == f"localhost:{port}"
        assert httpx2.get(f"http://localhost:{port}/v1/agent/health",
                          timeout=10).status_code == 200
        # advertise.rpc is the name the embedded server gives itself.
        assert agent.api.get("/v1/status/leader").json() == "127.0.0.1:4999"
        assert agent.api.get("/v1/status/peers").json() == ["127.0.0.1:4999"]


def test_an_unknown_interface_is_refused_with_the_names_there_are(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('network_interface = "nosuch0"\n')
    home = tmp_path / "home"
    done = subprocess.run([YURT, "agent", "-dev", "-config", str(config)],
                          capture_output=True, text=True, env=fresh_env(home), timeout=60)
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip()
    assert message.startswith(f"yurt: {config}: network_interface: no network interface "
                               "'nosuch0' on this machine; its interfaces are ")
    assert all(name in message for name in interface_names())
    assert list(home.iterdir()) == []  # refused before any temporary dir was made


def test_a_bad_advertise_address_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[advertise]\nrpc = "http://10.0.0.1:4647"\n')
    done = subprocess.run([YURT, "agent", "-dev", "-config", str(config)],
                          capture_output=True, text=True, env=fresh_env(tmp_path / "home"),
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"yurt: {config}: advertise.rpc: 'http://10.0.0.1:4647' "
                                   'is not an address; give "host" or "host:port"')


def test_this_users_cli_finds_a_dev_agents_token_with_no_setting(tmp_path: Path) -> None:
    """`yurt agent -dev` in one terminal, `yurt job status` in another: the temporary data
    dir's token is found through the runtime dir's pointer, and the pointer goes with the
    agent."""
    home = tmp_path / "home"
    with dev_agent(home) as agent:
        port = agent.address.rsplit(":", 1)[1]
        pointer = tmp_path / "home-run" / "yurt" / f"agent-{port}.datadir"
        assert pointer.read_text() == str(agent.data_dir)
        assert stat.S_IMODE(pointer.parent.stat().st_mode) == 0o700
        assert not any("export YURT_TOKEN_FILE" in line for line in agent.lines)
        done = subprocess.run([YURT, "job", "status", "-address", agent.address],
                              env=fresh_env(home), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        stranger = {**fresh_env(home), "XDG_RUNTIME_DIR": str(tmp_path)}  # no pointer there
        refused = subprocess.run([YURT, "job", "status", "-address", agent.address],
                                 env=stranger, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1
        assert "permission denied" in refused.stderr
    assert not pointer.exists()


def test_a_runtime_dir_open_to_others_is_not_trusted(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from yurt.runtime.lib.datadir import (
        UnsafeRuntimeDir,
        pointed_data_dir,
        private_runtime_dir,
        write_agent_pointer,
    )

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    write_agent_pointer(4999, tmp_path / "data")
    assert pointed_data_dir(4999) == tmp_path / "data"
    (tmp_path / "yurt").chmod(0o755)  # another user could have put the pointer there
    with pytest.raises(UnsafeRuntimeDir, match="open to other users"):
        private_runtime_dir(create=False)
    assert pointed_data_dir(4999) is None
    (tmp_path / "yurt").chmod(0o700)
    (tmp_path / "yurt").rename(tmp_path / "real")
    (tmp_path / "yurt").symlink_to(tmp_path / "real")  # a link is refused, wherever it points
    with pytest.raises(UnsafeRuntimeDir, match="not a directory"):
        private_runtime_dir(create=False)

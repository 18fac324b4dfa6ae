"""What `yurt agent` does with ACLs as it starts (layer 3: real agent processes, real sockets).

- A data dir's first start bootstraps and writes the management token 0600; later starts
  keep it; `bootstrap = "manual"` leaves the bootstrap to the operator.
- `--dev`: a fresh management token per start, printed with a one-time UI sign-in link; the
  token ends with the agent.
- ACLs off, as root, with raw_exec: a warning at start and in `yurt node status`.
"""

from __future__ import annotations

import re
import signal
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from tests.cli_proc_support import YURT
from tests.test_agent_e2e import free_port
from tests.token_support import without_suite_token


@contextmanager
def agent(data: Path, *extra: str) -> Iterator[tuple[str, list[str]]]:
    """A `yurt agent` on `data`; its address and the lines it printed on stderr once ready
    (read up to its `UI:` line or warning, which come after the start's ACL work)."""
    process = subprocess.Popen([YURT, "agent", "--data-dir", str(data), "--port",
                                str(free_port()), *extra], env=without_suite_token(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline()]
        found = re.search(r"listening on (\S+)", lines[0])
        assert found, lines
        while not lines[-1].startswith(("UI:", "yurt: warning", "ACLs: ")):
            line = process.stderr.readline()
            assert line, f"the agent ended: {lines}"
            lines.append(line)
        yield found.group(1), lines
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0


def status(address: str, path: str, secret: str) -> int:
    return httpx2.get(address + path, headers={"X-Nomad-Token": secret}, timeout=20).status_code


def test_the_first_start_bootstraps_and_later_ones_keep_the_token(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token_file = data / "server" / "bootstrap.token"
    with agent(data) as (address, lines):
        assert any(f"the management token is in {token_file}" in line for line in lines)
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        secret = token_file.read_text().strip()
        assert status(address, "/v1/jobs", secret) == 200
        assert status(address, "/v1/jobs", "") == 403
    with agent(data) as (address, lines):
        assert not any("management token is in" in line for line in lines)  # said once
        assert token_file.read_text().strip() == secret
        assert status(address, "/v1/acl/token/self", secret) == 200


def test_a_manual_bootstrap_is_left_to_the_operator(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[acl]\nbootstrap = "manual"\n')
    with agent(tmp_path / "data", "--config", str(config)) as (address, _):
        assert not (tmp_path / "data" / "server" / "bootstrap.token").exists()
        assert status(address, "/v1/jobs", "") == 403
        first = httpx2.put(f"{address}/v1/acl/bootstrap", timeout=20)
        assert first.status_code == 200, first.text
        assert status(address, "/v1/jobs", first.json()["SecretID"]) == 200
        assert httpx2.put(f"{address}/v1/acl/bootstrap", timeout=20).status_code == 400


def test_dev_makes_a_fresh_token_and_a_one_time_link_per_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    tokens = []
    for _ in range(2):
        with agent(data, "--dev") as (address, lines):
            text = "".join(lines)
            secret = re.search(r"dev session token \(management; it ends with this agent\): "
                               r"(\S+)", text)
            link = re.search(r"UI: (\S+/ui/jobs\?ott=(\S+)) \(a one-time sign-in link\)", text)
            assert secret, text
            assert link, text
            tokens.append(secret.group(1))
            assert status(address, "/v1/jobs", secret.group(1)) == 200
            exchange = f"{address}/v1/acl/token/onetime/exchange"
            body = {"OneTimeSecretID": link.group(2)}
            got = httpx2.post(exchange, json=body, timeout=20)
            assert got.status_code == 200, got.text
            assert got.json()["Token"]["SecretID"] == secret.group(1)
            assert httpx2.post(exchange, json=body, timeout=20).status_code != 200  # once
            page = httpx2.get(link.group(1), timeout=20)
            assert page.status_code == 200  # the page itself, the secret still in the query
    assert tokens[0] != tokens[1]
    with agent(data, "--dev") as (address, _):
        for old in tokens:  # each ended with its agent
            assert status(address, "/v1/jobs", old) == 403


def test_an_agent_open_to_every_local_user_says_so(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[acl]\nenabled = false\n")
    with agent(tmp_path / "data", "--config", str(config)) as (address, lines):
        warning = lines[-1]
        assert warning.startswith("yurt: warning: ACLs are disabled and raw_exec runs tasks "
                                  "as root: any local user"), lines
        node = subprocess.run([YURT, "node", "status"], capture_output=True, text=True,
                              timeout=60, check=False,
                              env={**without_suite_token(), "YURT_ADDR": address})
        assert node.returncode == 0, node.stderr
        assert "Warning: ACLs are disabled and raw_exec runs tasks as root" in node.stderr
    with agent(tmp_path / "acl-on") as (address, lines):  # the default: nothing to say
        assert not any("warning" in line for line in lines), lines

"""The token of the suite's agents. `yurt agent` has ACLs on by default; every agent a test
starts as a process inherits `$YURT_AGENT_TOKEN` (set by conftest.py), which makes this secret a
management token of that agent, and every `yurt` command a test runs inherits `$YURT_TOKEN`.
Tests of the ACL system itself start their agents without them (`without_suite_token`).

Agents name their data dir in the user's runtime dir while they run, and the CLI of that user
finds their bootstrap token through it (runtime/lib/datadir.py): the suite gives its processes
a runtime dir of its own (`RUNTIME_DIR`), so it writes nothing into the machine's, and a
command that must be a stranger to every agent gets an empty one (`stranger_env`)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Final

#: A fixed UUID: the ACL system takes only UUIDs as secrets.
SUITE_TOKEN: Final = "5b1c8e8e-7a43-4f0e-9d3a-1e2f3a4b5c6d"
#: Headers for a raw HTTP client of such an agent.
AUTH: Final = {"X-Nomad-Token": SUITE_TOKEN}
ENV_NAMES: Final = ("YURT_AGENT_TOKEN", "YURT_TOKEN", "NOMAD_TOKEN")


#: The suite's runtime dir (0700, this process's user's), shared by its agents and commands.
RUNTIME_DIR: Final = tempfile.mkdtemp(prefix="yurt-suite-run-")


def install() -> None:
    """Give every process the suite starts the suite's token and runtime dir (conftest.py,
    at import and before every test)."""
    for name in ENV_NAMES:
        os.environ.setdefault(name, SUITE_TOKEN)
    os.environ["XDG_RUNTIME_DIR"] = RUNTIME_DIR


def stranger_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (this process's by default) for a `yurt` command that knows no agent: no token
    in the environment, and an empty runtime dir, so it finds no agent's data dir either."""
    empty = tempfile.mkdtemp(prefix="yurt-stranger-run-")
    base = os.environ if env is None else env
    return {**{k: v for k, v in base.items() if k not in ENV_NAMES},
            "XDG_RUNTIME_DIR": empty}


def without_suite_token() -> dict[str, str]:
    """This process's environment without the suite's token, for an agent or a command that
    must meet the ACL system as a fresh install does."""
    return {k: v for k, v in os.environ.items() if k not in ENV_NAMES}


def bootstrap_token(data_dir: Path, timeout: float = 60.0) -> str:
    """The management token a `yurt agent` started without a token wrote on its first start
    (`<data dir>/server/bootstrap.token`), once it is there (the agent writes it after its API
    is up, before it is ready), waiting at most `timeout` seconds."""
    path = data_dir / "server" / "bootstrap.token"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"no bootstrap token at {path} after {timeout} s")
        time.sleep(0.02)
    return path.read_text().strip()

"""The token of the suite's agents. `yurt agent` has ACLs on by default; every agent a test
starts as a process inherits `$YURT_AGENT_TOKEN` (set by conftest.py), which makes this secret a
management token of that agent, and every `yurt` command a test runs inherits `$YURT_TOKEN`.
Tests of the ACL system itself start their agents without them (`without_suite_token`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Final

#: A fixed UUID: the ACL system takes only UUIDs as secrets.
SUITE_TOKEN: Final = "5b1c8e8e-7a43-4f0e-9d3a-1e2f3a4b5c6d"
#: Headers for a raw HTTP client of such an agent.
AUTH: Final = {"X-Nomad-Token": SUITE_TOKEN}
ENV_NAMES: Final = ("YURT_AGENT_TOKEN", "YURT_TOKEN", "NOMAD_TOKEN")


def install() -> None:
    """Give every process the suite starts the suite's token (conftest.py, at import)."""
    for name in ENV_NAMES:
        os.environ.setdefault(name, SUITE_TOKEN)


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

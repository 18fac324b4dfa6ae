"""How the scripts that start a `yurt agent` get in: the way an operator of a fresh install does.

`yurt agent` has ACLs on by default. The first start of a data dir bootstraps the ACL system
and writes the management token to `<data dir>/server/bootstrap.token` (0600), after its API
is bound and before it is ready (runtime/agent/aclsetup.py `start_acl`); later starts of the
same data dir find the bootstrap done and leave the file as it is. A script:

- starts the agent with `agent_env()`: its own environment less every token variable, so that
  a token exported in the caller's shell (or by a test suite) neither becomes the agent's
  static management token nor is what the CLI sends instead of the data dir's;
- waits for the token with `wait_token` (bounded). An agent that admits anonymous requests
  gives "" instead: one whose config turns ACLs off, or a build from before ACLs that a
  benchmark comparing builds may start;
- sends it as `X-Nomad-Token` (`headers`, or `header_line` for a raw socket) and runs the CLI
  with `cli_env` (`YURT_TOKEN_FILE`): the secret is never on a command line.

Invariant: nothing here writes the token anywhere, prints it or puts it in an argv.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

#: Where the first start writes the management token, under the data dir
#: (runtime/server/acl/settings.py `BOOTSTRAP_TOKEN_FILE`).
TOKEN_FILE: Final = Path("server") / "bootstrap.token"
HEADER: Final = "X-Nomad-Token"
#: The variables through which a token reaches `yurt agent` (`YURT_AGENT_TOKEN`), the CLI
#: (`YURT_TOKEN`, `YURT_TOKEN_FILE`, `NOMAD_TOKEN`) or a Nomad client (`NOMAD_TOKEN`).
TOKEN_VARIABLES: Final = ("YURT_AGENT_TOKEN", "YURT_TOKEN", "YURT_TOKEN_FILE", "NOMAD_TOKEN")


def agent_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without any token variable: for a daemon
    a script starts, so that it meets the ACL system as a fresh install does."""
    source = os.environ if base is None else base
    return {k: v for k, v in source.items() if k not in TOKEN_VARIABLES}


def token_path(data_dir: Path) -> Path:
    return data_dir / TOKEN_FILE


def cli_env(data_dir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for `yurt` commands against the agent of `data_dir`: the token file
    its first start wrote, as `YURT_TOKEN_FILE` (what the agent's start tells the operator)."""
    return {**agent_env(base), "YURT_TOKEN_FILE": str(token_path(data_dir))}


def read_token(data_dir: Path) -> str | None:
    """The management token of `data_dir`'s first start; None while it is not written yet (the
    agent writes it whole, through a rename, so a file that exists is complete)."""
    try:
        text = token_path(data_dir).read_text()
    except FileNotFoundError:
        return None
    return text.strip() or None


def _anonymous_admitted(base_url: str) -> bool:
    """Whether the agent at `base_url` answers `GET /v1/agent/self` without a token."""
    try:
        with urllib.request.urlopen(base_url + "/v1/agent/self", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False  # not up yet, or 403: ACLs on and the token not written yet


def wait_token(base_url: str, data_dir: Path, timeout: float = 60.0,
               exited: Callable[[], int | None] | None = None) -> str:
    """The token to send to the agent at `base_url` whose data dir is `data_dir`, once the
    agent has it: the bootstrap token, or "" when the agent admits anonymous requests (see
    the header). Raises TimeoutError after `timeout` seconds, RuntimeError when `exited()`
    (say `Popen.poll`) says the agent exited first."""
    deadline = time.monotonic() + timeout
    while True:
        if (token := read_token(data_dir)) is not None:
            return token
        if _anonymous_admitted(base_url):
            # An agent with ACLs on writes its file before it answers anything: look again.
            return read_token(data_dir) or ""
        if exited is not None and (code := exited()) is not None:
            raise RuntimeError(f"the agent exited ({code}) before it answered at {base_url}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no token at {token_path(data_dir)} and no anonymous answer "
                               f"from {base_url} after {timeout:.0f} s")
        time.sleep(0.02)


def headers(token: str) -> dict[str, str]:
    """The request headers that carry `token` ("" sends none)."""
    return {HEADER: token} if token else {}


def header_line(token: str) -> bytes:
    """The same as one raw HTTP/1.1 header line, CRLF included (b"" for no token)."""
    return f"{HEADER}: {token}\r\n".encode() if token else b""

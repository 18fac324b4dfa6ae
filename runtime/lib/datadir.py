"""Where `yurt agent` keeps its data when not told (`--data-dir`), and where in it the
bootstrap token lies: the one rule the agent, which writes there, and the CLI, which looks
there for a token (runtime/cli/api_client.py `client_token`), both follow.

The default is XDG's: `$XDG_DATA_HOME/yurt`, else `~/.local/share/yurt`, of the user who runs
the command. So the CLI finds the bootstrap token of an agent its own user started with the
default data dir, and nothing else: another user's agent keeps its file in that user's home,
0600 (runtime/ARCHITECTURE.md, DESIGN.md's security model).

Path arithmetic, read from the environment at each call (tests change it), and one I/O
helper, `make_private_parents`: no imports beyond the standard library, so the CLI may import
it without loading the agent.

A fresh machine has no `~/.local/share`: the agent creates what is missing of the default's
parents 0700 (XDG's rule for its base directories), where `mkdir -p` would leave them as the
umask makes them, readable by every user.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

#: The bootstrap token's file, under the data dir's `server/` (0600, the agent's user's).
BOOTSTRAP_TOKEN_FILE: Final = "bootstrap.token"


def default_data_dir() -> Path:
    """`yurt agent`'s data dir without `--data-dir`: `$XDG_DATA_HOME/yurt`, else
    `~/.local/share/yurt`."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "yurt"


def bootstrap_token_path(data_dir: Path) -> Path:
    """Where the agent whose data dir is `data_dir` writes its bootstrap (management) token."""
    return data_dir / "server" / BOOTSTRAP_TOKEN_FILE


def make_private_parents(path: Path) -> None:
    """Create the missing ancestors of `path` (not `path` itself), each 0700, from the top
    down. Blocking.

    Raises:
        OSError: one cannot be created (its `filename` says which).
    """
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        # One made meanwhile by another process is theirs, as it is.
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)

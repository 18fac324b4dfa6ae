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

An agent with another data dir (`--data-dir`, or `-dev`'s temporary one) is found through a
pointer: while it runs it names its data dir in `<runtime dir>/agent-<port>.datadir`
(`agent_pointer_path`), the runtime dir being `$XDG_RUNTIME_DIR/yurt`, else `/tmp/yurt-<uid>`:
a directory of this user's alone (0700, not a link, owned by the user: `private_runtime_dir`
refuses anything else, so another user cannot plant one in /tmp). The pointer holds a path, not
a secret; the token stays in the data dir, and the CLI's checks of it are the same.

A fresh machine has no `~/.local/share`: the agent creates what is missing of the default's
parents 0700 (XDG's rule for its base directories), where `mkdir -p` would leave them as the
umask makes them, readable by every user.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Final

#: The bootstrap token's file, under the data dir's `server/` (0600, the agent's user's).
BOOTSTRAP_TOKEN_FILE: Final = "bootstrap.token"


class UnsafeRuntimeDir(Exception):
    """The runtime dir exists but is not this user's private directory."""


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


def private_runtime_dir(*, create: bool) -> Path:
    """This user's runtime dir for yurt (see the module header), checked to be private.
    Blocking.

    Raises:
        FileNotFoundError: it does not exist and `create` is false.
        UnsafeRuntimeDir: it is a link, not a directory, another user's, or open to others.
        OSError: it cannot be created.
    """
    base = os.environ.get("XDG_RUNTIME_DIR")
    path = Path(base) / "yurt" if base and os.path.isabs(base) else \
        Path("/tmp") / f"yurt-{os.getuid()}"
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeRuntimeDir(f"{path} is not a directory")
    if info.st_uid != os.getuid():
        raise UnsafeRuntimeDir(f"{path} belongs to uid {info.st_uid}, not to this user")
    if info.st_mode & 0o077:
        raise UnsafeRuntimeDir(f"{path} is open to other users "
                               f"(mode {stat.S_IMODE(info.st_mode):o})")
    return path


def agent_pointer_path(runtime_dir: Path, port: int) -> Path:
    """Where the agent listening on `port` names its data dir."""
    return runtime_dir / f"agent-{port}.datadir"


def write_agent_pointer(port: int, data_dir: Path) -> Path:
    """Name `data_dir` as the data dir of the agent on `port` (replacing any earlier
    pointer whole); the pointer's path. Blocking.

    Raises:
        UnsafeRuntimeDir, OSError: as `private_runtime_dir`, or the file cannot be written.
    """
    path = agent_pointer_path(private_runtime_dir(create=True), port)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, str(data_dir).encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def remove_agent_pointer(path: Path, data_dir: Path) -> None:
    """Remove the pointer at `path` if it still names `data_dir` (an agent started on the
    port since has put its own). Blocking; a pointer already gone is no error."""
    with contextlib.suppress(FileNotFoundError):
        if path.read_text(encoding="utf-8") == str(data_dir):
            path.unlink()


def pointed_data_dir(port: int) -> Path | None:
    """The data dir the agent on `port` named, if this user's runtime dir has a pointer for
    it; None otherwise (no runtime dir, an unsafe one, no pointer). Blocking."""
    try:
        text = agent_pointer_path(private_runtime_dir(create=False), port).read_text(
            encoding="utf-8")
    except (OSError, UnsafeRuntimeDir, UnicodeDecodeError):
        return None
    return Path(text) if os.path.isabs(text) else None

"""Who may read a `file://` source: the task's user, not the agent.

Why: the agent usually runs as root, and a `file://` artifact is copied by the agent. Without
a check, a job whose task runs as `nobody` could have `/etc/shadow` copied into its task
directory. So, for a task with a `user`, every directory on the way to the source must be
searchable and the source (each file and directory of a tree) readable *by that user*, judged
from the owner, group and mode bits as the kernel judges them (supplementary groups included;
ACLs are not consulted, so an ACL that grants more is not honoured). A task without a `user`
runs as the agent's user and may read what the agent reads, so nothing is checked for it.

The check runs on the real path just before the copy. The copy runs as the agent, but judges
again what it opened, on the descriptor it reads (`fetch.open_regular`, `unpack.copy_tree`,
with `may`): a file swapped in after the check is judged as itself. What remains a known gap
is a directory on the way to a single-file source swapped, between the check and the open, by
someone who can write its parent, for one the task's user could not search.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from yurt.runtime.client.getter.source import GetterError


@dataclass(frozen=True)
class Reader:
    name: str
    uid: int
    groups: frozenset[int]


def reader_of(user: str) -> Reader:
    """The task user's ids (a name, or a numeric uid with a passwd entry)."""
    try:
        entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise GetterError(f'user "{user}" does not exist on this node') from None
    groups = frozenset(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return Reader(user, entry.pw_uid, groups)


def may(st: os.stat_result, reader: Reader, want: int) -> bool:
    """Whether `reader` has the `want` bits (4 read, 2 write, 1 search) on a file."""
    if reader.uid == 0:
        return True
    if st.st_uid == reader.uid:
        bits = st.st_mode >> 6
    elif st.st_gid in reader.groups:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & want == want


def check_readable(path: Path, reader: Reader) -> None:
    """Raise `GetterError` unless `reader` can reach and read `path` (a directory: list and
    search it)."""
    real = Path(os.path.realpath(path))
    try:
        for parent in reversed(real.parents):
            if not may(os.stat(parent), reader, 1):
                raise GetterError(f"{path}: permission denied for user \"{reader.name}\"")
        st = os.stat(real)
    except OSError as e:
        raise GetterError(f"{path}: {e.strerror}") from None
    if not may(st, reader, 5 if stat.S_ISDIR(st.st_mode) else 4):
        raise GetterError(f"{path}: permission denied for user \"{reader.name}\"")

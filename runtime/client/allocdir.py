"""The allocation directory in Nomad's layout (`client/allocdir/alloc_dir.go` `AllocDir`):

    <data-dir>/                    the agent's: 0711 (`make_data_dir`)
      alloc/                       0711: the allocations' ids cannot be listed
        <alloc-id>/
          alloc/{data,logs,tmp}    shared by the group's tasks (NOMAD_ALLOC_DIR)
          <task>/{local,secrets,tmp}  per task (NOMAD_TASK_DIR, NOMAD_SECRETS_DIR)

Who may read and write where is a security decision: the agent runs as root, every local user
can reach the data dir, and a task's logs and rendered templates (`local/`, Variables included)
are secrets. Nomad makes the shared dirs 0777 and relies on its drivers' isolation; a raw_exec
node has none, so here nothing below the data dir is open to a user that no task of the
allocation runs as:

- The data dir and `alloc/` under it are 0711 (searchable, so a task reaches its own dirs, but
  not listable); a wider mode an older yurt left is narrowed.
- A task's own `local`, `secrets` and `tmp` belong to its `user` (`owner`, default the
  agent's) and are 0700. The task dir itself stays the agent's (0755): the task cannot swap
  its subdirectories for links the agent would follow.
- `alloc/data` and `alloc/tmp` (`Sharing`): when every task runs as the agent's user (no
  `user`, or root), they are the agent's, 0700. When the tasks run as one other user, they
  are that user's, group its primary group, 02770. When several users share them, they are
  the agent's with a group all of them are in, 02770 (the set-gid bit: what one task creates
  there keeps that group, so the others can reach it; no sticky world-writable dir, so nobody
  else can plant a link there). That group is the users' primary group when they all have
  the same one, so the common case changes nothing on the system. Otherwise it is a group
  made for the allocation (`yurt-<alloc8>-<hash>`, `groupadd --system`, the users as members,
  which `setpriv --init-groups` in client/drivers/users.py gives each task), removed when the
  allocation dir is destroyed. Rejected: using a shared primary group only (tasks of users
  with different primary groups could no longer share `alloc/data`, which worked before);
  always making a group (every allocation with a `user` would edit /etc/group); POSIX ACLs
  (not every file system has them, and their default entries fight the tasks' umask).
  Members of the shared group who are not task users (other accounts whose primary group it
  is) can reach those dirs too: an account that shares a task user's group, like one that
  shares its uid, is trusted with it.
- `alloc/logs` belongs to the agent alone: only it creates the FIFOs and log files there, so
  a task cannot plant a link for the root agent to follow. With task users, the shared group
  may read it (02750; log files 0640, FIFOs 0600: client/logs/pump.py), as a log-shipping
  sidecar reads `${NOMAD_ALLOC_DIR}/logs` in Nomad; without, it is 0700.

Every operation is idempotent (`mkdir(exist_ok)`, remove-if-present), so concurrent builds of
different tasks, or a build repeated after an agent restart, are safe; blocking file-system
work runs in worker threads. An allocation's whole tree (its shared dirs, every task's dirs
and log FIFOs) is built in ONE worker-thread hop (`build_all`): with hundreds of allocations
starting at once, a hop per task and per step queued them all behind each other's hops and
made every task advance in lock-step. The object remembers what that batch built, so a
task's own hooks (`build_task`, the log FIFOs) skip the hop the batch already made; `move()`
and `destroy()` forget it, for what they touch must be built again.

`move()` hands a previous allocation's data to this one (sticky and migrating ephemeral
disks): `alloc/data` and each task's `local/`; the moved `alloc/data` is given this
allocation's owner and mode.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

import trio

from yurt.runtime.client.logs.pump import make_fifo
from yurt.runtime.errors import StateError

#: The data dir and its `alloc/`: searchable by the tasks' users, listable by nobody else.
DATA_DIR_MODE: Final = 0o711
#: `alloc/data` and `alloc/tmp` shared with task users (see the header), or the agent's only.
SHARED_MODE: Final = 0o2770
PRIVATE_MODE: Final = 0o700
#: `alloc/logs`: read by the tasks' group, written by the agent alone.
LOGS_SHARED_MODE: Final = 0o2750
TASK_MODES: Final = {"local": 0o700, "secrets": 0o700, "tmp": 0o700}
SHARED_DIRS: Final = ("data", "logs", "tmp")
TASK_DIRS: Final = tuple(TASK_MODES)
#: The prefix of the groups made for allocations whose task users share no primary group.
GROUP_PREFIX: Final = "yurt-"
#: groupadd, gpasswd and groupdel: a sysadmin's tools, often outside a service's PATH.
ADMIN_PATH: Final = "/usr/sbin:/usr/bin:/sbin:/bin"
_TOOL_SECONDS: Final = 60.0

#: Turns a task's `user` into (uid, gid), or None when it is not known.
ResolveOwner = Callable[[str], "tuple[int, int] | None"]


def make_data_dir(path: Path) -> None:
    """Create the agent's data dir `path` (0711; missing parents as the umask makes them), or
    narrow one an older yurt left readable or writable by others to 0711.

    Raises:
        StateError: `path` is writable by every user (a shared directory such as /tmp):
            narrowing it would break it for everybody else, keeping it would let any user
            replace what the agent keeps there.
        OSError: it cannot be created.
    """
    path.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
    _narrow(path, "data dir")


def _narrow(path: Path, what: str) -> None:
    st = os.stat(path)
    if os.statvfs(path).f_flag & os.ST_RDONLY:
        return  # nobody writes it, whatever its mode: the agent's first write says it is read-only
    if st.st_mode & stat.S_IWOTH:
        raise StateError(f"the {what} {path} is writable by every user (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}); give the agent a directory of "
                         "its own")
    if st.st_mode & 0o066:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o066)


@final
@dataclass(frozen=True)
class Sharing:
    """Who `alloc/data` and `alloc/tmp` belong to (uid, gid, mode), and the group that may
    read `alloc/logs` (None: the agent alone). `made_group`: the name of the group made for
    the allocation, if one was (see the header)."""

    uid: int
    gid: int
    mode: int
    logs_gid: int | None
    made_group: str | None = None


def group_name(alloc_id: str, path: Path) -> str:
    """The name of the group made for the allocation dir `path` (at most 32 characters, as
    `groupadd` wants them): the allocation's first 8 characters, for the operator, and a
    hash of the whole path, so two data dirs (two agents, two test runs) never share one."""
    short = re.sub(r"[^a-z0-9]", "", alloc_id.lower())[:8]
    digest = hashlib.blake2b(str(path).encode(), digest_size=4).hexdigest()
    return f"{GROUP_PREFIX}{short}-{digest}" if short else f"{GROUP_PREFIX}{digest}"


def _admin(*argv: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which(argv[0], path=f"{os.environ.get('PATH', '')}:{ADMIN_PATH}")
    if tool is None:
        raise StateError(f"{argv[0]} (shadow-utils) is not installed: the allocation's task "
                         "users share no group, and one cannot be made for them")
    return subprocess.run([tool, *argv[1:]], capture_output=True, text=True, check=False,
                          timeout=_TOOL_SECONDS, stdin=subprocess.DEVNULL)


def _make_group(name: str, members: Sequence[str]) -> int:
    """The gid of the group `name` with exactly `members`, made (a system group) if missing.
    Raises `StateError` when the tools fail."""
    try:
        grp.getgrnam(name)
    except KeyError:
        made = _admin("groupadd", "--system", name)
        if made.returncode not in (0, 9):  # 9: made meanwhile, by a build of the same dir
            raise StateError(f"cannot make the group {name} for the allocation's task users "
                             f"{', '.join(members)}: groupadd: {made.stderr.strip()}") from None
    entry = grp.getgrnam(name)
    if sorted(entry.gr_mem) != sorted(members):
        set_members = _admin("gpasswd", "-M", ",".join(members), name)
        if set_members.returncode != 0:
            raise StateError(f"cannot add the allocation's task users {', '.join(members)} "
                             f"to the group {name}: gpasswd: {set_members.stderr.strip()}")
    return entry.gr_gid


def _remove_group(name: str) -> None:
    """Remove the group made for an allocation, if there is one (best effort: a group left
    behind gives its members nothing once the directory is gone)."""
    try:
        grp.getgrnam(name)
    except KeyError:
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError, StateError):
        _admin("groupdel", name)


def decide_sharing(owners: Sequence[tuple[int, int]],
                   make_group: Callable[[list[str]], tuple[str, int]]) -> Sharing:
    """Who the shared dirs belong to, given the (uid, gid) every task runs as (see the
    header). `make_group(user names)` makes the allocation's group and answers its name and
    gid, when the users share no primary group. Tasks that run as the agent's user, or as
    root, need no access granted: they have it."""
    me = (os.geteuid(), os.getegid())
    users = sorted({o for o in owners if o[0] not in (0, me[0])})
    if not users or me[0] != 0:
        # A non-root agent cannot give anything away (its driver refuses other users).
        return Sharing(*me, PRIVATE_MODE, None)
    if len(users) == 1:
        uid, gid = users[0]
        return Sharing(uid, gid, SHARED_MODE, gid)
    gids = {gid for _, gid in users}
    if len(gids) == 1:
        gid = gids.pop()
        return Sharing(me[0], gid, SHARED_MODE, gid)
    name, gid = make_group(sorted({_user_name(uid) for uid, _ in users}))
    return Sharing(me[0], gid, SHARED_MODE, gid, made_group=name)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        raise StateError(f"uid {uid} has no passwd entry to add to the allocation's "
                         "group") from None


@final
class AllocDir:
    def __init__(self, root: Path, alloc_id: str) -> None:
        self.path = root / alloc_id
        self.shared = self.path / "alloc"
        self.logs = self.shared / "logs"
        #: The group made for this allocation, should its task users share none.
        self.group = group_name(alloc_id, self.path)
        # What `build_all` built (task -> the user it was built for; FIFO paths) and how it
        # shared `alloc/`: read on the event loop, recorded there once the worker thread is
        # done.
        self._built_tasks: dict[str, str] = {}
        self._made_fifos: set[Path] = set()
        self._sharing: Sharing | None = None

    @classmethod
    def containing(cls, task_dir: Path) -> AllocDir:
        """The alloc dir a task dir (`<root>/<alloc id>/<task>`) belongs to."""
        return cls(task_dir.parent.parent, task_dir.parent.name)

    def task_dir(self, task: str) -> Path:
        return self.path / task

    def _make_group(self, members: list[str]) -> tuple[str, int]:
        return self.group, _make_group(self.group, members)

    def _build(self, sharing: Sharing | None = None) -> Sharing:
        if sharing is None:  # what the last batch decided, or the agent's alone
            sharing = self._sharing or decide_sharing([], self._make_group)
        root = self.path.parent
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=DATA_DIR_MODE, parents=True)
        _narrow(root, "allocations dir")
        self.path.mkdir(exist_ok=True)
        os.chmod(self.path, 0o755, follow_symlinks=False)
        self.shared.mkdir(exist_ok=True)
        os.chmod(self.shared, 0o755, follow_symlinks=False)
        for sub in SHARED_DIRS:
            path = self.shared / sub
            path.mkdir(mode=PRIVATE_MODE, exist_ok=True)
            # follow_symlinks=False throughout: `alloc/` is the agent's, so no task can put
            # a link in their place; and should one be there, it is changed, not its target.
            if sub == "logs":
                gid = sharing.logs_gid
                os.chown(path, os.geteuid(), -1 if gid is None else gid, follow_symlinks=False)
                mode = PRIVATE_MODE if gid is None else LOGS_SHARED_MODE
            else:
                os.chown(path, sharing.uid, sharing.gid, follow_symlinks=False)
                mode = sharing.mode
            os.chmod(path, mode, follow_symlinks=False)  # after the chown, which clears set-gid
        return sharing

    async def build(self) -> None:
        """Build the shared dirs (as the last `build_all` shared them; else the agent's)."""
        self._sharing = await trio.to_thread.run_sync(self._build)

    def _build_task(self, task: str, owner: tuple[int, int] | None) -> Path:
        uid, gid = owner if owner is not None else (os.getuid(), os.getgid())
        base = self.task_dir(task)
        base.mkdir(parents=True, exist_ok=True)
        # Owned by root, not the task: the task must not swap its subdirectories for links.
        os.chmod(base, 0o755, follow_symlinks=False)
        for sub, mode in TASK_MODES.items():
            path = base / sub
            path.mkdir(exist_ok=True)
            # follow_symlinks=False: a link planted in place of a directory is changed, not
            # the file it points to.
            os.chown(path, uid, gid, follow_symlinks=False)
            os.chmod(path, mode, follow_symlinks=False)
        return base

    async def build_task(self, task: str, owner: tuple[int, int] | None = None) -> Path:
        """Build `<task>/{local,secrets,tmp}`, owned by `owner` (uid, gid; default: the
        agent's own user)."""
        return await trio.to_thread.run_sync(self._build_task, task, owner)

    def _build_all(self, tasks: Mapping[str, str], resolve_owner: ResolveOwner | None,
                   fifos: Sequence[Path]) -> Sharing:
        # The passwd lookups may go to NSS (LDAP, …): here, in the worker thread.
        owners = {task: resolve_owner(user) if user and resolve_owner is not None else None
                  for task, user in tasks.items()}
        sharing = self._build(decide_sharing([o for o in owners.values() if o is not None],
                                             self._make_group))
        for task, owner in owners.items():
            self._build_task(task, owner)
        for path in fifos:
            make_fifo(path)
        return sharing

    async def build_all(self, tasks: Mapping[str, str], *,
                        resolve_owner: ResolveOwner | None = None, fifos: Sequence[Path] = (),
                        limiter: trio.CapacityLimiter | None = None) -> None:
        """Build the allocation's tree in one worker-thread hop: the shared dirs, shared with
        the users of every task of the group (see the header), the dirs of every task
        (`{task: user}`, "" for the agent's user) and the log FIFOs `fifos`.

        `limiter` bounds the threads the builds of many allocations use at once (they
        contend for the interpreter lock, not for the disk).

        Raises:
            StateError: the task users share no group and none could be made for them.
        """
        self._sharing = await trio.to_thread.run_sync(self._build_all, tasks, resolve_owner,
                                                      fifos, limiter=limiter)
        self._built_tasks.update(tasks)
        self._made_fifos.update(fifos)

    def task_built(self, task: str, user: str) -> bool:
        """Whether `build_all` built `task`'s dirs for `user`, and nothing undid it since."""
        return self._built_tasks.get(task) == user

    def fifo_made(self, path: Path) -> bool:
        """Whether `build_all` made the FIFO at `path`, and nothing removed it since."""
        return path in self._made_fifos

    def _forget_built(self) -> None:
        self._built_tasks.clear()
        self._made_fifos.clear()

    async def exists(self) -> bool:
        return await trio.to_thread.run_sync(self.path.is_dir)

    def _destroy(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        _remove_group(self.group)  # by name: an agent restarted since does not know it made it

    async def destroy(self) -> None:
        self._forget_built()
        self._sharing = None
        await trio.to_thread.run_sync(self._destroy)

    def _move(self, previous: AllocDir, tasks: list[str], sharing: Sharing | None) -> None:
        data = self.shared / "data"
        pairs = [(previous.shared / "data", data)]
        pairs += [(previous.task_dir(t) / "local", self.task_dir(t) / "local") for t in tasks]
        for src, dst in pairs:
            if not src.exists():
                continue
            if dst.exists():
                if any(dst.iterdir()):
                    continue  # never overwrite data the new allocation already has
                dst.rmdir()
            dst.parent.mkdir(parents=True, exist_ok=True)
            src.rename(dst)
            if dst == data and sharing is not None:
                # This allocation's owner and mode (the files inside keep theirs). `alloc/`
                # is the agent's: no task can have put a link at `data`.
                os.chown(dst, sharing.uid, sharing.gid, follow_symlinks=False)
                os.chmod(dst, sharing.mode, follow_symlinks=False)

    async def move(self, previous: AllocDir, tasks: list[str]) -> None:
        # A moved-in `local` keeps the previous allocation's owner: the task's own hook must
        # build (chown) it again.
        self._forget_built()
        await trio.to_thread.run_sync(self._move, previous, tasks, self._sharing)

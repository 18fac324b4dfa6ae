"""The allocation directory in Nomad's layout (`client/allocdir/alloc_dir.go` `AllocDir`):

    <data-dir>/alloc/<alloc-id>/
      alloc/{data,logs,tmp}        shared by the group's tasks (NOMAD_ALLOC_DIR)
      <task>/{local,secrets,tmp}   per task (NOMAD_TASK_DIR, NOMAD_SECRETS_DIR)

Who may write where (a root agent shares these directories with unprivileged tasks, so a
mode is a security decision): `alloc/logs` belongs to the agent alone (0755): only it creates
the FIFOs and log files there, so a task cannot plant a link for the root agent to follow.
`alloc/data` and `alloc/tmp` are shared by tasks that may run as different users: world-
writable, but sticky (01777), so nobody removes or replaces another user's file. A task's own
directories are owned by the task's user (`owner`, default the agent's): `local` 0755,
`secrets` 0700, `tmp` 01777.

Every operation is idempotent (`mkdir(exist_ok)`, remove-if-present), so concurrent builds of
different tasks, or a build repeated after an agent restart, are safe; blocking file-system
work runs in worker threads. An allocation's whole tree (its shared dirs, every task's dirs
and log FIFOs) is built in ONE worker-thread hop (`build_all`): with hundreds of allocations
starting at once, a hop per task and per step queued them all behind each other's hops and
made every task advance in lock-step. The object remembers what that batch built, so a
task's own hooks (`build_task`, the log FIFOs) skip the hop the batch already made; `move()`
and `destroy()` forget it, for what they touch must be built again.

`move()` hands a previous allocation's data to this one (sticky and migrating ephemeral
disks): `alloc/data` and each task's `local/`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final, final

import trio

from yurt.runtime.client.logs.pump import make_fifo

SHARED_MODES: Final = {"data": 0o1777, "logs": 0o755, "tmp": 0o1777}
TASK_MODES: Final = {"local": 0o755, "secrets": 0o700, "tmp": 0o1777}
SHARED_DIRS: Final = tuple(SHARED_MODES)
TASK_DIRS: Final = tuple(TASK_MODES)

#: Turns a task's `user` into (uid, gid), or None when it is not known.
ResolveOwner = Callable[[str], "tuple[int, int] | None"]


@final
class AllocDir:
    def __init__(self, root: Path, alloc_id: str) -> None:
        self.path = root / alloc_id
        self.shared = self.path / "alloc"
        self.logs = self.shared / "logs"
        # What `build_all` built (task -> the user it was built for; FIFO paths): read on the
        # event loop, recorded there once the worker thread is done.
        self._built_tasks: dict[str, str] = {}
        self._made_fifos: set[Path] = set()

    @classmethod
    def containing(cls, task_dir: Path) -> AllocDir:
        """The alloc dir a task dir (`<root>/<alloc id>/<task>`) belongs to."""
        return cls(task_dir.parent.parent, task_dir.parent.name)

    def task_dir(self, task: str) -> Path:
        return self.path / task

    def _build(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path, 0o755)
        self.shared.mkdir(exist_ok=True)
        os.chmod(self.shared, 0o755)
        for sub, mode in SHARED_MODES.items():
            (self.shared / sub).mkdir(exist_ok=True)
            os.chmod(self.shared / sub, mode, follow_symlinks=False)

    async def build(self) -> None:
        await trio.to_thread.run_sync(self._build)

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
                   fifos: Sequence[Path]) -> None:
        self._build()
        for task, user in tasks.items():
            # The passwd lookup may go to NSS (LDAP, …): here, in the worker thread.
            owner = resolve_owner(user) if user and resolve_owner is not None else None
            self._build_task(task, owner)
        for path in fifos:
            make_fifo(path)

    async def build_all(self, tasks: Mapping[str, str], *,
                        resolve_owner: ResolveOwner | None = None, fifos: Sequence[Path] = (),
                        limiter: trio.CapacityLimiter | None = None) -> None:
        """Build the allocation's tree in one worker-thread hop: the shared dirs, the dirs of
        every task (`{task: user}`, "" for the agent's user) and the log FIFOs `fifos`.

        `limiter` bounds the threads the builds of many allocations use at once (they
        contend for the interpreter lock, not for the disk)."""
        await trio.to_thread.run_sync(self._build_all, tasks, resolve_owner, fifos,
                                      limiter=limiter)
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

    async def destroy(self) -> None:
        self._forget_built()
        await trio.to_thread.run_sync(shutil.rmtree, self.path, True)

    def _move(self, previous: AllocDir, tasks: list[str]) -> None:
        pairs = [(previous.shared / "data", self.shared / "data")]
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

    async def move(self, previous: AllocDir, tasks: list[str]) -> None:
        # A moved-in `local` keeps the previous allocation's owner: the task's own hook must
        # build (chown) it again.
        self._forget_built()
        await trio.to_thread.run_sync(self._move, previous, tasks)

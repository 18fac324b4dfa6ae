"""The allocation directory, Nomad's layout (reference §7.1):

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
work runs in worker threads. `move()` hands a previous allocation's data to this one (sticky
and migrating ephemeral disks): `alloc/data` and each task's `local/`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final, final

import trio

SHARED_MODES: Final = {"data": 0o1777, "logs": 0o755, "tmp": 0o1777}
TASK_MODES: Final = {"local": 0o755, "secrets": 0o700, "tmp": 0o1777}
SHARED_DIRS: Final = tuple(SHARED_MODES)
TASK_DIRS: Final = tuple(TASK_MODES)


@final
class AllocDir:
    def __init__(self, root: Path, alloc_id: str) -> None:
        self.path = root / alloc_id
        self.shared = self.path / "alloc"
        self.logs = self.shared / "logs"

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

    async def exists(self) -> bool:
        return await trio.to_thread.run_sync(self.path.is_dir)

    async def destroy(self) -> None:
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
        await trio.to_thread.run_sync(self._move, previous, tasks)

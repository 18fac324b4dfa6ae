"""The allocation directory, Nomad's layout (reference §7.1):

    <data-dir>/alloc/<alloc-id>/
      alloc/{data,logs,tmp}        shared by the group's tasks (NOMAD_ALLOC_DIR)
      <task>/{local,secrets,tmp}   per task (NOMAD_TASK_DIR, NOMAD_SECRETS_DIR)

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

SHARED_DIRS: Final = ("data", "logs", "tmp")
TASK_DIRS: Final = ("local", "secrets", "tmp")


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
        for sub in SHARED_DIRS:
            (self.shared / sub).mkdir(exist_ok=True)
            os.chmod(self.shared / sub, 0o777)

    async def build(self) -> None:
        await trio.to_thread.run_sync(self._build)

    def _build_task(self, task: str) -> Path:
        base = self.task_dir(task)
        base.mkdir(parents=True, exist_ok=True)
        os.chmod(base, 0o777)
        for sub in TASK_DIRS:
            (base / sub).mkdir(exist_ok=True)
        os.chmod(base / "local", 0o777)
        os.chmod(base / "secrets", 0o777)
        os.chmod(base / "tmp", 0o1777)
        return base

    async def build_task(self, task: str) -> Path:
        return await trio.to_thread.run_sync(self._build_task, task)

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

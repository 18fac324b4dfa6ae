"""The alloc dir on a real file system (layer 2): layout, idempotence, destroy, move."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
import trio

from yurt.hooks.alloc_dir import AllocDirHook
from yurt.hooks.base import TaskHookContext
from yurt.hooks.task_dir import TaskDirHook
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.structs import Allocation, Task, TaskEvent


async def test_layout_modes_and_idempotence(tmp_path: Path) -> None:
    with trio.fail_after(10):
        d = AllocDir(tmp_path, "a1")
        async with trio.open_nursery() as nursery:  # concurrent builds are safe
            nursery.start_soon(d.build)
            nursery.start_soon(d.build)
        await d.build_task("web")
        await d.build_task("web")
    assert sorted(p.name for p in d.shared.iterdir()) == ["data", "logs", "tmp"]
    assert sorted(p.name for p in d.task_dir("web").iterdir()) == ["local", "secrets", "tmp"]
    assert stat.S_IMODE(d.path.stat().st_mode) == 0o755
    assert stat.S_IMODE((d.shared / "data").stat().st_mode) == 0o1777
    assert stat.S_IMODE((d.task_dir("web") / "tmp").stat().st_mode) == 0o1777
    assert await d.exists()


async def test_no_directory_is_world_writable_without_the_sticky_bit(tmp_path: Path) -> None:
    with trio.fail_after(10):
        d = AllocDir(tmp_path, "a1")
        await d.build()
        await d.build_task("web")
    for path in [d.path, *d.path.rglob("*")]:
        mode = path.lstat().st_mode
        if mode & stat.S_IWOTH:
            assert mode & stat.S_ISVTX, path
    # Only the agent writes in the logs dir: nobody can plant a link there.
    assert stat.S_IMODE(d.logs.stat().st_mode) == 0o755
    assert stat.S_IMODE((d.task_dir("web") / "secrets").stat().st_mode) == 0o700


async def test_task_dirs_belong_to_the_task_user(tmp_path: Path) -> None:
    nobody = (65534, 65534)
    with trio.fail_after(10):
        d = AllocDir(tmp_path, "a1")
        await d.build()
        base = await d.build_task("web", owner=nobody)
    for sub in ("local", "secrets", "tmp"):
        st = (base / sub).stat()
        assert (st.st_uid, st.st_gid) == nobody, sub
    # The task dir itself stays the agent's: the task cannot swap `secrets` or the shim's
    # state for links the root agent would follow.
    assert base.stat().st_uid == os.getuid()
    assert stat.S_IMODE(base.stat().st_mode) == 0o755


async def test_destroy_removes_everything(tmp_path: Path) -> None:
    with trio.fail_after(10):
        d = AllocDir(tmp_path, "a1")
        await d.build()
        await d.build_task("web")
        (d.task_dir("web") / "local" / "file").write_text("x")
        await d.destroy()
        assert not await d.exists()
        await d.destroy()  # again: no error


async def test_move_hands_data_and_local_dirs_to_the_new_alloc(tmp_path: Path) -> None:
    with trio.fail_after(10):
        old, new = AllocDir(tmp_path, "old"), AllocDir(tmp_path, "new")
        for d in (old, new):
            await d.build()
            await d.build_task("web")
        (old.shared / "data" / "db").write_text("rows")
        (old.task_dir("web") / "local" / "cache").write_text("warm")
        await new.move(old, ["web"])
    assert (new.shared / "data" / "db").read_text() == "rows"
    assert (new.task_dir("web") / "local" / "cache").read_text() == "warm"
    assert not (old.shared / "data").exists()


async def test_task_dir_hook_gives_the_dirs_to_the_jobspec_user(tmp_path: Path) -> None:
    asked: list[str] = []

    def resolve(user: str) -> tuple[int, int]:
        asked.append(user)
        return (65534, 65534)

    async def emit(event: TaskEvent) -> None:
        await trio.lowlevel.checkpoint()

    d = AllocDir(tmp_path, "a1")
    with trio.fail_after(10):
        await d.build()
        ctx = TaskHookContext(alloc=Allocation(id="a1"), task=Task(name="web", user="nobody"),
                              task_dir=d.task_dir("web"), emit_event=emit,
                              unix_clock=lambda: 0)
        await TaskDirHook(resolve_owner=resolve).prestart(ctx, {})
    assert asked == ["nobody"]
    assert (d.task_dir("web") / "secrets").stat().st_uid == 65534


async def test_alloc_dir_hook_retries_fd_exhaustion(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    d = AllocDir(tmp_path, "a1")
    real_build, calls = d._build, []

    def exhausted_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        real_build()

    monkeypatch.setattr(d, "_build", exhausted_once)
    with trio.fail_after(10):
        await AllocDirHook(d).prerun()
    assert len(calls) == 2
    assert await d.exists()


async def test_one_batch_builds_the_whole_tree_and_the_task_hook_reuses_it(
        tmp_path: Path, thread_hops: list[str]) -> None:
    asked: list[str] = []

    def resolve(user: str) -> tuple[int, int] | None:
        asked.append(user)
        return (65534, 65534)

    async def emit(event: TaskEvent) -> None:
        await trio.lowlevel.checkpoint()

    d = AllocDir(tmp_path, "a1")
    fifo = d.logs / ".web.stdout.fifo"
    with trio.fail_after(10):
        await AllocDirHook(d, tasks={"web": "nobody", "db": ""}, resolve_owner=resolve,
                           fifos=[fifo]).prerun()
        assert len(thread_hops) == 1  # the shared dirs, both tasks and the FIFO: one hop
        ctx = TaskHookContext(alloc=Allocation(id="a1"), task=Task(name="web", user="nobody"),
                              task_dir=d.task_dir("web"), emit_event=emit,
                              unix_clock=lambda: 0)
        response = await TaskDirHook(resolve_owner=resolve, alloc_dir=d).prestart(ctx, {})
    assert len(thread_hops) == 1  # the task's own hook found its dirs built
    assert response.done
    assert response.env
    assert asked == ["nobody"]
    assert (d.task_dir("web") / "secrets").stat().st_uid == 65534
    assert stat.S_IMODE((d.task_dir("db") / "tmp").stat().st_mode) == 0o1777
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert d.fifo_made(fifo)


async def test_a_moved_disk_is_built_again_by_the_task_hook(tmp_path: Path) -> None:
    async def emit(event: TaskEvent) -> None:
        await trio.lowlevel.checkpoint()

    previous, d = AllocDir(tmp_path, "a0"), AllocDir(tmp_path, "a1")
    with trio.fail_after(10):
        await previous.build_all({"web": ""})
        await d.build_all({"web": ""})
        assert d.task_built("web", "")
        await d.move(previous, ["web"])
        assert not d.task_built("web", "")  # the moved-in local/ gets its owner again
        ctx = TaskHookContext(alloc=Allocation(id="a1"), task=Task(name="web"),
                              task_dir=d.task_dir("web"), emit_event=emit,
                              unix_clock=lambda: 0)
        await TaskDirHook(alloc_dir=d).prestart(ctx, {})
    assert stat.S_IMODE((d.task_dir("web") / "local").stat().st_mode) == 0o755

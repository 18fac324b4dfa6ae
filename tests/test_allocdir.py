"""The alloc dir on a real file system (layer 2): layout, idempotence, destroy, move, and who
may reach the dirs the tasks share."""

from __future__ import annotations

import errno
import grp
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from yurt.hooks.alloc_dir import AllocDirHook
from yurt.hooks.base import TaskHookContext
from yurt.hooks.task_dir import TaskDirHook
from yurt.runtime.client.allocdir import ADMIN_PATH, AllocDir, Sharing, decide_sharing
from yurt.runtime.client.drivers.users import owner_of
from yurt.runtime.client.logs.pump import open_log_file
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
    # No task runs as another user: the shared dirs are the agent's alone.
    assert stat.S_IMODE((d.shared / "data").stat().st_mode) == 0o700
    assert stat.S_IMODE((d.task_dir("web") / "tmp").stat().st_mode) == 0o700
    assert await d.exists()


async def test_no_directory_is_writable_by_others(tmp_path: Path) -> None:
    with trio.fail_after(10):
        d = AllocDir(tmp_path, "a1")
        await d.build()
        await d.build_task("web")
    for path in [d.path, *d.path.rglob("*")]:
        assert not path.lstat().st_mode & 0o022, path
    # Only the agent writes in the logs dir: nobody can plant a link there.
    assert stat.S_IMODE(d.logs.stat().st_mode) == 0o700
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

    def exhausted_once(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_build(*args)

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
    assert stat.S_IMODE((d.task_dir("db") / "tmp").stat().st_mode) == 0o700
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
    assert stat.S_IMODE((d.task_dir("web") / "local").stat().st_mode) == 0o700


# Who the shared dirs belong to (client/allocdir.py's header): never every user.

def test_sharing_follows_the_task_users() -> None:
    made: list[list[str]] = []

    def make_group(names: list[str]) -> tuple[str, int]:
        made.append(names)
        return "yurt-test", 4999

    me = (os.geteuid(), os.getegid())
    agent_only = Sharing(*me, 0o700, None)
    assert decide_sharing([], make_group) == agent_only
    assert decide_sharing([(0, 0), me], make_group) == agent_only  # root tasks need nothing
    if os.geteuid() != 0:  # a non-root agent gives nothing away
        assert decide_sharing([(65534, 65534)], make_group) == agent_only
        return
    assert decide_sharing([(65534, 65534), (0, 0)], make_group) == Sharing(
        65534, 65534, 0o2770, 65534)
    # Several users with one primary group: that group, and /etc/group untouched.
    assert decide_sharing([(4301, 4300), (4302, 4300)], make_group) == Sharing(
        0, 4300, 0o2770, 4300)
    assert made == []
    # Several without: a group made for the allocation, of them only.
    assert decide_sharing([(65534, 65534), (1, 1)], make_group) == Sharing(
        0, 4999, 0o2770, 4999, made_group="yurt-test")
    assert made == [["daemon", "nobody"]]


def owner(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="gives directories to other users")
async def test_one_task_user_owns_the_shared_dirs_and_its_group_reads_the_logs(
        tmp_path: Path) -> None:
    d = AllocDir(tmp_path / "alloc", "a1")
    fifo = d.logs / ".web.stdout.fifo"
    with trio.fail_after(10):
        await d.build_all({"web": "nobody", "db": ""}, resolve_owner=owner_of, fifos=[fifo])
    nobody = owner_of("nobody")
    assert nobody is not None
    uid, gid = nobody
    assert owner(tmp_path / "alloc")[2] == 0o711  # the allocations cannot be listed
    assert owner(d.shared / "data") == owner(d.shared / "tmp") == (uid, gid, 0o2770)
    assert owner(d.logs) == (0, gid, 0o2750)  # the agent's; the task may read its logs
    assert owner(fifo)[2] == 0o600
    os.close(open_log_file(d.logs / "web.stdout.0", os.O_WRONLY | os.O_CREAT))
    assert owner(d.logs / "web.stdout.0") == (0, gid, 0o640)
    for sub in ("local", "secrets", "tmp"):
        assert owner(d.task_dir("web") / sub) == (uid, gid, 0o700), sub
        assert owner(d.task_dir("db") / sub) == (0, 0, 0o700), sub


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("groupadd", path=ADMIN_PATH) is None,
                    reason="makes a group: needs root and groupadd")
async def test_task_users_without_a_common_group_get_one_made_for_the_allocation(
        tmp_path: Path) -> None:
    d = AllocDir(tmp_path / "alloc", "0123abcd-ef")
    try:
        with trio.fail_after(30):
            await d.build_all({"web": "nobody", "db": "daemon", "admin": ""},
                              resolve_owner=owner_of)
            made = grp.getgrnam(d.group)
            assert d.group.startswith("yurt-0123abcd-")
            assert sorted(made.gr_mem) == ["daemon", "nobody"]
            assert owner(d.shared / "data") == owner(d.shared / "tmp") == (0, made.gr_gid,
                                                                          0o2770)
            assert owner(d.logs) == (0, made.gr_gid, 0o2750)
            await d.build_all({"web": "nobody", "db": "daemon", "admin": ""},
                              resolve_owner=owner_of)  # again (an agent restart): the same
            assert grp.getgrnam(d.group).gr_gid == made.gr_gid
    finally:
        with trio.fail_after(30):
            await d.destroy()
    with pytest.raises(KeyError):
        grp.getgrnam(d.group)  # removed with the directory


@pytest.mark.skipif(os.geteuid() != 0, reason="gives directories to other users")
async def test_a_moved_data_dir_takes_this_allocations_owner(tmp_path: Path) -> None:
    old, new = AllocDir(tmp_path, "old"), AllocDir(tmp_path, "new")
    with trio.fail_after(10):
        await old.build_all({"web": ""})
        (old.shared / "data" / "db").write_text("rows")
        await new.build_all({"web": "nobody"}, resolve_owner=owner_of)
        await new.move(old, ["web"])
    nobody = owner_of("nobody")
    assert nobody is not None
    assert owner(new.shared / "data") == (*nobody, 0o2770)
    assert (new.shared / "data" / "db").read_text() == "rows"

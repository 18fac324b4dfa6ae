"""Log files under faults and attack: a full disk, links planted in the logs dir, fd
exhaustion and a partly failed logmon start.

Layer 2: real FIFOs, a real (small, mounted) file system, the real clock under absolute
deadlines.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio

import yurt.hooks.fdretry as fdretry
import yurt.hooks.logmon as logmon
import yurt.runtime.client.logs.pump as pump_module
from tests.disk_support import fill
from yurt.hooks.base import TaskHookContext
from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.logs.pump import LogPump, fifo_path, log_base, open_fifo
from yurt.runtime.client.logs.reader import read_log
from yurt.runtime.errors import HookError
from yurt.runtime.structs import Allocation, Task, TaskEvent


async def test_pump_on_a_full_disk_drops_counts_and_reports_once(tmp_path: Path,
                                                                   small_fs: Path) -> None:
    reports: list[str] = []
    first_report = trio.Event()

    async def on_drop(message: str) -> None:
        reports.append(message)
        first_report.set()

    read_fd, keep_fd = open_fifo(tmp_path / "web.fifo")
    pump = LogPump(read_fd, small_fs / "web.stdout", file_size=1 << 20, max_files=2,
                   on_drop=on_drop)
    fill(small_fs)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(pump.run)
            os.write(keep_fd, b"a" * 10000 + b"\n")
            await first_report.wait()
            os.write(keep_fd, b"b" * 5000 + b"\n")
            os.close(keep_fd)  # end of file: the pump drains and returns, it does not raise
    assert pump.dropped == 10001 + 5001
    assert len(reports) == 1
    assert "No space left" in reports[0]


async def test_links_planted_in_the_logs_dir_are_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root-only\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "web.stdout.0").symlink_to(secret)
    read_fd, keep_fd = open_fifo(tmp_path / "web.fifo")
    pump = LogPump(read_fd, logs / "web.stdout", file_size=1 << 20, max_files=2)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(pump.run)
            os.write(keep_fd, b"overwrite\n")
            os.close(keep_fd)
        served = b"".join([c.data async for c in read_log(logs, "web", "stdout")])
    assert secret.read_bytes() == b"root-only\n"  # not written through the link
    assert pump.dropped == len(b"overwrite\n")
    assert b"root-only" not in served  # not served through it either


def test_a_link_in_place_of_the_fifo_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root-only\n")
    (tmp_path / ".web.stdout.fifo").symlink_to(secret)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        open_fifo(tmp_path / ".web.stdout.fifo")


def hook_context(tmp_path: Path, nursery: trio.Nursery, emitted: list[TaskEvent]
                 ) -> TaskHookContext:
    alloc_dir = AllocDir(tmp_path, "a1")
    alloc_dir.logs.mkdir(parents=True)

    async def emit(event: TaskEvent) -> None:
        emitted.append(event)
        await trio.lowlevel.checkpoint()

    return TaskHookContext(alloc=Allocation(id="a1"), task=Task(name="web"),
                           task_dir=alloc_dir.task_dir("web"), emit_event=emit,
                           unix_clock=lambda: 0, nursery=nursery)


async def test_logmon_after_a_partial_failure_starts_only_the_missing_pump(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open, opened = logmon.open_fifo, []

    def flaky_open(path: Path) -> tuple[int, int]:
        opened.append(path.name)
        if path.name == ".web.stderr.fifo" and opened.count(path.name) == 1:
            raise OSError(errno.EIO, "injected")
        return real_open(path)

    monkeypatch.setattr(logmon, "open_fifo", flaky_open)
    hook = logmon.LogmonHook()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ctx = hook_context(tmp_path, nursery, [])
            with pytest.raises(OSError, match="injected"):
                await hook.prestart(ctx, {})
            await hook.prestart(ctx, {})
            await hook.stop(ctx)
    assert opened == [".web.stdout.fifo", ".web.stderr.fifo", ".web.stderr.fifo"]


async def test_logmon_retries_fd_exhaustion_then_reports_it_recoverable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open, calls = logmon.open_fifo, []

    def exhausted_twice(path: Path) -> tuple[int, int]:
        calls.append(path.name)
        if len(calls) <= 2:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path)

    monkeypatch.setattr(logmon, "open_fifo", exhausted_twice)
    hook = logmon.LogmonHook()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ctx = hook_context(tmp_path, nursery, [])
            await hook.prestart(ctx, {})  # retried through two EMFILEs
            await hook.stop(ctx)
    assert len(calls) == 4

    def always_exhausted(path: Path) -> tuple[int, int]:
        raise OSError(errno.ENFILE, "Too many open files in system")

    monkeypatch.setattr(logmon, "open_fifo", always_exhausted)
    monkeypatch.setattr(fdretry, "FD_RETRY_FOR", 0.2)
    hook = logmon.LogmonHook()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ctx = hook_context(tmp_path / "b", nursery, [])
            with pytest.raises(HookError, match="out of file descriptors") as info:
                await hook.prestart(ctx, {})
    assert info.value.recoverable


async def test_logmon_retries_a_pump_that_could_not_list_its_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EMFILE can also hit after the FIFO is open (the pump lists the logs dir): the keeper
    is closed, and the whole stream is tried again."""
    real_existing, calls = pump_module.existing_files, []

    def exhausted_once(base: Path) -> dict[int, int]:
        calls.append(base.name)
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_existing(base)

    monkeypatch.setattr(pump_module, "existing_files", exhausted_once)
    hook = logmon.LogmonHook()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ctx = hook_context(tmp_path, nursery, [])
            await hook.prestart(ctx, {})
            assert len(hook._keepers) == 2  # the failed attempt's keeper was closed
            await hook.stop(ctx)
    assert calls == ["web.stdout", "web.stdout", "web.stderr"]


@pytest.mark.parametrize("task", ["../../etc/cron.d/x", "..", "a/b", ""])
def test_a_task_name_cannot_lead_log_files_out_of_the_logs_dir(tmp_path: Path, task: str
                                                               ) -> None:
    with pytest.raises(ValueError, match="cannot name a log file"):
        log_base(tmp_path, task, "stdout")
    with pytest.raises(ValueError, match="cannot name a log file"):
        fifo_path(tmp_path, task, "stdout")


async def test_logmon_on_a_full_disk_tells_the_task_with_an_event(small_fs: Path) -> None:
    emitted: list[TaskEvent] = []
    hook = logmon.LogmonHook()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            ctx = hook_context(small_fs, nursery, emitted)
            await hook.prestart(ctx, {})
            fill(small_fs)
            fifo = fifo_path(AllocDir(small_fs, "a1").logs, "web", "stdout")
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.write(writer, b"lost\n")
            await hook.stop(ctx)  # keepers closed: once the writer closes, the pumps end
            os.write(writer, b"lost too\n")
            os.close(writer)
    assert [(e.type, "No space left" in e.display_message) for e in emitted] == [
        ("Driver", True)]

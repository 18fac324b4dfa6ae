"""Layer 1: the `artifacts` task hook with a fake getter under `autojump_clock` — Nomad's
events, the restart policy as the only retry loop, interpolation, and no refetch once done."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import trio
from trio.testing import MockClock

from tests.runtime_support import at, displays, job_alloc, types, unix_clock
from yurt.hooks.artifact import ArtifactHook, artifact_hash
from yurt.hooks.base import TaskHookContext
from yurt.runtime.client.allocrunner.gate import Gate
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.getter.config import ArtifactConfig
from yurt.runtime.client.getter.get import ArtifactRequest
from yurt.runtime.client.getter.source import GetterError
from yurt.runtime.client.taskrunner.runner import TaskRunner
from yurt.runtime.structs import TASK_STATE_DEAD, Allocation, TaskEvent
from yurt.store import MemoryStateDB

JOB = '''job "j" {
  meta { version = "1.2" }
  group "g" {
    restart {
      attempts = %(attempts)d
      interval = "1h"
      delay    = "15s"
      mode     = "%(mode)s"
    }
    task "t" {
      driver = "mock_driver"
      config {
        run_for   = "%(run_for)s"
        exit_code = 1
      }
      artifact {
        source = "https://h/app-${NOMAD_META_version}.tgz"
        destination = "local/${NOMAD_TASK_NAME}"
        options { checksum = "sha256:${NOMAD_META_version}" }
        headers { X-Job = "${NOMAD_JOB_ID}" }
      }
      artifact {
        source = "https://h/tool"
        mode = "file"
      }
    }
  }
}'''


def alloc_of(*, attempts: int = 3, mode: str = "delay", run_for: str = "1h") -> Allocation:
    return job_alloc(JOB % {"attempts": attempts, "mode": mode, "run_for": run_for})


class FakeGetter:
    """Fails the first `failures` calls for `https://h/tool`, records every request."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[tuple[float, ArtifactRequest]] = []

    async def __call__(self, request: ArtifactRequest, config: ArtifactConfig) -> None:
        await trio.sleep(1)  # a download takes time
        self.calls.append((trio.current_time(), request))
        if request.source == "https://h/tool" and self.failures:
            self.failures -= 1
            raise GetterError("bad response code: 503")


class Updates:
    """Wakes waiters whenever the task runner reports a state update."""

    def __init__(self) -> None:
        self._changed = trio.Event()

    def poke(self) -> None:
        self._changed.set()

    async def until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            self._changed = trio.Event()
            await self._changed.wait()


def runner(alloc: Allocation, getter: FakeGetter, updates: Updates,
           db: MemoryStateDB | None = None) -> TaskRunner:
    assert alloc.job is not None
    gate = Gate()
    gate.open()
    return TaskRunner(alloc, alloc.job.task_groups[0].tasks[0], driver=MockDriver(unix_clock),
                      state_db=db or MemoryStateDB(), gate=gate, on_state_updated=updates.poke,
                      unix_clock=unix_clock, hooks=[ArtifactHook(getter=getter)])


async def test_a_failed_download_is_nomads_event_and_the_restart_policy_retries_it(
        autojump_clock: MockClock) -> None:
    getter = FakeGetter(failures=2)
    updates = Updates()
    tr = runner(alloc_of(), getter, updates)
    async with trio.open_nursery() as nursery:
        await nursery.start(tr.run)
        await updates.until(lambda: "Started" in types(tr))
        nursery.cancel_scope.cancel()
    assert [t for t in types(tr) if t != "Received"] == [
        "Downloading Artifacts", "Failed Artifact Download", "Restarting",
        "Downloading Artifacts", "Failed Artifact Download", "Restarting",
        "Downloading Artifacts", "Started"]
    failed = next(e for e in tr.state.events if e.type == "Failed Artifact Download")
    message = 'failed to download artifact "https://h/tool": bad response code: 503'
    assert failed.display_message == message
    assert failed.download_error == message
    assert failed.details == {"download_error": message}
    assert displays(tr)[types(tr).index("Downloading Artifacts")] == \
        "Client is downloading artifacts"
    assert "Task hook failed" not in types(tr)
    # The policy's delay (15s, up to 25% jitter) separates the tries: no retry loop of its own.
    gap = at(tr, "Downloading Artifacts", 1) - at(tr, "Failed Artifact Download", 0)
    assert 15 <= gap <= 15 * 1.25 + 0.001
    # Each try fetches both artifacts again, as Nomad's hook persists nothing on failure.
    assert len(getter.calls) == 6


async def test_failures_past_the_policy_fail_the_task(autojump_clock: MockClock) -> None:
    updates = Updates()
    tr = runner(alloc_of(attempts=1, mode="fail"), FakeGetter(failures=5), updates)
    async with trio.open_nursery() as nursery:
        await nursery.start(tr.run)
        await updates.until(lambda: tr.state.state == TASK_STATE_DEAD)
        nursery.cancel_scope.cancel()
    assert [t for t in types(tr) if t != "Received"] == [
        "Downloading Artifacts", "Failed Artifact Download", "Restarting",
        "Downloading Artifacts", "Failed Artifact Download", "Not Restarting"]
    assert tr.state.failed
    assert "Started" not in types(tr)


async def test_downloads_are_interpolated_and_not_repeated_after_a_task_restart(
        autojump_clock: MockClock) -> None:
    getter = FakeGetter(failures=0)
    updates = Updates()
    tr = runner(alloc_of(run_for="10s"), getter, updates)
    async with trio.open_nursery() as nursery:
        await nursery.start(tr.run)
        await updates.until(lambda: types(tr).count("Started") >= 3)
        nursery.cancel_scope.cancel()
    assert types(tr).count("Downloading Artifacts") == 1  # done: later starts skip the hook
    assert len(getter.calls) == 2
    first = next(r for _, r in getter.calls if r.mode == "any")
    assert first.source == "https://h/app-1.2.tgz"
    assert first.destination == "local/t"
    assert first.options == {"checksum": "sha256:1.2"}
    assert first.headers == {"X-Job": "j"}
    saved = tr.local_state.hooks["artifacts"]
    assert saved.prestart_done
    task = tr.task
    assert saved.data == {artifact_hash(a): "1" for a in task.artifacts}


async def test_an_agent_restart_does_not_download_again(autojump_clock: MockClock) -> None:
    getter = FakeGetter(failures=0)
    alloc = alloc_of()
    db = MemoryStateDB()
    updates = Updates()
    first = runner(alloc, getter, updates, db)
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        await updates.until(lambda: "Started" in types(first))
        nursery.cancel_scope.cancel()  # the agent dies with the task
    assert len(getter.calls) == 2
    second = runner(alloc, getter, updates, db)
    await second.restore()
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
        # The task is gone with the first driver: the new agent starts it afresh.
        await updates.until(lambda: types(second).count("Started") == 2)
        nursery.cancel_scope.cancel()
    assert len(getter.calls) == 2
    assert types(second).count("Downloading Artifacts") == 1  # the first agent's, restored


async def test_previous_state_skips_finished_artifacts(autojump_clock: MockClock) -> None:
    getter = FakeGetter(failures=0)
    alloc = alloc_of()
    assert alloc.job is not None
    task = alloc.job.task_groups[0].tasks[0]
    emitted: list[TaskEvent] = []

    async def emit(event: TaskEvent) -> None:
        emitted.append(event)

    ctx = TaskHookContext(alloc=alloc, task=task, task_dir=None, emit_event=emit,
                          unix_clock=unix_clock)
    finished = artifact_hash(task.artifacts[0])
    response = await ArtifactHook(getter=getter).prestart(ctx, {finished: "1"})
    assert [r.source for _, r in getter.calls] == ["https://h/tool"]
    assert response.done
    assert set(response.data) == {finished, artifact_hash(task.artifacts[1])}
    assert [e.type for e in emitted] == ["Downloading Artifacts"]


async def test_downloads_run_three_at_a_time(autojump_clock: MockClock) -> None:
    hcl = JOB.replace('      artifact {\n        source = "https://h/tool"',
                      "".join(f'      artifact {{\n        source = "https://h/{i}"\n      }}\n'
                              for i in range(5)) + '      artifact {\n        source = '
                                                   '"https://h/tool"')
    alloc = job_alloc(hcl % {"attempts": 0, "mode": "fail", "run_for": "1h"})
    assert alloc.job is not None
    task = alloc.job.task_groups[0].tasks[0]
    getter = FakeGetter(failures=0)

    async def emit(event: TaskEvent) -> None:
        await trio.lowlevel.checkpoint()

    ctx = TaskHookContext(alloc=alloc, task=task, task_dir=None, emit_event=emit,
                          unix_clock=unix_clock)
    start = trio.current_time()
    await ArtifactHook(getter=getter).prestart(ctx, {})
    finish_times = sorted(round(t - start) for t, _ in getter.calls)
    assert len(getter.calls) == 7
    assert finish_times == [1, 1, 1, 2, 2, 2, 3]


class Hanging(FakeGetter):
    """A download that never finishes on its own."""

    def __init__(self) -> None:
        super().__init__(failures=0)
        self.started = trio.Event()
        self.cancelled = False

    async def __call__(self, request: ArtifactRequest, config: ArtifactConfig) -> None:
        self.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            raise


async def test_a_kill_cancels_a_download_in_flight(autojump_clock: MockClock) -> None:
    getter = Hanging()
    tr = runner(alloc_of(), getter, Updates())
    async with trio.open_nursery() as nursery:
        await nursery.start(tr.run)
        await getter.started.wait()
        with trio.fail_after(60):
            await tr.kill()
    assert getter.cancelled
    assert "Started" not in types(tr)
    assert "Failed Artifact Download" not in types(tr)
    assert "artifacts" not in tr.local_state.hooks  # nothing kept: the next try downloads
    assert tr.state.state == TASK_STATE_DEAD


class UntranslatedErrorGetter(FakeGetter):
    """Raises, once, what the getter failed to translate into a `GetterError` (as
    zipfile's NotImplementedError once escaped it)."""

    async def __call__(self, request: ArtifactRequest, config: ArtifactConfig) -> None:
        await trio.sleep(1)
        self.calls.append((trio.current_time(), request))
        if request.source == "https://h/tool" and self.failures:
            self.failures -= 1
            raise NotImplementedError("compressed patched data (flag bit 5)")


async def test_an_error_the_getter_did_not_translate_is_a_recoverable_failed_download(
        autojump_clock: MockClock, caplog: pytest.LogCaptureFixture) -> None:
    """Not an unrecoverable hook failure: it escaped the nursery as an ExceptionGroup
    (no `recoverable`), cancelled the other download and failed the task for good."""
    getter = UntranslatedErrorGetter(failures=1)
    updates = Updates()
    tr = runner(alloc_of(attempts=3, mode="fail"), getter, updates)
    with caplog.at_level(logging.ERROR, logger="yurt.hooks.artifact"):
        async with trio.open_nursery() as nursery:
            await nursery.start(tr.run)
            await updates.until(lambda: "Started" in types(tr)
                                or tr.state.state == TASK_STATE_DEAD)
            nursery.cancel_scope.cancel()
    assert [t for t in types(tr) if t != "Received"] == [
        "Downloading Artifacts", "Failed Artifact Download", "Restarting",
        "Downloading Artifacts", "Started"]
    failed = next(e for e in tr.state.events if e.type == "Failed Artifact Download")
    assert failed.download_error == ('failed to download artifact "https://h/tool": '
                                     "NotImplementedError: compressed patched data (flag bit 5)")
    assert not tr.state.failed
    assert len(getter.calls) == 4  # both artifacts each try: the other one was not cancelled
    assert any(r.exc_info for r in caplog.records)  # the traceback, for the bug report

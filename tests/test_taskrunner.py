"""Task runner details under `autojump_clock`: restore, stop retries, hook env, shared
resources (layer 1)."""

from __future__ import annotations

import random

import pytest
import trio
from trio.testing import MockClock

from tests.runtime_support import (
    RecoverFailsDriver,
    at,
    displays,
    harness,
    job_alloc,
    seconds,
    stopped,
    types,
    unix_clock,
    until_running,
)
from yurt.hooks.base import AllocHookResources, PrestartResponse, TaskHookContext, TaskPrestartHook
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.taskrunner import events
from yurt.runtime.client.taskrunner.events import datetime_of
from yurt.runtime.errors import DriverError, StateError
from yurt.runtime.structs import (
    Allocation,
    AllocNetworkStatus,
    LocalState,
    TaskEvent,
    TaskState,
)
from yurt.store import MemoryStateDB

SERVICE = '''job "j" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      env { FROM_JOB = "yes" }
      config { run_for = "%s" }
    }
  }
}'''


class EnvHook(TaskPrestartHook):
    name = "env"

    def __init__(self) -> None:
        self.calls = 0

    async def prestart(self, ctx: TaskHookContext, previous: dict[str, str]) -> PrestartResponse:
        self.calls += 1
        return PrestartResponse(env={"FROM_HOOK": "1"}, data={"k": "v"}, done=True)


async def test_restore_reattaches_without_a_new_start_and_reapplies_hook_env(
        autojump_clock: MockClock) -> None:
    hook = EnvHook()
    alloc = job_alloc(SERVICE % "1h")
    driver = MockDriver(unix_clock)  # outlives both "agents", as a running task would
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"mock_driver": driver},
                               unix_clock=unix_clock, task_hooks=lambda: [hook])
    async with trio.open_nursery() as nursery:
        first = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(first.run)
        await trio.sleep(10)
        first.shutdown()
        await first.shutdown_done.wait()
    assert hook.calls == 1
    assert first.task_runners["t"].env.items() >= {"FROM_JOB": "yes", "FROM_HOOK": "1"}.items()

    async with trio.open_nursery() as nursery:
        second = AllocRunner(alloc, config, nursery=nursery)
        await second.restore()
        tr = second.task_runners["t"]
        assert tr.env.items() >= {"FROM_JOB": "yes", "FROM_HOOK": "1"}.items()
        assert tr.handle is not None
        nursery.start_soon(second.run)
        await trio.sleep(10)
        assert hook.calls == 1  # done: skipped, env re-applied
        assert tr.state.state == "running"
        assert types(tr) == ["Received", "Task Setup", "Started"]  # no second Started
        assert [kind for _, kind, _ in driver.log] == ["start"]
        second.update(stopped(alloc))
        await second.wait_done.wait()
    assert types(tr)[-3:] == ["Killing", "Terminated", "Killed"]


async def test_restore_of_a_task_that_is_gone_starts_it_afresh(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc(SERVICE % "1h")
    db = MemoryStateDB()

    def config() -> AllocRunnerConfig:  # a new driver: the old task did not survive
        return AllocRunnerConfig(state_db=db, drivers={"mock_driver": RecoverFailsDriver()},
                                 unix_clock=unix_clock)

    async with trio.open_nursery() as nursery:
        first = AllocRunner(alloc, config(), nursery=nursery)
        nursery.start_soon(first.run)
        await trio.sleep(10)
        first.shutdown()
        await first.shutdown_done.wait()
    async with trio.open_nursery() as nursery:
        second = AllocRunner(alloc, config(), nursery=nursery)
        await second.restore()
        nursery.start_soon(second.run)
        await trio.sleep(10)
        tr = second.task_runners["t"]
        assert types(tr)[-3:] == ["Started", "Failed Restoring Task", "Started"]
        assert displays(tr)[-2] == ("failed to restore task; will not run until server is "
                                    "contacted")
        nursery.cancel_scope.cancel()


class StuckStop(MockDriver):
    """stop_task always fails; the task only ends when its run_for is up."""

    def __init__(self) -> None:
        super().__init__(unix_clock)
        self.attempts: list[float] = []

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        self.attempts.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        raise DriverError("stuck")


async def test_stop_is_retried_with_nomads_backoff_then_reported(
        autojump_clock: MockClock) -> None:
    driver = StuckStop()
    alloc = job_alloc(SERVICE % "10m")
    async with harness(driver=driver) as h:
        ar = h.start(alloc)
        await trio.sleep(10)
        ar.update(stopped(alloc))
        await ar.wait_done.wait()
    assert driver.attempts == [10.0, 15.0, 35.0, 115.0, 235.0]  # +5 s, +20 s, +80 s, +120 s
    tr = ar.task_runners["t"]
    assert types(tr)[-3:] == ["Killing", "Terminated", "Killed"]
    assert displays(tr)[-1] == "stuck; task did not exit within 5s of its stop"
    # The stop is bounded: the runner does not wait for the task to end on its own (600 s).
    assert at(tr, "Terminated") == 240.0


def test_alloc_hook_resources_hand_out_copies() -> None:
    resources = AllocHookResources()
    status = AllocNetworkStatus(interface_name="eth0", address="10.0.0.2")
    resources.set_network_status(status)
    status.address = "changed"
    got = resources.get_network_status()
    assert got == AllocNetworkStatus(interface_name="eth0", address="10.0.0.2")
    assert got is not None
    got.address = "also changed"
    assert resources.get_network_status() == AllocNetworkStatus(interface_name="eth0",
                                                                address="10.0.0.2")
    devices = {"gpu": ["GPU-0"]}
    resources.set("devices", devices)
    devices["gpu"].append("GPU-1")
    assert resources.get("devices") == {"gpu": ["GPU-0"]}


# --------------------------------------------------------------------------- review fixes


async def test_driver_error_while_waiting_is_an_exit_not_a_crash(
        autojump_clock: MockClock) -> None:
    async with harness(driver=RecoverFailsDriver("plugin did not come back")) as h:
        other = h.start(job_alloc(SERVICE % "1h", alloc_id="other"))
        ar = h.runner(job_alloc(SERVICE.replace('run_for = "%s"',
                                                'run_for = "1h"\n plugin_exit_after = "2s"')))
        h.nursery.start_soon(ar.run)
        await trio.sleep(10)
        tr = ar.task_runners["t"]
        crashed = next(e for e in tr.state.events if e.type == "Terminated")
        assert crashed.exit_code == -1
        assert crashed.display_message == ('Exit Code: -1, Exit Message: "failed to recover '
                                           'task: plugin did not come back"')
        assert other.task_runners["t"].state.state == "running"  # the sibling is unharmed
        h.nursery.cancel_scope.cancel()


async def test_started_at_is_reset_by_every_start(autojump_clock: MockClock) -> None:
    alloc = job_alloc(SERVICE.replace('config { run_for = "%s" }',
                                      'config {\n run_for = "5s"\n exit_code = 1\n }'))
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(30)
        tr = ar.task_runners["t"]
        starts = [e.time for e in tr.state.events if e.type == "Started"]
        assert len(starts) >= 2
        assert tr.state.started_at == datetime_of(starts[-1])
        h.nursery.cancel_scope.cancel()


class RecordingStops(MockDriver):
    def __init__(self) -> None:
        super().__init__(unix_clock)
        self.timeouts: list[int] = []

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        self.timeouts.append(kill_timeout)
        await super().stop_task(task_id, kill_timeout, signal)


async def test_the_driver_gets_the_capped_kill_timeout(autojump_clock: MockClock) -> None:
    driver = RecordingStops()
    alloc = job_alloc(SERVICE.replace('env { FROM_JOB = "yes" }', 'kill_timeout = "10m"')
                      % "1h")
    async with harness(driver=driver) as h:
        ar = h.start(alloc)
        await trio.sleep(1)
        ar.update(stopped(alloc))
        await ar.wait_done.wait()
    assert driver.timeouts == [30 * 10**9]
    assert displays(ar.task_runners["t"])[-3] == (
        "Sent interrupt. Waiting 30s before force killing")


async def test_restoring_a_stopped_alloc_kills_its_reattached_task(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc(SERVICE % "1h")
    driver = MockDriver(unix_clock)
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"mock_driver": driver},
                               unix_clock=unix_clock)
    async with trio.open_nursery() as nursery:
        first = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(first.run)
        await trio.sleep(10)
        first.shutdown()
        await first.shutdown_done.wait()
        second = AllocRunner(stopped(alloc), config, nursery=nursery)
        await second.restore()
        await second.run()
    tr = second.task_runners["t"]
    assert [kind for _, kind, _ in driver.log] == ["start", "stop"]
    assert types(tr)[-2:] == ["Started", "Terminated"]
    assert tr.state.state == "dead"
    assert tr.handle is None


async def test_a_restore_never_reattaches_to_a_finished_start(autojump_clock: MockClock) -> None:
    """The agent restarts while the task waits out its restart delay."""
    alloc = job_alloc(SERVICE.replace('config { run_for = "%s" }',
                                      'config {\n run_for = "5s"\n exit_code = 1\n }'))
    driver = MockDriver(unix_clock)
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"mock_driver": driver},
                               unix_clock=unix_clock)
    async with trio.open_nursery() as nursery:
        first = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(first.run)
        await trio.sleep(7)  # exited at 5 s, waiting 15 s+ to restart
        first.shutdown()
        await first.shutdown_done.wait()
        assert driver._tasks == {}  # the finished start was destroyed in the driver
        second = AllocRunner(alloc, config, nursery=nursery)
        await second.restore()
        assert second.task_runners["t"].handle is None
        nursery.start_soon(second.run)
        await trio.sleep(1)
        tr = second.task_runners["t"]
        assert types(tr)[-1] == "Started"
        assert tr.state.restarts == 1
        assert len([k for _, k, _ in driver.log if k == "start"]) == 2
        nursery.cancel_scope.cancel()


async def test_hook_env_merge_is_last_writer_wins_and_clearing_restores(
        autojump_clock: MockClock) -> None:
    """Later hooks win a key; a hook that clears its env lets the earlier value show again."""
    from yurt.hooks.base import Hook
    from yurt.runtime.client.allocrunner.gate import Gate
    from yurt.runtime.client.taskrunner.runner import TaskRunner

    class First(Hook):
        name = "first"

    class Second(Hook):
        name = "second"

    alloc = job_alloc(SERVICE % "1h")
    assert alloc.job is not None
    task = alloc.job.task_groups[0].tasks[0]
    tr = TaskRunner(alloc, task, driver=MockDriver(lambda: 0), state_db=MemoryStateDB(),
                    gate=Gate(), on_state_updated=lambda: None, unix_clock=lambda: 0,
                    hooks=[First(), Second()])
    tr.set_hook_env("second", {"KEY": "from-second"})
    tr.set_hook_env("first", {"KEY": "from-first", "FROM_JOB": "overridden"})
    assert tr.env["KEY"] == "from-second"  # hook order decides, not call order
    assert tr.env["FROM_JOB"] == "overridden"
    tr.set_hook_env("second", None)
    assert tr.env["KEY"] == "from-first"
    tr.set_hook_env("first", None)
    assert "KEY" not in tr.env
    assert tr.env["FROM_JOB"] == "yes"


class SlowRestartEvent(MemoryStateDB):
    """Persisting a `Restart Signaled` event takes a second: long enough for the task to
    exit on its own while a restart request is on its way."""

    async def put_task_state(self, alloc_id: str, task: str, state: TaskState) -> None:
        if state.events and state.events[-1].type == "Restart Signaled":
            await trio.sleep(1)
        await super().put_task_state(alloc_id, task, state)


async def test_a_restart_racing_the_tasks_exit_does_not_leak_into_the_next_failure(
        autojump_clock: MockClock) -> None:
    policy = 'restart {\n attempts = 5\n delay = "15s"\n interval = "10m"\n mode = "fail"\n }'
    alloc = job_alloc(f'''job "j" {{
  group "g" {{
    {policy}
    task "t" {{
      driver = "mock_driver"
      config {{
        run_for   = "10s"
        exit_code = 1
      }}
    }}
  }}
}}''')
    db = SlowRestartEvent()
    driver = MockDriver(unix_clock)
    seen: list[TaskEvent] = []  # every event (the task state keeps the last ten)
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                               unix_clock=unix_clock, rng=random.Random(1),
                               on_task_event=lambda a, t, e: seen.append(e))
    async with trio.open_nursery() as nursery:
        ar = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(ar.run)
        await trio.sleep(9.5)
        # Asked at 9.5 s; the task exits at 10 s while the request is being recorded.
        await ar.restart_task("t", events.new_event(events.RESTART_SIGNALED, unix_clock()))
        await trio.sleep(100)  # virtual: three more runs of 10 s, with their delays
        nursery.cancel_scope.cancel()
    restarting = [e for e in seen if e.type == "Restarting"]
    assert len(restarting) >= 3
    # Only the run the request raced may restart at once; every later failure is judged by
    # the policy alone: counted, after its delay.
    later = [(seconds(e.time), e.display_message) for e in restarting[1:]]
    assert all(e.details.get("restart_reason") == "Restart within policy"
               for e in restarting[1:]), later
    assert all(e.start_delay >= 15 * 10**9 for e in restarting[1:]), later


class CrashesAfterExit(MemoryStateDB):
    """A store whose agent "crashes" right after a task's exit is seen: the write of the
    `Terminated` event never returns, nor does any write after it, such as the handle queued
    in the same batch (the SQLite store commits a batch in one transaction), until `crashing`
    is turned off for the next agent. With a zero-delay restart that write is the next run's
    (its `Started` follows the `Terminated`), made once that run has started."""

    crashing = True
    exited = False

    async def put_task_state(self, alloc_id: str, task: str, state: TaskState) -> None:
        if self.crashing and any(e.type == "Terminated" for e in state.events):
            self.exited = True
            await trio.sleep_forever()
        await super().put_task_state(alloc_id, task, state)

    async def put_task_runner_local_state(self, alloc_id: str, task: str,
                                          state: LocalState) -> None:
        await trio.lowlevel.checkpoint()
        if self.crashing and self.exited:
            await trio.sleep_forever()
        await super().put_task_runner_local_state(alloc_id, task, state)


async def test_a_user_restart_cut_by_a_crash_restarts_at_once_after_restore(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc('''job "j" {
  group "g" {
    restart {
      attempts = 5
      delay    = "15s"
    }
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}''')
    db = CrashesAfterExit()
    driver = MockDriver(unix_clock)  # outlives both agents, as a running task would
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                               unix_clock=unix_clock, rng=random.Random(1))
    async with trio.open_nursery() as nursery:
        first = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(first.run)
        await trio.sleep(10)
        await first.restart_task("t")  # the task is stopped; the agent dies on its exit
        await trio.sleep(1)
        nursery.cancel_scope.cancel()  # the crash: nothing more is written
    # The restart's new run started, but its handle was never written: a real driver stops
    # it as an orphan start after the restore; the mock one only remembers it.
    assert [kind for _, kind, _ in driver.log] == ["start", "stop", "start"]

    db.crashing = False
    async with trio.open_nursery() as nursery:
        second = AllocRunner(alloc, config, nursery=nursery)
        await second.restore()
        restored_at = trio.current_time()
        nursery.start_soon(second.run)
        await trio.sleep(5)
        tr = second.task_runners["t"]
        assert [kind for _, kind, _ in driver.log] == ["start", "stop", "start", "start"]
        assert driver.log[-1][0] == restored_at  # at once: no policy delay
        restarting = [e for e in tr.state.events if e.type == "Restarting"]
        assert [e.start_delay for e in restarting] == [0]
        nursery.cancel_scope.cancel()


class SlowReads(MemoryStateDB):
    """Every task state read takes a second, as a thread hop under load would."""

    async def get_task_runner_state(self, alloc_id: str, task: str
                                    ) -> tuple[LocalState | None, TaskState | None]:
        await trio.sleep(1)
        return await super().get_task_runner_state(alloc_id, task)


async def test_an_allocations_tasks_restore_concurrently(autojump_clock: MockClock) -> None:
    tasks = "\n".join(f'task "t{n}" {{\n driver = "mock_driver"\n config {{ run_for = "1h" }}\n}}'
                      for n in range(5))
    alloc = job_alloc(f'job "j" {{\n group "g" {{\n{tasks}\n }}\n}}')
    config = AllocRunnerConfig(state_db=SlowReads(), drivers={"mock_driver": MockDriver(
        unix_clock)}, unix_clock=unix_clock)
    async with trio.open_nursery() as nursery:
        ar = AllocRunner(alloc, config, nursery=nursery)
        start = trio.current_time()
        await ar.restore()
        assert trio.current_time() - start == 1  # not one read after another (5 s)


class CrashesOnRestartEvent(MemoryStateDB):
    """The agent "crashes" once a user restart is recorded, before the task is stopped."""

    crashing = True

    async def put_task_state(self, alloc_id: str, task: str, state: TaskState) -> None:
        if self.crashing and state.events and state.events[-1].type == "Restart Signaled":
            await trio.sleep_forever()
        await super().put_task_state(alloc_id, task, state)


async def test_a_user_restart_recorded_before_a_crash_is_carried_out_after_restore(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc(SERVICE % "1h")
    db = CrashesOnRestartEvent()
    driver = MockDriver(unix_clock)
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                               unix_clock=unix_clock)
    async with trio.open_nursery() as nursery:
        first = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(first.run)
        await trio.sleep(10)
        nursery.start_soon(first.restart_task, "t")
        await trio.sleep(1)
        nursery.cancel_scope.cancel()  # the crash, before the stop was sent
    assert [kind for _, kind, _ in driver.log] == ["start"]

    db.crashing = False
    async with trio.open_nursery() as nursery:
        second = AllocRunner(alloc, config, nursery=nursery)
        await second.restore()
        restored_at = trio.current_time()
        nursery.start_soon(second.run)
        await trio.sleep(5)
        assert [(t, kind) for t, kind, _ in driver.log][1:] == [
            (restored_at, "stop"), (restored_at, "start")]
        nursery.cancel_scope.cancel()


async def test_a_restart_intent_without_a_handle_is_not_a_free_restart_later(
        autojump_clock: MockClock) -> None:
    """A crash between a user restart's stop and the next start leaves the intent persisted
    and no handle: the restore starts the task at once, and that intent must not turn the new
    run's first failure into an extra, uncounted restart (attempts = 0, mode = "fail")."""
    alloc = job_alloc('''job "j" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver = "mock_driver"
      config {
        run_for   = "1s"
        exit_code = 1
      }
    }
  }
}''')
    db = MemoryStateDB()
    await db.put_task_runner_local_state(alloc.id, "t", LocalState(restart_requested=True))
    driver = MockDriver(unix_clock)
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                               unix_clock=unix_clock, rng=random.Random(1))
    async with trio.open_nursery() as nursery:
        runner = AllocRunner(alloc, config, nursery=nursery)
        await runner.restore()
        await runner.run()
    assert [kind for _, kind, _ in driver.log] == ["start"]
    state = runner.task_runners["t"].state
    assert state.failed
    assert "Restarting" not in [e.type for e in state.events]


class BrokenTaskState(MemoryStateDB):
    """A store in which one task's saved state cannot be read (as a row that fails to decode)."""

    broken = ""

    async def get_task_runner_state(self, alloc_id: str, task: str
                                    ) -> tuple[LocalState | None, TaskState | None]:
        if task == self.broken:
            await trio.lowlevel.checkpoint()
            raise StateError(f"task {task}: cannot decode its state")
        return await super().get_task_runner_state(alloc_id, task)


TWO_TASKS = '''job "j" {
  group "g" {
    task "a" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
    task "b" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''


async def run_both_then_die(alloc: Allocation, config: AllocRunnerConfig) -> None:
    """Run `alloc` (`TWO_TASKS`) until both tasks run, then die as an agent does: the tasks
    keep running in the driver."""
    async with trio.open_nursery() as nursery:
        first = AllocRunner(alloc, config, nursery=nursery)
        nursery.start_soon(first.run)
        await until_running(first, "a")
        await until_running(first, "b")
        nursery.cancel_scope.cancel()


async def test_a_failed_restore_leaves_no_sibling_running_unsupervised(
        autojump_clock: MockClock) -> None:
    """One task's state is unreadable, so the allocation cannot be restored; its sibling was
    already re-attached meanwhile. That sibling must be stopped: nothing would supervise it,
    and the server starting the allocation afresh would run it twice."""
    alloc = job_alloc(TWO_TASKS)
    db = BrokenTaskState()
    driver = MockDriver(unix_clock)  # outlives both agents, as running tasks would
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                               unix_clock=unix_clock, rng=random.Random(1))
    await run_both_then_die(alloc, config)
    assert len(driver._tasks) == 2

    db.broken = "a"
    async with trio.open_nursery() as nursery:
        second = AllocRunner(alloc, config, nursery=nursery)
        with pytest.raises(StateError):
            await second.restore()
    # Task a was never re-attached (its state is unreadable): the fresh start that replaces
    # the allocation finds it through the driver's own sweep. Task b was, and is stopped.
    assert {tid.split("/")[1] for tid in driver._tasks} == {"a"}


class BrokenAndCancelling(BrokenTaskState):
    """`BrokenTaskState` whose unreadable task is found a second late, and whose reader's
    caller is cancelled at that moment (the agent shutting down during the restore)."""

    caller: trio.CancelScope | None = None

    async def get_task_runner_state(self, alloc_id: str, task: str
                                    ) -> tuple[LocalState | None, TaskState | None]:
        if task == self.broken and self.caller is not None:
            await trio.sleep(1)  # the sibling re-attaches meanwhile
            self.caller.cancel()
            raise StateError(f"task {task}: cannot decode its state")
        return await super().get_task_runner_state(alloc_id, task)


async def test_a_cancel_during_a_failed_restore_still_stops_the_reattached_sibling(
        autojump_clock: MockClock) -> None:
    """The cleanup of a failed restore is shielded: a caller cancelled as the failure comes
    in must not leave the sibling that was re-attached running with nobody supervising it."""
    alloc = job_alloc(TWO_TASKS)
    db = BrokenAndCancelling()
    driver = MockDriver(unix_clock)
    config = AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                               unix_clock=unix_clock, rng=random.Random(1))
    await run_both_then_die(alloc, config)

    db.broken = "a"
    async with trio.open_nursery() as nursery:
        second = AllocRunner(alloc, config, nursery=nursery)
        with trio.CancelScope() as caller:
            db.caller = caller
            with pytest.raises(StateError):
                await second.restore()
    assert {tid.split("/")[1] for tid in driver._tasks} == {"a"}

"""The runtime core under `autojump_clock` with the mock driver and the in-memory store
(layer 1). Hours of virtual time per test, fully deterministic: event type sequences, display
messages and delays are asserted exactly."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
import trio
import trio.testing
from trio.testing import MockClock

from tests.runtime_support import at, displays, harness, job_alloc, seconds, stopped, types
from yurt.hooks.base import AllocPrerunHook, AllocUpdateHook
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerError
from yurt.runtime.client.taskrunner import events
from yurt.runtime.errors import DriverError, TaskNotRunningError
from yurt.runtime.lib.durations import format_duration
from yurt.runtime.structs import Allocation, TaskState
from yurt.store import MemoryStateDB


def one_task(config: str, *, job_type: str = "batch", restart: str = "",
             extra: str = "") -> str:
    return f'''job "j" {{
  type = "{job_type}"
  group "g" {{
    {restart}
    task "t" {{
      driver = "mock_driver"
      config {{ {config} }}
      {extra}
    }}
  }}
}}'''


async def run_to_end(alloc: Allocation, **kw: object) -> AllocRunner:
    async with harness(**kw) as h:  # type: ignore[arg-type]
        ar = h.runner(alloc)
        await ar.run()
    return ar


# --------------------------------------------------------------------------- one task


async def test_success(autojump_clock: MockClock) -> None:
    ar = await run_to_end(job_alloc(one_task('run_for = "5s"')))
    tr = ar.task_runners["t"]
    assert types(tr) == ["Received", "Task Setup", "Started", "Terminated"]
    assert displays(tr) == ["Task received by client", "Building Task Directory",
                            "Task started by client", "Exit Code: 0"]
    assert at(tr, "Terminated") - at(tr, "Started") == 5.0
    assert (tr.state.state, tr.state.failed, tr.state.restarts) == ("dead", False, 0)
    assert seconds(int(tr.state.finished_at.timestamp() * 1e9)) == pytest.approx(5.0)
    assert ar.alloc_state().client_status == "complete"


async def test_restart_within_policy_then_exhausted_mode_fail(autojump_clock: MockClock) -> None:
    alloc = job_alloc(one_task('run_for = "1s"\n exit_code = 3', job_type="service",
                               restart='restart {\n attempts = 2\n delay = "10s"\n'
                                       ' interval = "10m"\n mode = "fail"\n }'))
    ar = await run_to_end(alloc)
    tr = ar.task_runners["t"]
    # 11 events happened; the ring keeps the last 10, so "Received" fell off.
    assert types(tr) == ["Task Setup", "Started", "Terminated", "Restarting", "Started",
                         "Terminated", "Restarting", "Started", "Terminated", "Not Restarting"]
    restarting = [e for e in tr.state.events if e.type == "Restarting"]
    for n, ev in enumerate(restarting):
        # The task sleeps exactly the tracker's jittered delay, 10s to 12.5s.
        assert 10e9 <= ev.start_delay < 12.5e9
        assert ev.display_message == f"Task restarting in {format_duration(ev.start_delay)}"
        assert at(tr, "Started", n + 1) - at(tr, "Terminated", n) == ev.start_delay / 1e9
    assert tr.state.events[2].display_message == "Exit Code: 3"
    assert tr.state.events[-1].display_message == (
        'Exceeded allowed attempts 2 in interval 10m0s and mode is "fail"')
    assert (tr.state.restarts, tr.state.failed) == (2, True)
    assert ar.alloc_state().client_status == "failed"


async def test_exhausted_mode_delay_waits_for_the_interval(autojump_clock: MockClock) -> None:
    alloc = job_alloc(one_task('run_for = "1s"\n exit_code = 1', job_type="service",
                               restart='restart {\n attempts = 1\n delay = "5s"\n'
                                       ' interval = "1m"\n mode = "delay"\n }'))
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(61)
        assert len(h.task_log("start")) == 3
        ar.update(stopped(alloc))
        await ar.wait_done.wait()
    tr = ar.task_runners["t"]
    delayed = [e for e in tr.state.events if e.type == "Restarting"][1]
    assert delayed.restart_reason == "Exceeded allowed attempts, applying a delay"
    assert delayed.display_message.startswith(
        "Exceeded allowed attempts, applying a delay - Task restarting in ")
    # The third start waits until the one-minute window that opened at t=0 ends.
    assert h.task_log("start")[2][0] == 60.0


async def test_recoverable_start_error_restarts_unrecoverable_does_not(
        autojump_clock: MockClock) -> None:
    restart = 'restart {\n attempts = 1\n delay = "2s"\n interval = "1m"\n }'
    ar = await run_to_end(job_alloc(one_task(
        'start_error = "no GPU yet"\n start_error_recoverable = true', restart=restart)))
    tr = ar.task_runners["t"]
    assert types(tr) == ["Received", "Task Setup", "Driver Failure", "Restarting",
                         "Driver Failure", "Not Restarting"]
    assert displays(tr)[2] == "no GPU yet"
    assert tr.state.failed

    ar = await run_to_end(job_alloc(one_task('start_error = "bad binary"', restart=restart)))
    tr = ar.task_runners["t"]
    assert types(tr) == ["Received", "Task Setup", "Driver Failure", "Not Restarting"]
    assert displays(tr)[-1] == "Error was unrecoverable"
    assert ar.alloc_state().client_status == "failed"


async def test_plugin_crash_is_recovered_transparently(autojump_clock: MockClock) -> None:
    ar = await run_to_end(job_alloc(one_task('run_for = "10s"\n plugin_exit_after = "3s"')))
    tr = ar.task_runners["t"]
    assert types(tr) == ["Received", "Task Setup", "Started", "Terminated"]
    assert at(tr, "Terminated") == 10.0


# --------------------------------------------------------------------------- groups

LEADER_GROUP = '''job "j" {
  type = "batch"
  group "g" {
    task "leader" {
      driver = "mock_driver"
      leader = true
      config { run_for = "2s" }
    }
    task "worker" {
      driver       = "mock_driver"
      kill_timeout = "10ms"
      config { run_for = "1h" }
    }
    task "side" {
      driver = "mock_driver"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config { run_for = "1h" }
    }
  }
}'''


async def test_leader_death_kills_the_group(autojump_clock: MockClock) -> None:
    ar = await run_to_end(job_alloc(LEADER_GROUP))
    worker = ar.task_runners["worker"]
    assert types(worker) == ["Received", "Task Setup", "Started", "Leader Task Dead",
                             "Killing", "Terminated", "Killed"]
    assert displays(worker)[3:] == ["Leader Task in Group dead",
                                    "Sent interrupt. Waiting 10ms before force killing",
                                    "Exit Code: 0", "Task successfully killed"]
    assert types(ar.task_runners["side"])[-4:] == ["Leader Task Dead", "Killing",
                                                   "Terminated", "Killed"]
    assert at(worker, "Killed") == 2.0
    assert ar.alloc_state().client_status == "complete"


async def test_sibling_failure_kills_the_others(autojump_clock: MockClock) -> None:
    ar = await run_to_end(job_alloc('''job "j" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "bad" {
      driver = "mock_driver"
      config {
        run_for   = "1s"
        exit_code = 2
      }
    }
    task "good" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''))
    good = ar.task_runners["good"]
    assert types(good) == ["Received", "Task Setup", "Started", "Sibling Task Failed",
                           "Killing", "Terminated", "Killed"]
    assert displays(good)[3] == "Task's sibling \"bad\" failed"
    assert good.state.events[3].details["failed_sibling"] == "bad"
    assert not good.state.failed
    assert displays(ar.task_runners["bad"])[-1] == "Policy allows no restarts"
    assert ar.alloc_state().client_status == "failed"


async def test_only_sidecars_left(autojump_clock: MockClock) -> None:
    ar = await run_to_end(job_alloc('''job "j" {
  type = "batch"
  group "g" {
    task "main" {
      driver = "mock_driver"
      config { run_for = "3s" }
    }
    task "side" {
      driver = "mock_driver"
      lifecycle {
        hook    = "poststart"
        sidecar = true
      }
      config { run_for = "1h" }
    }
  }
}'''))
    side = ar.task_runners["side"]
    assert types(side)[-4:] == ["Main Tasks Dead", "Killing", "Terminated", "Killed"]
    assert displays(side)[-4] == "Main tasks in the group died"
    assert at(side, "Killed") == 3.0
    assert ar.alloc_state().client_status == "complete"


async def test_failed_prestart_blocks_main_and_poststop_still_runs(
        autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.runner(job_alloc('''job "j" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "init" {
      driver = "mock_driver"
      lifecycle { hook = "prestart" }
      config {
        run_for   = "1s"
        exit_code = 1
      }
    }
    task "main" {
      driver = "mock_driver"
      config { run_for = "1s" }
    }
    task "cleanup" {
      driver = "mock_driver"
      lifecycle { hook = "poststop" }
      config { run_for = "1s" }
    }
  }
}'''))
        await ar.run()
    assert [name for _, name in h.task_log("start")] == ["init", "cleanup"]
    main = ar.task_runners["main"]
    assert types(main) == ["Received", "Sibling Task Failed", "Killing"]
    assert main.state.state == "dead"
    assert types(ar.task_runners["cleanup"]) == ["Received", "Task Setup", "Started",
                                                 "Terminated"]
    assert ar.alloc_state().client_status == "failed"


STOP_GROUP = '''job "j" {
  group "g" {
    task "leader" {
      driver = "mock_driver"
      leader = true
      config {
        run_for    = "1h"
        kill_after = "1s"
      }
    }
    task "main1" {
      driver = "mock_driver"
      config {
        run_for    = "1h"
        kill_after = "2s"
      }
    }
    task "main2" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
    task "side" {
      driver = "mock_driver"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config { run_for = "1h" }
    }
    task "cleanup" {
      driver = "mock_driver"
      lifecycle { hook = "poststop" }
      config { run_for = "5s" }
    }
  }
}'''


async def test_stop_kills_leader_then_mains_then_sidecars_then_runs_poststop(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc(STOP_GROUP)
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(100)
        ar.update(stopped(alloc))
        await ar.wait_done.wait()
    # The leader's stop takes 1 s, main1's 2 s: each stage waits for the one before.
    assert h.task_log("stop") == [(101.0, "leader"), (101.0, "main2"), (103.0, "main1"),
                                  (103.0, "side")]
    assert h.task_log("start")[-1] == (103.0, "cleanup")
    assert types(ar.task_runners["leader"])[-4:] == ["Started", "Killing", "Terminated",
                                                     "Killed"]
    # Once the leader is dead the others also hear why, before their own kill.
    for name in ("main1", "main2", "side"):
        assert types(ar.task_runners[name])[-5:] == ["Started", "Leader Task Dead", "Killing",
                                                     "Terminated", "Killed"]
    assert types(ar.task_runners["cleanup"]) == ["Received", "Task Setup", "Started",
                                                 "Terminated"]
    assert at(ar.task_runners["cleanup"], "Terminated") == 108.0
    assert ar.alloc_state().client_status == "complete"


# --------------------------------------------------------------------------- restarts


RESTARTABLE = '''job "j" {
  group "g" {
    task "init" {
      driver = "mock_driver"
      lifecycle { hook = "prestart" }
      config { run_for = "1s" }
    }
    task "main" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
    task "other" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''


async def test_restart_one_task_is_immediate_and_not_counted_against_policy(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc(RESTARTABLE)
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(10)
        await ar.restart_task("main")
        await trio.sleep(10)
        main = ar.task_runners["main"]
        assert types(main)[-5:] == ["Started", "Restart Signaled", "Terminated", "Restarting",
                                    "Started"]
        assert displays(main)[-4:-1] == ["User requested task to restart", "Exit Code: 0",
                                         "Task restarting in 0s"]
        assert at(main, "Started", 1) == 10.0
        assert main.state.restarts == 1
        assert main.tracker.count == 0
        assert types(ar.task_runners["other"])[-1] == "Started"
        with pytest.raises(AllocRunnerError, match="Could not find task runner for task: x"):
            await ar.restart_task("x")
        with pytest.raises(TaskNotRunningError):  # init is dead: not running
            await ar.task_runners["init"].restart(
                events.new_event(events.RESTART_SIGNALED, 0))
        ar.update(stopped(alloc))
        await ar.wait_done.wait()


async def test_restart_running_skips_dead_tasks(autojump_clock: MockClock) -> None:
    alloc = job_alloc(RESTARTABLE)
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(10)
        await ar.restart_running()
        await trio.sleep(1)
        for name in ("main", "other"):
            assert displays(ar.task_runners[name])[-4] == (
                "User requested running tasks to restart")
        assert "Restart Signaled" not in types(ar.task_runners["init"])
        ar.update(stopped(alloc))
        await ar.wait_done.wait()


async def test_restart_all_reruns_prestart_before_main(autojump_clock: MockClock) -> None:
    alloc = job_alloc(RESTARTABLE)
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(10)
        await ar.restart_all()
        await trio.sleep(10)
        starts = h.task_log("start")
        assert [n for _, n in starts[:3]] == ["init", "main", "other"] or [
            n for _, n in starts[:3]] == ["init", "other", "main"]
        rerun = starts[3:]
        assert rerun[0] == (10.0, "init")
        assert sorted(rerun[1:]) == [(11.0, "main"), (11.0, "other")]
        init = ar.task_runners["init"]
        assert types(init)[-4:] == ["Restart Signaled", "Restarting", "Started", "Terminated"]
        assert displays(init)[-4] == "User requested all tasks to restart"
        ar.update(stopped(alloc))
        await ar.wait_done.wait()


# --------------------------------------------------------------------------- updates


class RecordingUpdateHook(AllocUpdateHook):
    name = "recorder"

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def update(self, alloc: Allocation) -> None:
        self.seen.append(alloc.alloc_modify_index)


async def test_update_queue_keeps_only_the_newest_and_stop_skips_update_hooks(
        autojump_clock: MockClock) -> None:
    hook = RecordingUpdateHook()
    alloc = job_alloc(one_task('run_for = "1h"', job_type="service"))
    async with harness(alloc_hooks=(hook,)) as h:
        ar = h.start(alloc)
        await trio.sleep(1)

        def version(index: int) -> Allocation:
            new = stopped(alloc, index)
            new.desired_status = "run"
            return new

        ar.update(version(5))
        ar.update(version(3))  # older than the queued one: dropped
        await trio.testing.wait_all_tasks_blocked()
        ar.update(version(9))
        ar.update(version(7))  # dropped
        ar.update(version(11))  # replaces 9
        await trio.sleep(1)
        assert hook.seen == [5, 11]
        assert ar.alloc.alloc_modify_index == 11
        ar.update(stopped(alloc, 12))
        await ar.wait_done.wait()
    assert hook.seen == [5, 11]  # the stop went straight to the kill
    assert types(ar.task_runners["t"])[-3:] == ["Killing", "Terminated", "Killed"]
    ar.update(version(20))  # after run() finished: ignored
    assert ar.alloc.alloc_modify_index == 12


# --------------------------------------------------------------------------- destroy, kill


async def test_destroy_before_run_completes(autojump_clock: MockClock) -> None:
    async with harness() as h:
        alloc = job_alloc(one_task('run_for = "1h"'))
        ar = h.runner(alloc)
        await h.db.put_allocation(alloc)
        ar.destroy()  # returns at once
        ar.destroy()  # idempotent
        with trio.fail_after(5):
            await ar.destroyed.wait()
        assert h.driver.log == []
        assert await h.db.get_all_allocations() == ([], {})


async def test_destroy_while_running_kills_and_deletes_state(autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.start(job_alloc(one_task('run_for = "1h"', job_type="service")))
        await trio.sleep(5)
        ar.destroy()
        await ar.destroyed.wait()
        assert types(ar.task_runners["t"])[-3:] == ["Killing", "Terminated", "Killed"]
        assert await h.db.get_all_allocations() == ([], {})
        assert await h.db.get_task_runner_state("a1", "t") == (None, None)


class NeverExitsDriver:
    """A mock whose tasks ignore stop and whose wait never returns."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def wait_task(self, task_id: str) -> None:
        await trio.sleep_forever()

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        await trio.lowlevel.checkpoint()


async def test_kill_is_bounded_by_the_callers_deadline_and_by_its_own(
        autojump_clock: MockClock) -> None:
    from tests.runtime_support import unix_clock
    from yurt.runtime.client.drivers.mock import MockDriver

    driver = NeverExitsDriver(MockDriver(unix_clock))
    async with harness(driver=driver) as h:  # type: ignore[arg-type]
        ar = h.start(job_alloc(one_task('run_for = "1s"')))
        await trio.sleep(5)
        tr = ar.task_runners["t"]
        start = trio.current_time()
        with trio.move_on_after(2) as scope:
            await tr.kill(events.new_event(events.KILLING, 0, kill_timeout=1))
        assert scope.cancelled_caught
        assert trio.current_time() - start == 2
        assert not tr.done.is_set()
        # The driver never reports the exit: the runner gives up on it after its grace,
        # reports the task killed with the reason, and finishes.
        with trio.fail_after(tr.kill_bound()):
            await tr.done.wait()
        assert types(tr)[-2:] == ["Terminated", "Killed"]
        assert "did not exit within 5s" in tr.state.events[-1].details["kill_error"]
        h.nursery.cancel_scope.cancel()


async def test_signal(autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.start(job_alloc(one_task('run_for = "1h"\n signal_error = ""')))
        await trio.sleep(1)
        await ar.signal("t", "SIGHUP")
        tr = ar.task_runners["t"]
        assert types(tr)[-1] == "Signaling"
        assert displays(tr)[-1] == "Task being sent a signal"
        assert tr.state.events[-1].details == {"signal": "SIGHUP"}
        assert tr.handle is not None
        assert h.driver.signals(tr.handle.task_id) == ["SIGHUP"]
        with pytest.raises(AllocRunnerError, match="Task not found"):
            await ar.signal("nope", "SIGHUP")
        h.nursery.cancel_scope.cancel()


async def test_signal_error_is_returned(autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.start(job_alloc(one_task('run_for = "1h"\n signal_error = "no signals"')))
        await trio.sleep(1)
        with pytest.raises(DriverError, match="no signals"):
            await ar.signal("t", "SIGHUP")
        with pytest.raises(AllocRunnerError, match="Failed to signal task: t, err: no sig"):
            await ar.signal(None, "SIGHUP")
        h.nursery.cancel_scope.cancel()


async def test_shutdown_leaves_tasks_running(autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.start(job_alloc(one_task('run_for = "1h"', job_type="service")))
        await trio.sleep(1)
        ar.shutdown()
        await ar.shutdown_done.wait()
        assert ar.wait_done.is_set()
        assert h.task_log("stop") == []
        tr = ar.task_runners["t"]
        assert tr.state.state == "running"
        assert types(tr)[-1] == "Started"


# --------------------------------------------------------------------------- hooks, state


class FailingPrerun(AllocPrerunHook):
    name = "fail"

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def prerun(self) -> None:
        self.calls.append(self.name)
        raise RuntimeError("boom")


class OkPrerun(AllocPrerunHook):
    name = "ok"

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    async def prerun(self) -> None:
        self.calls.append(self.name)


async def test_prerun_failure_fails_every_task_and_stops_later_hooks(
        autojump_clock: MockClock) -> None:
    calls: list[str] = []
    hooks = (OkPrerun(calls), FailingPrerun(calls), OkPrerun(calls))
    ar = await run_to_end(job_alloc(one_task('run_for = "1s"')), alloc_hooks=hooks)
    assert calls == ["ok", "fail"]
    tr = ar.task_runners["t"]
    assert types(tr) == ["Received", "Setup Failure"]
    assert displays(tr)[1] == 'failed to setup alloc: pre-run hook "fail" failed: boom'
    assert tr.state.failed
    assert ar.alloc_state().client_status == "failed"


class RecordingDB(MemoryStateDB):
    """Remembers the event types of every task state written, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[list[str]] = []

    async def put_task_state(self, alloc_id: str, task: str, state: TaskState) -> None:
        self.writes.append([e.type for e in state.events])
        await super().put_task_state(alloc_id, task, state)


async def test_state_is_persisted_on_every_change(autojump_clock: MockClock) -> None:
    db = RecordingDB()
    async with harness() as h:
        config = dataclasses.replace(h.config, state_db=db)
        ar = AllocRunner(job_alloc(one_task(
            'run_for = "5s"\n exit_code = 1', job_type="batch",
            restart='restart {\n attempts = 1\n delay = "1s"\n interval = "1m"\n }')),
            config, nursery=h.nursery)
        await ar.run()
    final = [e.type for e in ar.task_runners["t"].state.events]
    # Every event reached the store in a write of its own, in order.
    persisted_lengths = sorted({len(w) for w in db.writes})
    assert persisted_lengths == list(range(2, len(final) + 1))
    assert db.writes[-1] == final
    local, state = await db.get_task_runner_state("a1", "t")
    assert state == ar.task_runners["t"].state
    assert local is not None
    assert local.run_complete
    assert local.hooks["task_dir"].prestart_done
    assert local.task_handle is None  # cleared once the task exited
    allocs, _ = await db.get_all_allocations()
    assert [(a.id, a.client_status) for a in allocs] == [("a1", "failed")]
    assert allocs[0].task_states["t"].state == "dead"


async def test_each_start_gets_a_new_invocation_id(autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.runner(job_alloc(one_task(
            'run_for = "1s"\n exit_code = 1',
            restart='restart {\n attempts = 2\n delay = "1s"\n interval = "1m"\n }')))
        await ar.run()
    ids = [task_id for _, kind, task_id in h.driver.log if kind == "start"]
    assert len(ids) == 3
    assert len(set(ids)) == 3
    for task_id in ids:
        alloc_id, task, suffix = task_id.split("/")
        assert (alloc_id, task, len(suffix)) == ("a1", "t", 8)
        int(suffix, 16)


async def test_destroy_then_run_in_the_same_tick_never_starts_tasks(
        autojump_clock: MockClock) -> None:
    async with harness() as h:
        ar = h.runner(job_alloc(one_task('run_for = "1h"', job_type="service")))
        ar.destroy()
        h.nursery.start_soon(ar.run)
        with trio.fail_after(60):
            await ar.destroyed.wait()
            await ar.wait_done.wait()
        await trio.sleep(10)
        assert h.driver.log == []
        assert await h.db.get_task_runner_state("a1", "t") == (None, None)


async def test_destroy_completes_even_if_the_driver_never_reports_the_exit(
        autojump_clock: MockClock) -> None:
    from tests.runtime_support import unix_clock
    from yurt.runtime.client.drivers.mock import MockDriver

    async with harness(driver=NeverExitsDriver(MockDriver(unix_clock))) as h:  # type: ignore[arg-type]
        ar = h.start(job_alloc(one_task('run_for = "1h"', job_type="service")))
        await trio.sleep(5)
        ar.destroy()
        with trio.fail_after(3600):
            await ar.destroyed.wait()
        assert ar.wait_done.is_set()
        assert await h.db.get_all_allocations() == ([], {})


async def test_a_failed_leader_is_reported_as_a_failed_sibling(
        autojump_clock: MockClock) -> None:
    ar = await run_to_end(job_alloc('''job "j" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "a" {
      driver = "mock_driver"
      config {
        run_for   = "1s"
        exit_code = 1
      }
    }
    task "leader" {
      driver = "mock_driver"
      leader = true
      config {
        run_for   = "1s"
        exit_code = 1
      }
    }
    task "w" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''))
    assert types(ar.task_runners["w"])[3] == "Sibling Task Failed"
    assert "Leader Task Dead" not in types(ar.task_runners["w"])


async def test_an_update_that_drops_a_task_does_not_hold_up_a_stop(
        autojump_clock: MockClock) -> None:
    alloc = job_alloc('''job "j" {
  group "g" {
    task "a" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
    task "b" {
      driver = "mock_driver"
      config {
        run_for    = "1h"
        kill_after = "1h"
      }
    }
  }
}''')
    async with harness() as h:
        ar = h.start(alloc)
        await trio.sleep(10)
        assert alloc.job is not None
        job = msgspec.structs.replace(alloc.job, task_groups=[msgspec.structs.replace(
            alloc.job.task_groups[0], tasks=alloc.job.task_groups[0].tasks[:1])])
        ar.update(msgspec.structs.replace(alloc, job=job, alloc_modify_index=5))
        await trio.sleep(1)
        ar.update(stopped(alloc, 6))
        await trio.sleep(1)
        assert ar.task_runners["a"].state.state == "dead"  # stopped without waiting for b
        killed = ar.task_runners["b"].state.events[3]
        assert (killed.type, killed.kill_reason, killed.fails_task) == (
            "Killed", "update missing task", True)
        h.nursery.cancel_scope.cancel()


async def test_the_client_view_is_never_terminal_before_sync_and_gc_are_told(
        autojump_clock: MockClock) -> None:
    told: list[str] = []  # client statuses as the client (sync, GC) hears them
    async with harness() as h:
        alloc = job_alloc(one_task('run_for = "1h"', job_type="service"))
        ar = AllocRunner(alloc, h.config, nursery=h.nursery,
                         on_alloc_state_updated=lambda a: told.append(a.client_status))
        h.nursery.start_soon(ar.run)
        await trio.sleep(1)
        ar.update(stopped(alloc))
        with trio.fail_after(10):
            # Every scheduling step, as an API reader could look at any of them.
            while ar.client_alloc().client_status != "complete":
                await trio.lowlevel.checkpoint()
        assert told[-1] == "complete"
        h.nursery.cancel_scope.cancel()

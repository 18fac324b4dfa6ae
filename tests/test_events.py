"""Task event display messages are Nomad's, byte for byte (layer 0)."""

from __future__ import annotations

import pytest

from yurt.runtime.client.drivers.protocol import ExitResult
from yurt.runtime.client.taskrunner import events as ev
from yurt.runtime.structs import TaskEvent, TaskState


@pytest.mark.parametrize(("event", "display"), [
    (ev.new_event(ev.KILLING, 0, kill_timeout=10_000_000),
     "Sent interrupt. Waiting 10ms before force killing"),
    (ev.new_event(ev.KILLING, 0, kill_timeout=5_000_000_000),
     "Sent interrupt. Waiting 5s before force killing"),
    (ev.new_event(ev.KILLING, 0), "Sent interrupt"),
    (ev.new_event(ev.KILLING, 0, kill_reason="because"), "because"),
    (ev.terminated(0, ExitResult(exit_code=137, signal=9)), "Exit Code: 137, Signal: 9"),
    (ev.terminated(0, ExitResult(exit_code=1, err='oops "x"')),
     'Exit Code: 1, Exit Message: "oops \\"x\\""'),
    (ev.new_event(ev.RESTARTING, 0, start_delay=15_587_610_296,
                  restart_reason="Restart within policy"), "Task restarting in 15.587610296s"),
    (ev.new_event(ev.RESTARTING, 0, start_delay=60_000_000_000,
                  restart_reason="Exceeded allowed attempts, applying a delay"),
     "Exceeded allowed attempts, applying a delay - Task restarting in 1m0s"),
    (ev.new_event(ev.RESTARTING, 0), "Task restarting in 0s"),
    (ev.new_event(ev.NOT_RESTARTING, 0), "Task exceeded restart policy"),
    (ev.new_event(ev.SIBLING_FAILED, 0, failed_sibling="web"), 'Task\'s sibling "web" failed'),
    (ev.new_event(ev.SIGNALING, 0), "Task being sent a signal"),
    (ev.new_event(ev.SIGNALING, 0, task_signal="SIGHUP"), "Task being sent signal SIGHUP"),
    (ev.new_event(ev.SIGNALING, 0, task_signal="SIGHUP", task_signal_reason="reload"),
     "Task being sent signal SIGHUP: reload"),
    (ev.new_event(ev.RESTART_SIGNALED, 0), "Task signaled to restart"),
    (ev.new_event(ev.KILLED, 0), "Task successfully killed"),
    (ev.new_event(ev.DRIVER_FAILURE, 0), "Failed to start task"),
    (ev.new_event(ev.LEADER_DEAD, 0), "Leader Task in Group dead"),
    (ev.new_event(ev.MAIN_DEAD, 0), "Main tasks in the group died"),
    (ev.new_event(ev.HOOK_FAILED, 0, message="task_dir: disk full"), "task_dir: disk full"),
])
def test_display_messages(event: TaskEvent, display: str) -> None:
    assert event.display_message == display


def test_details_are_strings_like_nomads() -> None:
    e = ev.new_event(ev.RESTARTING, 5, start_delay=1500, restart_reason="r")
    assert e.details == {"start_delay": "1500", "restart_reason": "r"}
    t = ev.terminated(5, ExitResult())
    assert t.details == {"exit_code": "0", "signal": "0", "oom_killed": "false"}


def test_ring_keeps_ten_and_counts_restarts() -> None:
    state = TaskState()
    for i in range(12):
        ev.append_event(state, ev.new_event(ev.RESTARTING, i * 10**9))
    assert len(state.events) == 10
    assert state.events[0].time == 2 * 10**9
    assert state.restarts == 12
    assert state.last_restart.timestamp() == 11
    ev.append_event(state, ev.new_event(ev.NOT_RESTARTING, 0, fails_task=True))
    assert state.failed

"""Lifecycle coordinator and client-status rules (layer 0: pure state machines)."""

from __future__ import annotations

import pytest

from yurt.runtime.client.allocrunner.lifecycle import Coordinator, CoordinatorState, Stage, stage_of
from yurt.runtime.client.allocrunner.status import client_status
from yurt.runtime.structs import Lifecycle, Task, TaskState

S = CoordinatorState


def task(name: str, hook: str = "", sidecar: bool = False) -> Task:
    return Task(name=name, lifecycle=Lifecycle(hook=hook, sidecar=sidecar) if hook else None)


TASKS = [task("init", "prestart"), task("side", "prestart", sidecar=True), task("main"),
         task("poke", "poststart"), task("tail", "poststart", sidecar=True),
         task("cleanup", "poststop")]


def states(**kw: str) -> dict[str, TaskState]:
    out = {t.name: TaskState(state="pending") for t in TASKS}
    for name, value in kw.items():
        state, _, failed = value.partition("+")
        out[name] = TaskState(state=state, failed=failed == "failed")
    return out


def test_stage_of() -> None:
    assert [stage_of(t) for t in TASKS] == [
        Stage.PRESTART_EPHEMERAL, Stage.PRESTART_SIDECAR, Stage.MAIN, Stage.POSTSTART_EPHEMERAL,
        Stage.POSTSTART_SIDECAR, Stage.POSTSTOP]
    assert stage_of(task("x", "poststop", sidecar=True)) is Stage.POSTSTOP
    assert stage_of(Task(name="x", lifecycle=Lifecycle(hook=""))) is Stage.MAIN


def test_walks_through_every_stage_in_order() -> None:
    c = Coordinator(TASKS)
    assert c.open_stages() == frozenset()
    assert c.task_states_updated(states()) == {Stage.PRESTART_EPHEMERAL, Stage.PRESTART_SIDECAR}
    assert c.state is S.PRESTART
    c.task_states_updated(states(init="dead", side="pending"))
    assert c.state is S.PRESTART  # the sidecar is not running yet
    c.task_states_updated(states(init="dead", side="running"))
    assert c.state is S.MAIN
    assert c.open_stages() == {Stage.PRESTART_SIDECAR, Stage.MAIN}
    c.task_states_updated(states(init="dead", side="running", main="running"))
    assert c.state is S.POSTSTART
    assert Stage.POSTSTART_EPHEMERAL in c.open_stages()
    c.task_states_updated(states(init="dead", side="running", main="running", poke="dead",
                                 tail="running"))
    assert c.state is S.WAIT_ALLOC
    assert c.open_stages() == {Stage.PRESTART_SIDECAR, Stage.MAIN, Stage.POSTSTART_SIDECAR}
    c.task_states_updated(states(init="dead", side="dead", main="dead", poke="dead",
                                 tail="dead"))
    assert c.state is S.POSTSTOP
    assert c.open_stages() == {Stage.POSTSTOP}


def test_failed_prestart_blocks_main() -> None:
    c = Coordinator(TASKS)
    c.task_states_updated(states())
    c.task_states_updated(states(init="dead+failed", side="running"))
    assert c.state is S.PRESTART
    assert not c.is_open(Stage.MAIN)


def test_poststop_from_any_state_once_everything_else_is_dead() -> None:
    c = Coordinator(TASKS)
    c.task_states_updated(states())
    c.task_states_updated(states(init="dead+failed", side="dead", main="dead", poke="dead",
                                 tail="dead"))
    assert c.state is S.POSTSTOP


def test_no_prestart_tasks_goes_straight_to_main() -> None:
    c = Coordinator([task("main")])
    assert c.task_states_updated({"main": TaskState()}) == {Stage.PRESTART_SIDECAR, Stage.MAIN}


def test_restart_and_restore() -> None:
    c = Coordinator(TASKS)
    c.task_states_updated(states())
    c.restart()
    assert c.state is S.INIT
    restored = Coordinator(TASKS)
    open_stages = restored.restore(states(init="dead", side="running", main="running"))
    assert Stage.MAIN in open_stages
    assert Stage.PRESTART_EPHEMERAL not in open_stages


@pytest.mark.parametrize(("task_states", "expected"), [
    (["dead+failed", "running"], ("failed", "Failed tasks")),
    (["running", "pending"], ("running", "Tasks are running")),
    (["pending", "dead"], ("pending", "No tasks have started")),
    (["dead", "dead"], ("complete", "All tasks have completed")),
    ([], ("", "")),
])
def test_client_status(task_states: list[str], expected: tuple[str, str]) -> None:
    parsed = [TaskState(state=s.partition("+")[0], failed=s.endswith("+failed"))
              for s in task_states]
    assert client_status(parsed) == expected

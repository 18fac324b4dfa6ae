"""The task lifecycle coordinator: which lifecycle stages may start tasks right now.

A pure state machine (Nomad's `client/allocrunner/tasklifecycle/coordinator.go` `Coordinator`),
fed with the tasks' states after every change and answering with the set of open stages. The
alloc runner turns that set into gates the task runners wait on.

States and the stages they open:

    init         nothing                      → prestart   when every task is pending
    prestart     prestart ephemeral + sidecar → main       when every prestart ephemeral task is
                                                           dead and not failed, and every
                                                           prestart sidecar is running
    main         prestart sidecar, main       → poststart  when no main task is pending
    poststart    + poststart ephemeral/sidecar→ wait_alloc when every poststart ephemeral is dead
    wait_alloc   prestart sidecar, main, poststart sidecar
    poststop     poststop only                (from any state, once every non-poststop task is
                                              dead; checked first; terminal)

A failed prestart ephemeral task therefore blocks main for good; the alloc runner's
sibling-failed kill is what ends the waiting main tasks. Transitions repeat until stable on
each update, so one update can move several states.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Final

from yurt.runtime.structs import (
    TASK_STATE_DEAD,
    TASK_STATE_PENDING,
    TASK_STATE_RUNNING,
    Task,
    TaskState,
)


class Stage(enum.Enum):
    PRESTART_EPHEMERAL = "prestart-ephemeral"
    PRESTART_SIDECAR = "prestart-sidecar"
    MAIN = "main"
    POSTSTART_EPHEMERAL = "poststart-ephemeral"
    POSTSTART_SIDECAR = "poststart-sidecar"
    POSTSTOP = "poststop"


class CoordinatorState(enum.Enum):
    INIT = "init"
    PRESTART = "prestart"
    MAIN = "main"
    POSTSTART = "poststart"
    WAIT_ALLOC = "wait_alloc"
    POSTSTOP = "poststop"


_OPEN: Final[dict[CoordinatorState, frozenset[Stage]]] = {
    CoordinatorState.INIT: frozenset(),
    CoordinatorState.PRESTART: frozenset({Stage.PRESTART_EPHEMERAL, Stage.PRESTART_SIDECAR}),
    CoordinatorState.MAIN: frozenset({Stage.PRESTART_SIDECAR, Stage.MAIN}),
    CoordinatorState.POSTSTART: frozenset({Stage.PRESTART_SIDECAR, Stage.MAIN,
                                           Stage.POSTSTART_EPHEMERAL, Stage.POSTSTART_SIDECAR}),
    CoordinatorState.WAIT_ALLOC: frozenset({Stage.PRESTART_SIDECAR, Stage.MAIN,
                                            Stage.POSTSTART_SIDECAR}),
    CoordinatorState.POSTSTOP: frozenset({Stage.POSTSTOP}),
}


def stage_of(task: Task) -> Stage:
    """A task's stage; no lifecycle (or an empty hook) is main; poststop ignores `sidecar`."""
    lc = task.lifecycle
    if lc is None or not lc.hook:
        return Stage.MAIN
    if lc.hook == "prestart":
        return Stage.PRESTART_SIDECAR if lc.sidecar else Stage.PRESTART_EPHEMERAL
    if lc.hook == "poststart":
        return Stage.POSTSTART_SIDECAR if lc.sidecar else Stage.POSTSTART_EPHEMERAL
    return Stage.POSTSTOP


class Coordinator:
    """Lifecycle stages for one allocation's tasks."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self.stages: dict[str, Stage] = {t.name: stage_of(t) for t in tasks}
        self.state = CoordinatorState.INIT

    def open_stages(self) -> frozenset[Stage]:
        return _OPEN[self.state]

    def is_open(self, stage: Stage) -> bool:
        return stage in _OPEN[self.state]

    def restart(self) -> None:
        """Back to the beginning (an alloc-wide restart reruns the stages in order)."""
        self.state = CoordinatorState.INIT

    def restore(self, states: Mapping[str, TaskState]) -> frozenset[Stage]:
        """After an agent restart: start from prestart, then apply the restored states."""
        self.state = CoordinatorState.PRESTART
        return self.task_states_updated(states)

    def task_states_updated(self, states: Mapping[str, TaskState]) -> frozenset[Stage]:
        """Advance as far as `states` allow; return the stages now open."""
        while True:
            new = self._next(states)
            if new is self.state:
                return _OPEN[self.state]
            self.state = new

    def _of(self, states: Mapping[str, TaskState], *stages: Stage) -> list[TaskState]:
        return [states[name] if name in states else TaskState()
                for name, stage in self.stages.items() if stage in stages]

    def _next(self, states: Mapping[str, TaskState]) -> CoordinatorState:
        s = CoordinatorState
        if self.state is s.POSTSTOP:
            return s.POSTSTOP
        non_poststop = self._of(states, *(st for st in Stage if st is not Stage.POSTSTOP))
        if all(t.state == TASK_STATE_DEAD for t in non_poststop):
            return s.POSTSTOP
        if self.state is s.INIT:
            everything = self._of(states, *Stage)
            return s.PRESTART if all(t.state == TASK_STATE_PENDING for t in everything) else (
                self.state)
        if self.state is s.PRESTART:
            ephemeral = self._of(states, Stage.PRESTART_EPHEMERAL)
            sidecars = self._of(states, Stage.PRESTART_SIDECAR)
            if all(t.state == TASK_STATE_DEAD and not t.failed for t in ephemeral) and all(
                    t.state == TASK_STATE_RUNNING for t in sidecars):
                return s.MAIN
            return self.state
        if self.state is s.MAIN:
            main = self._of(states, Stage.MAIN)
            return s.POSTSTART if all(t.state != TASK_STATE_PENDING for t in main) else (
                self.state)
        if self.state is s.POSTSTART:
            ephemeral = self._of(states, Stage.POSTSTART_EPHEMERAL)
            return s.WAIT_ALLOC if all(t.state == TASK_STATE_DEAD for t in ephemeral) else (
                self.state)
        return self.state

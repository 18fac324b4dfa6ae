"""A group's `disconnect` strategy in the generic scheduler (pure, layer 0): `replace = false`
leaves an unknown allocation unreplaced until it is lost, and `reconcile` picks which of an
original and its replacement survives a reconnect (Nomad's reconnecting_picker.go)."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from tests.scheduler_support import SchedulerState
from tests.test_scheduler_multinode import job, node, run, running
from yurt.runtime.lib.durations import SECOND
from yurt.runtime.server.scheduler import schedule
from yurt.runtime.structs import Allocation, Evaluation, Job, TaskState


def test_replace_false_places_nothing_for_an_unknown_allocation_until_it_is_lost() -> None:
    state = SchedulerState(node("a"), node("b"))
    j = job(group_block='disconnect {\n lost_after = "1m"\n replace = false\n }')
    (first,) = running(state, run(state, j))
    next(n for n in state.nodes() if n.id == first.node_id).status = "disconnected"
    plan = run(state, j, trigger="node-update")
    assert plan.place == []
    (unknown,) = plan.update
    assert (unknown.id, unknown.client_status) == (first.id, "unknown")
    # Another pass while it waits places nothing either.
    again = run(state, j, trigger="node-update")
    assert (again.place, again.stop) == ([], [])
    # Past the window it is lost, and only now replaced.
    ev = Evaluation(id="late", job_id=j.id, triggered_by="max-disconnect-timeout")
    n = iter(range(1000))
    past = schedule(state, ev, j, index=90, now=unknown.modify_time + 60 * SECOND,
                    new_id=lambda: f"p-{next(n)}")
    assert [(a.id, a.client_status) for a in past.stop] == [(first.id, "lost")]
    (replacement,) = past.place
    assert replacement.node_id != first.node_id


def _reconnect(reconcile: str, original_start: int, replacement_start: int
               ) -> tuple[Allocation, Allocation, list[str]]:
    """An original and its replacement running again side by side: (original,
    replacement, the IDs the reconnect stops)."""
    state = SchedulerState(node("a"), node("b"))
    j: Job = job(group_block=f'disconnect {{\n lost_after = "1h"\n reconcile = "{reconcile}"'
                             "\n }")
    (first,) = running(state, run(state, j))
    away = next(n for n in state.nodes() if n.id == first.node_id)
    away.status = "disconnected"
    (replacement,) = running(state, run(state, j, trigger="node-update"))
    away.status = "ready"

    def started(alloc: Allocation, at: int) -> Allocation:
        when = datetime.fromtimestamp(at, UTC)
        return msgspec.structs.replace(state.allocs[alloc.id], client_status="running",
                                       task_states={"t": TaskState(started_at=when)})

    state.allocs[first.id] = started(first, original_start)
    state.allocs[replacement.id] = started(replacement, replacement_start)
    plan = run(state, j, trigger="node-update")
    assert plan.place == []
    return first, replacement, [a.id for a in plan.stop]


@pytest.mark.parametrize(("reconcile", "starts", "stopped"), [
    ("best_score", (100, 200), "replacement"),
    ("keep_original", (100, 200), "replacement"),
    ("keep_replacement", (100, 200), "original"),
    ("longest_running", (100, 200), "replacement"),
    ("longest_running", (300, 200), "original"),
])
def test_reconcile_picks_the_survivor_of_a_reconnect(reconcile: str, starts: tuple[int, int],
                                                     stopped: str) -> None:
    original, replacement, stops = _reconnect(reconcile, *starts)
    assert stops == [original.id if stopped == "original" else replacement.id]

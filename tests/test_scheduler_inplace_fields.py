"""Fields a running allocation reads afresh from its job are updated in place, never by
replacing the allocation (scheduler/util.go `tasksUpdated` compares none of them): the
group's scaling policy, shutdown_delay and max_run_duration, the tasks' actions. A host
volume request, which `tasksUpdated` compares, still replaces it (pure, layer 0)."""

from __future__ import annotations

import pytest

from tests.scheduler_support import SchedulerState
from tests.test_scheduler_multinode import job, node, run, running
from yurt.runtime.server.scheduler.plan import group_spec
from yurt.runtime.structs.volume import TaskAction


@pytest.mark.parametrize("changed", [
    "scaling {\n max = 5\n }",
    'shutdown_delay = "9s"',
    'max_run_duration = "1h"',
])
def test_a_change_of_these_updates_in_place(changed: str) -> None:
    state = SchedulerState(node("a"))
    before = job(job_type="batch")
    (first,) = running(state, run(state, before))
    after = job(job_type="batch", group_block=changed)
    after.version, after.job_modify_index = 1, 100
    plan = run(state, after)
    assert (plan.place, plan.stop) == ([], [])
    assert plan.desired["g"].in_place_update == 1
    assert state.allocs[first.id].job is after


def test_actions_do_not_change_the_group_spec_but_a_volume_does() -> None:
    plain = job().task_groups[0]
    with_action = job().task_groups[0]
    with_action.tasks[0].actions = [TaskAction(name="a", command="/bin/true")]
    assert group_spec(plain) == group_spec(with_action)
    with_volume = job(group_block='volume "v" {\n type = "host"\n source = "v"\n }')
    assert group_spec(plain) != group_spec(with_volume.task_groups[0])


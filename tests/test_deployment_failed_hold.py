"""Failed allocations in rolling updates (layer 0, the pure scheduler over the in-memory world
of test_deployments.py): one of the deployment holds the rollout, and one of an older spec is
replaced when the job changes, a rollback included.

Nomad's reconciler keeps a failed allocation that is not rescheduled now among the group's
untainted allocations (`filterByRescheduleable`), so `computeUnderProvisionedBy` sees it
unhealthy and allows no further destructive update. Before this was so here, the
alloc-failure evaluation of a crashing new version replaced the next old allocation, and the
next, until none of the working version was left: found by the rolling-update end-to-end
test with `health_check = "task_states"` (tests/test_deployment_e2e.py).

The same reconciler updates a failed allocation of an older spec destructively like any other,
so an `auto_revert` rollback brings back the crashed allocation of the broken version at once.
Here it waited for its reschedule delay, or, with rescheduling off, was never replaced: the
rolled-back job ran 2 of its 3 allocations."""

from __future__ import annotations

import msgspec
import pytest

from tests.test_deployments import NOW, World, alloc_failure, job_text, rolled_out
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.scheduler import deployments
from yurt.runtime.server.scheduler.reschedule import unix_ns
from yurt.runtime.structs import AllocDeploymentStatus


def test_a_failed_unhealthy_allocation_holds_the_rollout_until_replaced() -> None:
    w = rolled_out(job_text())
    plan = w.register(job_text(command="true"))
    (new,) = plan.place
    # What the client reports for a task that crashed: failed, and so unhealthy.
    w.allocs[new.id] = msgspec.structs.replace(
        w.allocs[new.id], client_status="failed",
        deployment_status=AllocDeploymentStatus(healthy=False))
    plan = alloc_failure(w)
    assert (plan.place, plan.stop) == ([], [])
    assert len(w.running(0)) == 2
    (follow,) = plan.evals  # the service policy's delay before the replacement
    assert unix_ns(follow.wait_until) > NOW

    # Its replacement, once due, is placed in its name; the rollout waits for its health.
    plan = alloc_failure(w, unix_ns(follow.wait_until))
    (again,) = plan.place
    assert again.previous_allocation == new.id
    assert plan.stop == []
    w.make_healthy(1)
    plan = w.evaluate()
    assert (len(plan.place), len(plan.stop)) == (1, 1)  # the next old allocation's turn
    assert all(deployments.is_healthy(a) for a in w.running(0))


def crashed(w: World, text: str) -> str:
    """Registers `text` over the rolled-out world; its first allocation crashes (failed and
    unhealthy, as the client reports it) and the alloc-failure evaluation runs. Returns the
    crashed allocation's ID."""
    plan = w.register(text)
    (new,) = plan.place
    w.allocs[new.id] = msgspec.structs.replace(
        w.allocs[new.id], client_status="failed",
        deployment_status=AllocDeploymentStatus(healthy=False))
    alloc_failure(w)
    return new.id


@pytest.mark.parametrize("reschedule", ["", "reschedule {\n attempts = 0\n unlimited = false\n }"],
                         ids=["delayed", "off"])
def test_a_rollback_replaces_the_crashed_allocation_at_once(reschedule: str) -> None:
    update = f"update {{ max_parallel = 1 }}\n{reschedule}"
    good = job_text(update=update)
    w = rolled_out(good)
    gone = crashed(w, job_text(update=update, command="true"))
    d = w.latest()
    assert d is not None
    assert w.job is not None
    w.deployments[d.id] = msgspec.structs.replace(d, status="failed")
    # The watcher's rollback: the stable spec registered again as the next version.
    w.index += 1
    w.job = msgspec.structs.replace(parse_job(good), version=w.job.version + 1,
                                    create_index=1, job_modify_index=w.index)
    plan = w.evaluate("deployment-watcher")
    (again,) = plan.place
    assert again.previous_allocation == gone
    assert again.job is not None
    assert again.job.version == 2
    assert w.allocs[gone].next_allocation == again.id
    assert plan.stop == []
    assert plan.desired["g"].in_place_update == 2
    assert not [e for e in plan.evals if e.triggered_by == "failed-follow-up"]
    rollback = w.latest()
    assert rollback is not None
    assert rollback.task_groups["g"].desired_total == 3
    w.make_healthy(2)
    w.evaluate("deployment-watcher")
    assert w.deployments[rollback.id].status == "successful"
    assert len(w.running(2)) == 3

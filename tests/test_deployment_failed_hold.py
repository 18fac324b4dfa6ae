"""A failed allocation of a rolling update holds the rollout (layer 0, the pure scheduler over
the in-memory world of test_deployments.py).

Nomad's reconciler keeps a failed allocation that is not rescheduled now among the group's
untainted allocations (`filterByRescheduleable`), so `computeUnderProvisionedBy` sees it
unhealthy and allows no further destructive update. Before this was so here, the
alloc-failure evaluation of a crashing new version replaced the next old allocation, and the
next, until none of the working version was left: found by the rolling-update end-to-end
test with `health_check = "task_states"` (tests/test_deployment_e2e.py)."""

from __future__ import annotations

import msgspec

from tests.test_deployments import NOW, alloc_failure, job_text, rolled_out
from yurt.runtime.server import deployments
from yurt.runtime.server.reschedule import unix_ns
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

    # Its replacement, once due, is placed in its name; the rollout waits for its health.
    plan = alloc_failure(w, unix_ns(follow.wait_until))
    (again,) = plan.place
    assert again.previous_allocation == new.id
    assert plan.stop == []
    w.make_healthy(1)
    plan = w.evaluate()
    assert (len(plan.place), len(plan.stop)) == (1, 1)  # the next old allocation's turn
    assert all(deployments.is_healthy(a) for a in w.running(0))
    assert NOW < unix_ns(follow.wait_until)

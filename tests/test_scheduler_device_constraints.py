"""A device request's `constraint` and `affinity` blocks (Nomad's RequestedDevice): parsed,
and at placement the constraints choose among the node's device groups by `${device.model}`,
`${device.vendor}`, `${device.type}`, `${device.ids}` and `${device.attr.*}` (Nomad's
nodeDeviceMatches, resolveDeviceTarget), pure, layer 0."""

from __future__ import annotations

from tests.scheduler_support import SchedulerState
from tests.test_scheduler_multinode import job, node, run
from yurt.runtime.server.scheduler.feasible import device_meets, resolve_device_target
from yurt.runtime.structs import (
    NodeCpuResources,
    NodeDeviceInstance,
    NodeDeviceResource,
    NodeMemoryResources,
    NodeResources,
)
from yurt.runtime.structs.constraint import Constraint

T4 = NodeDeviceResource(vendor="nvidia", type="gpu", name="t4",
                        instances=[NodeDeviceInstance(id="g0", healthy=True)],
                        attributes={"cuda_cores": "2560", "driver_version": "535.1"})
A100 = NodeDeviceResource(vendor="nvidia", type="gpu", name="a100",
                          instances=[NodeDeviceInstance(id="g1", healthy=True)],
                          attributes={"cuda_cores": "6912", "driver_version": "535.1"})


def test_device_targets_are_nomads() -> None:
    assert resolve_device_target("${device.model}", T4) == ("t4", True)
    assert resolve_device_target("${device.ids}", T4) == ("g0", True)
    assert resolve_device_target("${device.attr.cuda_cores}", T4) == ("2560", True)
    assert resolve_device_target("${device.attr.nope}", T4) == ("", False)
    assert device_meets([Constraint(attribute="${device.attr.cuda_cores}", operator=">",
                                    value="5000")], A100)
    assert not device_meets([Constraint(attribute="${device.attr.cuda_cores}", operator=">",
                                        value="5000")], T4)


def test_the_constraint_picks_the_device_group() -> None:
    state = SchedulerState(node("a", node_resources=NodeResources(
        cpu=NodeCpuResources(cpu_shares=4000), memory=NodeMemoryResources(memory_mb=4096),
        devices=[T4, A100])))
    block = '''device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.cuda_cores}"
            operator  = ">"
            value     = "5000"
          }
          affinity {
            attribute = "${device.model}"
            value     = "a100"
            weight    = 50
          }
        }'''
    j = job(resources_block=block)
    request = j.task_groups[0].tasks[0].resources.devices[0]
    assert [(c.attribute, c.operator, c.value) for c in request.constraints] == [
        ("${device.attr.cuda_cores}", ">", "5000")]
    assert request.affinities[0].weight == 50
    (placed,) = run(state, j).place
    assert placed.task_resources["t"].devices[0].device_ids == ["g1"]
    # Nothing else meets it: the second is not placed, the devices dimension exhausted.
    plan = run(state, job("more", resources_block=block))
    assert plan.place == []
    assert plan.eval.failed_tg_allocs is not None
    assert plan.eval.failed_tg_allocs["g"].dimension_exhausted == {"devices": 1}

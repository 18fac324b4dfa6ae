"""Static host volumes at placement and the mounts they resolve to (layer 1, pure): a
group's `volume { type = "host" }` is feasible only on a node whose `HostVolumes` has its
source, read-write only where the node's volume is not read-only, and `per_alloc` sources
carry the allocation's index, as Nomad's HostVolumeChecker (scheduler/feasible/feasible.go
`nodeIsFeasibleForRequest`); a filtered node is counted under "missing compatible host
volumes" (runtime/server/scheduler/feasible.py `host_volume_reason`). A task's mounts resolve
as Nomad's volume hook resolves them (runtime/structs/hostvolumes.py `host_volume_mounts`)."""

from __future__ import annotations

import pytest

from tests.scheduler_support import SchedulerState
from tests.test_scheduler_multinode import job, node, on, run
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.scheduler.feasible import (
    FILTER_HOST_VOLUMES,
    filter_reason,
    host_volume_reason,
)
from yurt.runtime.structs import ClientHostVolumeConfig, Node
from yurt.runtime.structs.hostvolumes import (
    HostVolumeError,
    MountConfig,
    alloc_suffix,
    host_volume_mounts,
)


def _volumes(**read_only: bool) -> dict[str, ClientHostVolumeConfig]:
    return {name: ClientHostVolumeConfig(name=name, path=f"/srv/{name}", read_only=ro)
            for name, ro in read_only.items()}


def _volume_block(source: str = "data", *, read_only: bool = False, per_alloc: bool = False,
                  kind: str = "host") -> str:
    access = "single-node-reader-only" if read_only else "single-node-writer"
    return f'''volume "v" {{
      type      = "{kind}"
      source    = "{source}"
      read_only = {str(read_only).lower()}
      per_alloc = {str(per_alloc).lower()}
      access_mode = "{access}"
      attachment_mode = "file-system"
    }}'''


@pytest.mark.parametrize(("offered", "read_only", "feasible"), [
    ({"data": False}, False, True),
    ({"data": False}, True, True),
    ({"data": True}, True, True),
    ({"data": True}, False, False),  # read-write asked of a read-only volume
    ({"other": False}, True, False),  # the node lacks it
    ({}, True, False),
])
def test_a_host_volume_request_is_feasible_as_nomads_checker_says(
        offered: dict[str, bool], read_only: bool, feasible: bool) -> None:
    j = job(group_block=_volume_block(read_only=read_only))
    n = node("n1", host_volumes=_volumes(**offered))
    expected = None if feasible else FILTER_HOST_VOLUMES
    assert host_volume_reason(j.task_groups[0], n) == expected
    assert filter_reason(j, j.task_groups[0], n, []) == expected


def test_a_group_without_host_volumes_needs_none() -> None:
    j = job()
    assert host_volume_reason(j.task_groups[0], node("n1")) is None


def test_the_scheduler_places_only_on_the_node_with_the_volume() -> None:
    state = SchedulerState(node("bare"), node("has", host_volumes=_volumes(data=False)))
    plan = run(state, job(count=2, group_block=_volume_block(read_only=True)))
    assert on(plan) == ["has", "has"]
    assert not plan.failed


def test_a_missing_volume_fails_placement_naming_the_check() -> None:
    state = SchedulerState(node("n1", host_volumes=_volumes(data=True)), node("n2"))
    plan = run(state, job(group_block=_volume_block(read_only=False)))
    assert not plan.place
    assert plan.failed["g"] == f'Constraint "{FILTER_HOST_VOLUMES}" filtered 2 nodes'
    metric = (plan.eval.failed_tg_allocs or {})["g"]
    assert metric.constraint_filtered == {FILTER_HOST_VOLUMES: 2}
    assert (metric.nodes_evaluated, metric.nodes_filtered) == (2, 2)


def test_per_alloc_sources_carry_the_allocation_index() -> None:
    assert (alloc_suffix("web.g[3]"), alloc_suffix("web.g")) == ("[3]", "")
    both = node("both", host_volumes=_volumes(**{"data[0]": False, "data[1]": False}))
    first = node("first", host_volumes=_volumes(**{"data[0]": False}))
    j = job(count=2, group_block=_volume_block(per_alloc=True, read_only=True))
    group = j.task_groups[0]
    assert host_volume_reason(group, first, "web.g[0]") is None
    assert host_volume_reason(group, first, "web.g[1]") == FILTER_HOST_VOLUMES
    state = SchedulerState(first)
    plan = run(state, j)
    assert [a.name for a in plan.place] == ["web.g[0]"]
    assert plan.failed["g"] == f'Constraint "{FILTER_HOST_VOLUMES}" filtered 1 nodes'
    state = SchedulerState(both)
    assert sorted(a.name for a in run(state, j).place) == ["web.g[0]", "web.g[1]"]


def test_csi_volumes_stay_refused_with_their_own_reason() -> None:
    j = job(group_block=_volume_block(kind="csi"))
    n: Node = node("n1", host_volumes=_volumes(data=False))
    assert filter_reason(j, j.task_groups[0], n, []) == "missing CSI Volume data"


MOUNTS = '''job "web" {
  group "g" {
    volume "ro" {
      type      = "host"
      source    = "logs"
      read_only = true
    }
    volume "rw" {
      type      = "host"
      source    = "data"
      per_alloc = true
    }
    task "t" {
      driver = "mock_driver"
      volume_mount {
        volume      = "ro"
        destination = "/logs"
      }
      volume_mount {
        volume           = "rw"
        destination      = "/data"
        propagation_mode = "host-to-task"
      }
    }
  }
}'''


def test_a_tasks_mounts_resolve_against_the_nodes_volumes_as_nomads_volume_hook() -> None:
    group = parse_job(MOUNTS).task_groups[0]
    offered = _volumes(logs=False, **{"data[1]": False})
    mounts = host_volume_mounts(group.volumes, group.tasks[0].volume_mounts, offered,
                                "web.g[1]")
    assert mounts == [
        MountConfig(task_path="/logs", host_path="/srv/logs", readonly=True),
        MountConfig(task_path="/data", host_path="/srv/data[1]", readonly=False,
                    propagation_mode="host-to-task")]
    # A read-only node volume makes the mount read-only whatever the job says.
    offered["data[1]"] = ClientHostVolumeConfig(name="data[1]", path="/d", read_only=True)
    assert host_volume_mounts(group.volumes, group.tasks[0].volume_mounts, offered,
                              "web.g[1]")[1].readonly
    with pytest.raises(HostVolumeError, match=r"^host volume validation error: missing "
                                              r"data\[0\]$"):
        host_volume_mounts(group.volumes, group.tasks[0].volume_mounts, offered, "web.g[0]")

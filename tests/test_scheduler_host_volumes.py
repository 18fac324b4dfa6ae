"""Static host volumes at placement (layer 1, pure): a group's `volume { type = "host" }` is
feasible only on a node whose `HostVolumes` has its source, read-write only where the node's
volume is not read-only, and `per_alloc` sources carry the allocation's index, as Nomad's
HostVolumeChecker (scheduler/feasible/feasible.go `nodeIsFeasibleForRequest`); a filtered
node is counted under "missing compatible host volumes" (runtime/server/scheduler/feasible.py
`host_volume_reason`)."""

from __future__ import annotations

import pytest

from tests.scheduler_support import SchedulerState
from tests.test_scheduler_multinode import job, node, on, run
from yurt.runtime.server.scheduler.feasible import (
    FILTER_HOST_VOLUMES,
    alloc_suffix,
    filter_reason,
    host_volume_reason,
)
from yurt.runtime.structs import ClientHostVolumeConfig, Node


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

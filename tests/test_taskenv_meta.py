"""`meta` in the task environment (layer 0): job, group and task meta merged (task over group
over job) into `NOMAD_META_<key>` and `NOMAD_META_<KEY>`, values interpolated against the node
and the Nomad variables as Nomad's env builder does, and the task's `env` able to use them."""

from __future__ import annotations

from yurt.runtime.client.taskenv import build_env
from yurt.runtime.jobspec import parse_job
from yurt.runtime.structs import Allocation, Node

JOB = '''job "web" {
  meta {
    owner = "job"
    tier  = "job"
    team  = "ops"
  }
  group "g" {
    meta {
      tier = "group"
      zone = "${node.datacenter}-${attr.rack}"
    }
    task "t" {
      driver = "mock_driver"
      meta {
        owner = "task"
        alloc = "${NOMAD_ALLOC_INDEX}"
      }
      env {
        WHO = "${NOMAD_META_owner}/${NOMAD_META_TIER}"
      }
    }
  }
}'''


def test_meta_merges_task_over_group_over_job_and_is_interpolated() -> None:
    job = parse_job(JOB)
    group = job.task_groups[0]
    alloc = Allocation(id="a1", name="web.g[2]", job_id="web", task_group="g", job=job)
    node = Node(id="n1", datacenter="dc7", attributes={"rack": "r3"})
    env = build_env(alloc, group.tasks[0], task_dir=None, node=node)
    meta = {k: v for k, v in env.items() if k.startswith("NOMAD_META_")}
    assert meta == {
        "NOMAD_META_owner": "task", "NOMAD_META_OWNER": "task",
        "NOMAD_META_tier": "group", "NOMAD_META_TIER": "group",
        "NOMAD_META_team": "ops", "NOMAD_META_TEAM": "ops",
        "NOMAD_META_zone": "dc7-r3", "NOMAD_META_ZONE": "dc7-r3",
        "NOMAD_META_alloc": "2", "NOMAD_META_ALLOC": "2"}
    assert env["WHO"] == "task/group"

"""Host volumes and mounts, scaling, disconnect and max_run_duration in a job file: parsed as
Nomad's api/tasks.go has them, checked with Nomad's rules in Nomad's words
(runtime/jobspec/rules_volume.py); a host volume is left to the node's `HostVolumes` at
placement, other volumes are refused there (runtime/server/scheduler/feasible.py
`unplaceable_reason`)."""

from __future__ import annotations

import json

from tests.jobspec_support import problems_of
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.scheduler.feasible import unplaceable_reason


def _job(group: str, task: str = "", job_type: str = "service") -> str:
    return f'''job "j" {{
  type = "{job_type}"
  group "g" {{
    {group}
    task "t" {{
      driver = "mock_driver"
      {task}
    }}
  }}
}}
'''


VOLUME = '''volume "data" {
      type            = "host"
      source          = "shared"
      read_only       = true
      access_mode     = "single-node-reader-only"
      attachment_mode = "file-system"
      per_alloc       = false
    }'''
MOUNT = '''volume_mount {
        volume           = "data"
        destination      = "/srv"
        read_only        = true
        propagation_mode = "host-to-task"
      }'''


def test_a_host_volume_and_its_mount_parse_as_nomads() -> None:
    job = parse_job(_job(VOLUME, MOUNT), filename="j.nomad.hcl")
    group = job.task_groups[0]
    vol = group.volumes["data"]
    assert (vol.name, vol.type, vol.source, vol.read_only, vol.access_mode) == (
        "data", "host", "shared", True, "single-node-reader-only")
    (mount,) = group.tasks[0].volume_mounts
    assert (mount.volume, mount.destination, mount.propagation_mode) == (
        "data", "/srv", "host-to-task")
    # Not refused whatever the node: the node's host volumes decide (feasible.py).
    assert unplaceable_reason(group) is None


def test_json_volumes_are_a_map_keyed_by_name() -> None:
    text = json.dumps({"Job": {"ID": "j", "TaskGroups": [{
        "Name": "g", "Volumes": {"data": {"Type": "host", "Source": "s"}},
        "Tasks": [{"Name": "t", "Driver": "mock_driver",
                   "VolumeMounts": [{"Volume": "data", "Destination": "/d"}]}]}]}})
    group = parse_job(text, filename="j.json").task_groups[0]
    assert group.volumes["data"].name == "data"
    assert group.tasks[0].volume_mounts[0].destination == "/d"


def test_volume_rules_are_nomads() -> None:
    bad = '''volume "a" {
      type = "nfs"
    }
    volume "b" {
      type        = "host"
      access_mode = "single-node-reader-only"
      per_alloc   = true
    }
    volume "c" {
      type        = "host"
      source      = "c"
      access_mode = "multi-node-multi-writer"
    }'''
    mount = '''volume_mount {
        volume           = "nope"
        propagation_mode = "sideways"
      }'''
    found = sorted((p.field, p.message) for p in problems_of(_job(bad, mount, "system")))
    assert found == sorted([
        ("job.j.group.g.volume.a", "volume has unrecognized type nfs"),
        ("job.j.group.g.volume.b", "volume has an empty source"),
        ("job.j.group.g.volume.b", "volume cannot be per_alloc for system or sysbatch jobs"),
        ("job.j.group.g.volume.b", "single-node-reader-only volumes must be read-only"),
        ("job.j.group.g.volume.c",
         "host volumes cannot be mounted with multi-node-multi-writer access mode"),
        ("job.j.group.g.task.t.volume_mount.0",
         "Volume Mount (0) references undefined volume nope"),
        ("job.j.group.g.task.t.volume_mount.0",
         'Volume Mount (0) is invalid: "volume mount has an invalid propagation mode: '
         '"sideways""'),
    ])


def test_scaling_defaults_and_rules() -> None:
    job = parse_job(_job("count = 2\n    scaling {\n      max = 4\n      policy {\n"
                         '        cooldown = "1m"\n      }\n    }'), filename="j.nomad.hcl")
    policy = job.task_groups[0].scaling
    assert policy is not None
    # api/scaling.go `Canonicalize`: min is the count, enabled, horizontal.
    assert (policy.min, policy.max, policy.enabled, policy.type) == (2, 4, True, "horizontal")
    assert policy.policy == {"cooldown": "1m"}
    msgs = [p.message for p in problems_of(_job("count = 5\n    scaling {\n      min = 1\n"
                                                 "      max = 3\n    }"))]
    assert msgs == ["Scaling policy invalid: task group count must not be greater than maximum "
                    "count in scaling policy"]
    msgs = [p.message for p in problems_of(_job("scaling {\n      min = 1\n    }"))]
    assert msgs == ["maximum count must be specified and non-negative"]


def test_disconnect_rules_are_nomads() -> None:
    block = ('disconnect {\n      lost_after = "1h"\n      stop_on_client_after = "1m"\n'
             '      reconcile = "coin_flip"\n    }')
    msgs = sorted(p.message for p in problems_of(_job(block, job_type="sysbatch")))
    assert msgs == sorted(["stop_after can only be used with service or batch job types",
                    "Disconnect cannot be configured with both lost_after and stop_after",
                    "reconcile option is invalid: coin_flip"])
    # Nomad 1.10 ignores the deprecated spelling (with a warning at registration).
    job = parse_job(_job('stop_after_client_disconnect = "90s"'), filename="j.nomad.hcl")
    assert job.task_groups[0].disconnect is None
    assert job.task_groups[0].stop_after_client_disconnect == 90 * 10**9


def test_max_run_duration_is_for_batch_jobs() -> None:
    (p,) = problems_of(_job('max_run_duration = "1h"'))
    assert p.message == 'Job type "service" does not allow max_run_duration'
    job = parse_job(_job('max_run_duration = "1h"', job_type="batch"), filename="j.hcl")
    assert job.task_groups[0].max_run_duration == 3600 * 10**9


def test_csi_access_modes_limit_the_count_as_nomads() -> None:
    # nomad/structs/volumes.go `VolumeRequest.Validate`: a volume one node may use, shared by
    # several allocations, is refused unless each allocation has its own (`per_alloc`).
    def csi(name: str, mode: str, extra: str = "") -> str:
        return (f'volume "{name}" {{\n type = "csi"\n source = "{name}"\n'
                f' attachment_mode = "file-system"\n access_mode = "{mode}"\n{extra}}}')

    group = "count = 2\n" + "\n".join([
        csi("r", "single-node-reader-only", "read_only = true\n"),
        csi("w", "single-node-writer"),
        csi("m", "multi-node-single-writer"),
        csi("ok", "multi-node-single-writer", "read_only = true\n"),
        csi("each", "single-node-writer", "per_alloc = true\n")])
    found = sorted((p.field, p.message) for p in problems_of(_job(group)))
    assert found == [
        ("job.j.group.g.volume.m",
         "volume with multi-node-single-writer access mode allows only one writer"),
        ("job.j.group.g.volume.r",
         "volume with single-node-reader-only access mode allows only one reader"),
        ("job.j.group.g.volume.w",
         "volume with single-node-writer access mode allows only one reader or writer")]

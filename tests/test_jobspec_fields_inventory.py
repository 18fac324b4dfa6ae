"""Every field of Nomad's jobspec (api/jobs.go `Job`, api/tasks.go `TaskGroup`, `Task`,
api/resources.go `Resources`: their `hcl:` tags) and what yurt does with it. No field is
"unknown" or "not supported yet" at parse time: each is supported, refused by one of Nomad's
own rules in Nomad's words (its Community Edition's, for Enterprise features), refused at
placement with Nomad's filter reason (runtime/server/scheduler/feasible.py
`unplaceable_reason`), or, for Consul- and Vault-only blocks, refused with what yurt offers
instead."""

from __future__ import annotations

import json
from typing import Final

import pytest

from yurt.runtime.errors import JobSpecError
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.scheduler.feasible import unplaceable_reason

SUPPORTED: Final = "supported"
PLACEMENT: Final = "refused at placement"
NOMAD_RULE: Final = "refused by Nomad's rule"
CONSUL_VAULT: Final = "Consul/Vault: yurt's alternative named"

# (block, field, sample HCL, status, the expected message for refusals)
INVENTORY: Final[list[tuple[str, str, str, str, str]]] = [
    ("job", "id", 'id = "j"', SUPPORTED, ""),
    ("job", "region", 'region = "global"', SUPPORTED, ""),
    ("job", "namespace", 'namespace = "default"', SUPPORTED, ""),
    ("job", "name", 'name = "j"', SUPPORTED, ""),
    ("job", "priority", "priority = 60", SUPPORTED, ""),
    ("job", "all_at_once", "all_at_once = true", SUPPORTED, ""),  # deprecated no-op in Nomad
    ("job", "datacenters", 'datacenters = ["dc1"]', SUPPORTED, ""),
    ("job", "node_pool", 'node_pool = "default"', SUPPORTED, ""),
    ("job", "constraint", 'constraint {\nattribute = "${attr.kernel.name}"\nvalue = "linux"\n}',
     SUPPORTED, ""),
    ("job", "affinity", 'affinity {\nattribute = "${node.datacenter}"\nvalue = "dc1"\n'
                        "weight = 50\n}", SUPPORTED, ""),
    ("job", "spread", 'spread {\nattribute = "${node.datacenter}"\n}', SUPPORTED, ""),
    ("job", "multiregion", 'multiregion {\nregion "west" {\ncount = 1\n}\n}', SUPPORTED, ""),
    ("job", "periodic", 'periodic {\ncrons = ["*/5 * * * *"]\n}', SUPPORTED, ""),
    ("job", "parameterized", "parameterized {\n}", SUPPORTED, ""),
    ("job", "reschedule", "reschedule {\nattempts = 1\n}", SUPPORTED, ""),
    ("job", "migrate", "migrate {\nmax_parallel = 1\n}", NOMAD_RULE,
     'Job type "batch" does not allow migrate block'),
    ("job", "meta", 'meta {\na = "b"\n}', SUPPORTED, ""),
    ("job", "ui", 'ui {\ndescription = "x"\n}', SUPPORTED, ""),
    ("job", "consul_token", 'consul_token = "x"', CONSUL_VAULT, "yurt has no Consul"),
    ("job", "vault_token", 'vault_token = "x"', CONSUL_VAULT, "yurt has no Vault"),
    ("group", "count", "count = 2", SUPPORTED, ""),
    ("group", "constraint", 'constraint {\nattribute = "${attr.kernel.name}"\n'
                            'value = "linux"\n}', SUPPORTED, ""),
    ("group", "affinity", 'affinity {\nattribute = "${node.datacenter}"\nvalue = "dc1"\n'
                          "weight = 50\n}", SUPPORTED, ""),
    ("group", "spread", 'spread {\nattribute = "${node.datacenter}"\n}', SUPPORTED, ""),
    # Host volumes: placed where a node offers them (test_scheduler_host_volumes.py).
    ("group", "volume", 'volume "v" {\ntype = "host"\nsource = "v"\n}', SUPPORTED, ""),
    ("group", "restart", "restart {\nattempts = 1\n}", SUPPORTED, ""),
    ("group", "disconnect", 'disconnect {\nlost_after = "1h"\nreplace = true\n'
                            'reconcile = "best_score"\n}', SUPPORTED, ""),
    ("group", "reschedule", "reschedule {\nattempts = 1\n}", SUPPORTED, ""),
    ("group", "ephemeral_disk", "ephemeral_disk {\nsize = 200\n}", SUPPORTED, ""),
    ("group", "migrate", "migrate {\nmax_parallel = 1\n}", NOMAD_RULE,
     'Job type "batch" does not allow migrate block'),
    ("group", "network", 'network {\nport "http" {}\n}', SUPPORTED, ""),
    ("group", "meta", 'meta {\na = "b"\n}', SUPPORTED, ""),
    ("group", "service", 'service {\nname = "s"\nprovider = "nomad"\n}', SUPPORTED, ""),
    ("group", "shutdown_delay", 'shutdown_delay = "5s"', SUPPORTED, ""),
    ("group", "max_run_duration", 'max_run_duration = "1h"', SUPPORTED, ""),
    ("group", "stop_after_client_disconnect", 'stop_after_client_disconnect = "1m"',
     SUPPORTED, ""),
    ("group", "max_client_disconnect", 'max_client_disconnect = "1h"', SUPPORTED, ""),
    ("group", "scaling", "scaling {\nmax = 3\n}", SUPPORTED, ""),
    ("group", "prevent_reschedule_on_lost", "prevent_reschedule_on_lost = true", SUPPORTED, ""),
    ("group", "consul", 'consul {\nnamespace = "x"\n}', CONSUL_VAULT, "yurt has no Consul"),
    ("task", "user", 'user = "nobody"', SUPPORTED, ""),
    ("task", "lifecycle", 'lifecycle {\nhook = "prestart"\n}', NOMAD_RULE,
     "Task group g must have at least one main task"),  # the sample's only task
    ("task", "config", "config {\n}", SUPPORTED, ""),
    ("task", "constraint", 'constraint {\nattribute = "${attr.kernel.name}"\n'
                           'value = "linux"\n}', SUPPORTED, ""),
    ("task", "env", 'env {\nA = "b"\n}', SUPPORTED, ""),
    ("task", "service", 'service {\nname = "s"\nprovider = "nomad"\n}', SUPPORTED, ""),
    ("task", "restart", "restart {\nattempts = 1\n}", SUPPORTED, ""),
    ("task", "meta", 'meta {\na = "b"\n}', SUPPORTED, ""),
    ("task", "kill_timeout", 'kill_timeout = "5s"', SUPPORTED, ""),
    ("task", "logs", "logs {\nmax_files = 2\nenabled = true\n}", SUPPORTED, ""),
    ("task", "artifact", 'artifact {\nsource = "https://example.com/x"\n}', SUPPORTED, ""),
    ("task", "template", 'template {\ndata = "x"\ndestination = "local/x"\n}', SUPPORTED, ""),
    ("task", "volume_mount", 'volume_mount {\nvolume = "v"\ndestination = "/v"\n}',
     SUPPORTED, ""),
    ("task", "csi_plugin", 'csi_plugin {\nid = "p"\ntype = "node"\nmount_dir = "/csi"\n}',
     PLACEMENT, "missing CSI plugin"),
    ("task", "leader", "leader = true", SUPPORTED, ""),
    ("task", "shutdown_delay", 'shutdown_delay = "5s"', SUPPORTED, ""),
    ("task", "kill_signal", 'kill_signal = "SIGINT"', SUPPORTED, ""),
    ("task", "scaling", 'scaling "cpu" {\nmax = 4\n}', SUPPORTED, ""),
    ("task", "secret", 'secret "s" {\nprovider = "nomad"\npath = "x"\n}', PLACEMENT,
     "missing secrets provider"),
    ("task", "identity", "identity {\nenv = true\n}", SUPPORTED, ""),
    ("task", "action", 'action "a" {\ncommand = "/bin/true"\n}', SUPPORTED, ""),
    ("task", "schedule", 'schedule {\ncron {\nstart = "0 9 * * *"\n}\n}', NOMAD_RULE,
     "task schedules requires Nomad Enterprise"),
    ("task", "vault", 'vault {\nrole = "x"\n}', CONSUL_VAULT, "yurt has no Vault"),
    ("task", "consul", 'consul {\ncluster = "x"\n}', CONSUL_VAULT, "yurt has no Consul"),
    ("task", "kind", 'kind = "connect-proxy:s"', CONSUL_VAULT, "yurt has no Consul"),
    ("resources", "cpu", "cpu = 200", SUPPORTED, ""),
    ("resources", "cores", "cores = 1", SUPPORTED, ""),  # reserved at placement
    ("resources", "memory", "memory = 128", SUPPORTED, ""),
    ("resources", "memory_max", "memory_max = 512", SUPPORTED, ""),
    ("resources", "disk", "disk = 100", NOMAD_RULE,
     "Task can't ask for disk resources, they have to be specified at the task group level."),
    ("resources", "iops", "iops = 10", SUPPORTED, ""),  # deprecated, ignored by Nomad
    ("resources", "network", 'network {\nport "x" {}\n}', SUPPORTED, ""),  # moved to the group
    ("resources", "numa", 'numa {\naffinity = "require"\n}', NOMAD_RULE,
     "numa scheduling requires Nomad Enterprise"),
    ("resources", "secrets", "secrets = 10", SUPPORTED, ""),
]

#: Fields another part of the work adds; strict, so the entry fails once they parse.
_PENDING: Final[dict[tuple[str, str], str]] = {}


def _job(block: str, sample: str) -> str:
    parts = {"job": "", "group": "", "task": "", "resources": ""}
    parts[block] = sample
    if block == "task" and sample.startswith("volume_mount"):
        parts["group"] = 'volume "v" {\ntype = "host"\nsource = "v"\n}'
    return f'''job "j" {{
  type = "batch"
  {parts["job"]}
  group "g" {{
    {parts["group"]}
    task "t" {{
      driver = "mock_driver"
      {parts["task"]}
      resources {{
        {parts["resources"]}
      }}
    }}
  }}
}}
'''


def _params() -> list[object]:
    out: list[object] = []
    for block, name, sample, status, message in INVENTORY:
        marks = ([pytest.mark.xfail(reason=_PENDING[(block, name)], strict=True)]
                 if (block, name) in _PENDING else [])
        out.append(pytest.param(block, name, sample, status, message, marks=marks,
                                id=f"{block}.{name}"))
    return out


@pytest.mark.parametrize(("block", "name", "sample", "status", "message"), _params())
def test_nomads_field_is_never_unknown(block: str, name: str, sample: str, status: str,
                                       message: str) -> None:
    text = _job(block, sample)
    try:
        job = parse_job(text, filename="j.nomad.hcl")
    except JobSpecError as e:
        found = [p.message for p in e.problems]
        for m in found:
            assert "unknown field" not in m, found
            assert "does not support yet" not in m, found
        assert status in (NOMAD_RULE, CONSUL_VAULT), found
        assert any(message in m for m in found), found
        return
    assert status in (SUPPORTED, PLACEMENT), f"{block}.{name} parsed, expected: {message}"
    reason = unplaceable_reason(job.task_groups[0])
    assert reason == (message if status == PLACEMENT else None)


def test_the_inventory_covers_every_hcl_field_of_nomads_api() -> None:
    # The HCL names of api/jobs.go `Job`, api/tasks.go `TaskGroup` and `Task`, and
    # api/resources.go `Resources` (labels and the job's `type`, `group`, and the group's
    # `task` and the task's `driver`, `resources` aside: every job has them).
    nomad = {
        "job": {"id", "region", "namespace", "name", "priority", "all_at_once", "datacenters",
                "node_pool", "constraint", "affinity", "update", "multiregion", "spread",
                "periodic", "parameterized", "reschedule", "migrate", "meta", "ui",
                "consul_token", "vault_token"},
        "group": {"count", "constraint", "affinity", "spread", "volume", "restart",
                  "disconnect", "reschedule", "ephemeral_disk", "update", "migrate", "network",
                  "meta", "service", "shutdown_delay", "max_run_duration",
                  "stop_after_client_disconnect", "max_client_disconnect", "scaling", "consul",
                  "prevent_reschedule_on_lost"},
        "task": {"user", "lifecycle", "config", "constraint", "affinity", "env", "service",
                 "restart", "meta", "kill_timeout", "logs", "artifact", "vault", "consul",
                 "template", "dispatch_payload", "volume_mount", "csi_plugin", "leader",
                 "shutdown_delay", "kill_signal", "kind", "scaling", "secret", "identity",
                 "action", "schedule"},
        "resources": {"cpu", "cores", "memory", "memory_max", "disk", "network", "device",
                      "numa", "secrets", "iops"},
    }
    # `update`, `affinity` on a task, `dispatch_payload` and `device` have their own tests
    # (test_jobspec_update.py, test_jobspec_constraint.py, test_jobspec_periodic.py,
    # test_scheduler_device_constraints.py): their samples need more than one line of
    # context.
    elsewhere = {("job", "update"), ("group", "update"), ("task", "affinity"),
                 ("task", "dispatch_payload"), ("resources", "device")}
    listed = {(b, n) for b, n, *_ in INVENTORY}
    missing = {(b, n) for b, names in nomad.items() for n in names} - listed - elsewhere
    assert not missing


def test_the_json_spellings_parse_too() -> None:
    # `nomad job run -output` and the API speak JSON: each field above by its JSON name.
    job = {"ID": "j", "Type": "batch", "AllAtOnce": True, "NomadTokenID": "abc", "Stable": True,
           "VersionTag": {"Name": "v1", "Description": "first"},
           "Multiregion": {"Regions": [{"Name": "west"}]},
           "TaskGroups": [{
               "Name": "g", "ShutdownDelay": 5 * 10**9, "MaxRunDuration": 10**9,
               "StopAfterClientDisconnect": 10**9, "PreventRescheduleOnLost": True,
               "Volumes": {"v": {"Type": "host", "Source": "v", "PerAlloc": False}},
               "Scaling": {"Min": 1, "Max": 2, "Policy": {"a": 1}},
               "Disconnect": {"Replace": True, "Reconcile": "keep_original"},
               "Tasks": [{
                   "Name": "t", "Driver": "mock_driver",
                   "VolumeMounts": [{"Volume": "v", "Destination": "/v",
                                     "PropagationMode": "private", "SELinuxLabel": "z"}],
                   "Actions": [{"Name": "a", "Command": "/bin/true", "Args": ["x"]}],
                   "ScalingPolicies": [{"Type": "vertical_cpu", "Max": 4}],
                   "LogConfig": {"Enabled": True},
                   "Resources": {"CPU": 100, "MemoryMB": 128, "IOPS": 10, "SecretsMB": 10,
                                 "Networks": [{"DynamicPorts": [{"Label": "x"}],
                                               "CNI": {"Args": {"a": "b"}}}]}}]}]}
    parsed = parse_job(json.dumps({"Job": job}), filename="j.json")
    group = parsed.task_groups[0]
    task = group.tasks[0]
    assert parsed.all_at_once
    assert (group.shutdown_delay, group.max_run_duration) == (5 * 10**9, 10**9)
    assert group.disconnect is not None
    assert group.disconnect.reconcile == "keep_original"
    assert group.stop_after_client_disconnect == 10**9  # kept, and ignored as in Nomad 1.10
    assert group.volumes["v"].name == "v"
    assert group.scaling is not None
    assert (group.scaling.min, group.scaling.max, group.scaling.type) == (1, 2, "horizontal")
    assert task.volume_mounts[0].selinux_label == "z"
    assert task.actions[0].args == ["x"]
    assert task.scaling_policies[0].type == "vertical_cpu"
    assert [p.label for p in group.networks[0].dynamic_ports] == ["x"]
    assert group.networks[0].cni == {"Args": {"a": "b"}}


def test_an_id_in_the_job_block_wins_over_its_label() -> None:
    # jobspec2 `decode`: the label is the ID only when the body has none.
    job = parse_job(_job("job", 'id = "other"'), filename="j.nomad.hcl")
    assert job.id == "other"

"""Dynamic host volumes, the pure parts (layer 0): the spec's validation and the server's
canonical form (structs/hostvolume.py, Nomad's nomad/structs/host_volumes.go), placement of a
job asking for one (feasible.py `host_volume_reason`, Nomad's `HostVolumeChecker`), the spec
file (cli/volume_spec.py, Nomad's command/volume_create_host.go), the mkdir plugin's
parameters (client/hostvolumes.py) and the CLI's tables (cli/volume_group.py)."""

from __future__ import annotations

import itertools

import msgspec
import pytest

from tests.scheduler_support import SchedulerState
from tests.test_scheduler_multinode import job, node, on, run
from yurt.runtime.cli.volume_group import format_volume, format_volumes, ibytes
from yurt.runtime.cli.volume_spec import VolumeSpecError, parse_bytes, parse_volume_spec
from yurt.runtime.client.hostvolumes import MkdirParams, mkdir_params
from yurt.runtime.server.scheduler.feasible import FILTER_HOST_VOLUMES, host_volume_reason
from yurt.runtime.structs import ClientHostVolumeConfig, Node
from yurt.runtime.structs.constraint import Constraint
from yurt.runtime.structs.hostvolume import (
    HostVolume,
    HostVolumeCapability,
    HostVolumeNodeError,
    canonicalize_for_create,
    canonicalize_for_register,
    claimable,
    flatten,
    stub,
    update_errors,
    validate,
)

UUID = "2c1e4f0a-8b7d-4e6f-9a1b-3c5d7e9f1a2b"


# ---------------------------------------------------------------------- validation


def test_validate_reports_every_problem_in_nomads_words() -> None:
    vol = HostVolume(id="nope", requested_capacity_min_bytes=10, requested_capacity_max_bytes=5,
                     requested_capabilities=[HostVolumeCapability(attachment_mode="tape",
                                                                  access_mode="x")],
                     constraints=[Constraint(operator="distinct_hosts")])
    assert validate(vol) == [
        'invalid ID "nope"', "missing name",
        "capacity_max (5) must be larger than capacity_min (10)",
        'invalid attachment mode: "tape"',
        "invalid constraint distinct_hosts: host volumes of the same name are always on "
        "distinct hosts"]
    assert validate(HostVolume(name="ok", id=UUID)) == []
    assert flatten(["one"]) == "one"
    assert flatten(["a", "b"]) == "2 errors occurred:\n\t* a\n\t* b\n\n"


def test_update_may_not_move_a_volume_or_shrink_below_its_capacity() -> None:
    existing = HostVolume(name="v", node_id="n1", node_pool="default", capacity_bytes=100)
    assert update_errors(HostVolume(name="v", node_id="n2", node_pool="gpu",
                                    requested_capacity_max_bytes=50), existing) == [
        "node ID cannot be updated", "node pool cannot be updated",
        "capacity_max (50) cannot be less than existing provisioned capacity (100)"]
    claimed = msgspec.structs.replace(existing, allocations=[{"ID": "a1"}])
    assert update_errors(HostVolume(name="v"), claimed) == [
        "cannot update a volume in use: claimed by allocs (a1)"]


def test_canonical_forms_fill_what_the_server_owns() -> None:
    made = canonicalize_for_create(HostVolume(name="v", host_path="/x", capacity_bytes=9),
                                   None, now=7, new_id=lambda: UUID)
    assert (made.id, made.plugin_id, made.state, made.create_time, made.modify_time) == (
        UUID, "default", "pending", 7, 7)
    assert (made.host_path, made.capacity_bytes) == ("", 0)  # the plugin's to say
    assert made.requested_capabilities == [HostVolumeCapability(
        attachment_mode="file-system", access_mode="single-node-writer")]
    stored = msgspec.structs.replace(made, state="ready", host_path="/v", node_id="n1",
                                     capacity_bytes=5)
    again = canonicalize_for_create(HostVolume(name="v", id=UUID), stored, now=9,
                                    new_id=lambda: "unused")
    assert (again.host_path, again.node_id, again.create_time, again.state) == (
        "/v", "n1", 7, "pending")
    registered = canonicalize_for_register(HostVolume(name="r", host_path="/r"), None, now=3,
                                           new_id=lambda: UUID)
    assert (registered.id, registered.plugin_id, registered.host_path) == (UUID, "", "/r")
    assert set(msgspec.to_builtins(stub(made))) == {
        "Namespace", "ID", "Name", "PluginID", "NodePool", "NodeID", "CapacityBytes", "State",
        "CreateIndex", "CreateTime", "ModifyIndex", "ModifyTime"}


# ---------------------------------------------------------------------- placement


def _ready(name: str = "data", namespace: str = "default", state: str = "ready",
           access: str = "single-node-writer") -> HostVolume:
    return HostVolume(id=UUID, name=name, namespace=namespace, state=state,
                      requested_capabilities=[HostVolumeCapability(
                          attachment_mode="file-system", access_mode=access)])


@pytest.mark.parametrize(("vol", "read_only", "access", "ok"), [
    (_ready(), False, "", True),
    (_ready(), True, "", False),  # read-only asks single-node-reader-only by default
    (_ready(access="single-node-reader-only"), True, "", True),
    (_ready(access="single-node-reader-only"), False, "single-node-reader-only", False),
    (_ready(namespace="prod"), False, "", False),
    (_ready(state="pending"), False, "", False),
    (_ready(state="unavailable"), False, "", False),
    (_ready(access="single-node-multi-writer"), False, "single-node-multi-writer", True),
])
def test_claimable_as_nomads_checker(vol: HostVolume, read_only: bool, access: str,
                                     ok: bool) -> None:
    assert claimable(vol, "default", access, "", read_only) is ok


def _dynamic_node(node_id: str, vol_id: str = UUID) -> Node:
    return node(node_id, host_volumes={"data": ClientHostVolumeConfig(
        name="data", path=f"/v/{vol_id}", id=vol_id)})


def _group(sticky: bool = False) -> str:
    return f'volume "v" {{\n type = "host"\n source = "data"\n sticky = {str(sticky).lower()}\n}}'


def test_a_dynamic_volume_is_found_in_the_jobs_namespace_when_ready() -> None:
    vols = {UUID: _ready()}
    group = job(group_block=_group()).task_groups[0]
    n = _dynamic_node("n1")
    assert host_volume_reason(group, n, lookup=vols.get) is None
    assert host_volume_reason(group, n, namespace="prod", lookup=vols.get) == FILTER_HOST_VOLUMES
    assert host_volume_reason(group, n) == FILTER_HOST_VOLUMES
    sticky = job(group_block=_group(sticky=True)).task_groups[0]
    assert host_volume_reason(sticky, n, lookup=vols.get) is None
    static = node("s", host_volumes={"data": ClientHostVolumeConfig(name="data", path="/s")})
    assert host_volume_reason(sticky, static) == FILTER_HOST_VOLUMES  # sticky: dynamic only


def test_the_scheduler_places_where_the_dynamic_volume_is_ready() -> None:
    other = "9d8e7f6a-5b4c-4d3e-8f2a-1b0c9d8e7f6a"
    state = SchedulerState(_dynamic_node("pending", other), _dynamic_node("ready"), node("bare"))
    state.volumes = {UUID: _ready(), other: _ready(state="pending")}
    plan = run(state, job(count=2, group_block=_group()))
    assert on(plan) == ["ready", "ready"]
    state.volumes[UUID] = _ready(namespace="other")
    plan = run(state, job("api", group_block=_group()))
    assert not plan.place
    assert plan.failed["g"] == f'Constraint "{FILTER_HOST_VOLUMES}" filtered 3 nodes'


# ---------------------------------------------------------------------- the spec file

SPEC = '''type      = "host"
name      = "data"
plugin_id = "mkdir"
node_pool = "default"
capacity_min = "1GiB"
capacity_max = "2G"

constraint {
  attribute = "${attr.kernel.name}"
  value     = "linux"
}

constraint {
  distinct_property = "${meta.rack}"
}

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}

parameters {
  mode = "0755"
  uid  = 1000
}
'''


def test_a_spec_reads_as_nomads_decodeHostVolume() -> None:
    kind, vol = parse_volume_spec(SPEC, "vol.hcl")
    assert kind == "host"
    assert vol == {
        "Name": "data", "PluginID": "mkdir", "NodePool": "default",
        "RequestedCapacityMinBytes": 1 << 30, "RequestedCapacityMaxBytes": 2_000_000_000,
        "Constraints": [{"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="},
                        {"LTarget": "${meta.rack}", "RTarget": "",
                         "Operand": "distinct_property"}],
        "RequestedCapabilities": [{"AccessMode": "single-node-writer",
                                   "AttachmentMode": "file-system"}],
        "Parameters": {"mode": "0755", "uid": "1000"}}
    same = parse_volume_spec('{"type": "host", "name": "data", "parameters": {"mode": "0755"},'
                             ' "capability": [{"access_mode": "single-node-writer"}]}', "v.json")
    assert same[1]["Parameters"] == {"mode": "0755"}
    assert same[1]["RequestedCapabilities"] == [{"AccessMode": "single-node-writer",
                                                 "AttachmentMode": ""}]


@pytest.mark.parametrize(("text", "words"), [
    ('type = "host"\nname = \n', "vol.hcl:2:"),
    ('type = "host"\nname = "d"\nplugin-id = "mkdir"\n', 'vol.hcl:3: unknown key "plugin-id"'),
    ('type = "host"\n\ncapacity_min = "lots"\n', "vol.hcl:3: invalid capacity_min:"),
    ('type = "host"\nconstraint {\n  attr = "x"\n}\n',
     'vol.hcl:2: invalid constraint: invalid key "attr"'),
    ('{"type": "host",\n "name": }', "vol.hcl:2:"),
])
def test_a_bad_spec_is_refused_with_its_file_and_line(text: str, words: str) -> None:
    with pytest.raises(VolumeSpecError) as refused:
        parse_volume_spec(text, "vol.hcl")
    assert words in str(refused.value)


def test_sizes_as_go_humanize() -> None:
    assert [parse_bytes(v) for v in (10, "10", "1KiB", "1kb", "1.5 MiB", "3TB")] == [
        10, 10, 1024, 1000, 3 << 19, 3 * 10**12]
    with pytest.raises(ValueError, match="invalid syntax"):
        parse_bytes("12 parsecs")
    assert [ibytes(n) for n in (0, 9, 1024, 10 << 30, 1536)] == [
        "0 B", "9 B", "1.0 KiB", "10 GiB", "1.5 KiB"]


# ---------------------------------------------------------------------- mkdir, and the CLI


def test_mkdir_parameters_as_nomads_plugin() -> None:
    assert mkdir_params({}) == MkdirParams(mode=0o700, uid=-1, gid=-1)
    assert mkdir_params({"mode": "0755", "uid": "1000", "gid": "0"}) == MkdirParams(
        mode=0o755, uid=1000, gid=0)
    with pytest.raises(HostVolumeNodeError, match='unknown mkdir parameter: "color"'):
        mkdir_params({"color": "red"})
    with pytest.raises(HostVolumeNodeError, match='invalid value for "mode"'):
        mkdir_params({"mode": "rwx"})


def test_the_cli_tables_as_nomads() -> None:
    ids = itertools.count()
    vols = [{"ID": f"{n}{next(ids)}aaaaaaa-bbbb", "Name": "data", "Namespace": "default",
             "PluginID": "mkdir", "NodeID": "node-1234567890", "NodePool": "default",
             "State": "ready"} for n in "ba"]
    assert format_volumes(vols, 8).splitlines() == [
        "ID        Name  Namespace  Plugin ID  Node ID   Node Pool  State",
        "a1aaaaaa  data  default    mkdir      node-123  default    ready",
        "b0aaaaaa  data  default    mkdir      node-123  default    ready"]
    full = {**vols[0], "CapacityBytes": 0, "HostPath": "/srv/v",
            "RequestedCapabilities": [{"AccessMode": "single-node-writer",
                                       "AttachmentMode": "file-system"}], "Allocations": []}
    text = format_volume(full, short=False, verbose=False, length=8)
    assert text.splitlines()[:9] == [
        "ID        = b0aaaaaaa-bbbb", "Name      = data", "Namespace = default",
        "Plugin ID = mkdir", "Node ID   = node-1234567890", "Node Pool = default",
        "Capacity  = 0 B", "State     = ready", "Host Path = /srv/v"]
    assert text.splitlines()[9:] == [
        "", "Capabilities", "Access Mode         Attachment Mode",
        "single-node-writer  file-system", "", "Allocations", "No allocations placed"]
    assert format_volume(full, short=True, verbose=False, length=8).count("\n") == 8


def test_a_volume_is_claimed_by_live_allocs_of_its_namespace_and_node() -> None:
    from yurt.runtime.api.hostvolumes import claims
    from yurt.runtime.structs import Allocation

    asks = job(group_block=_group())

    def alloc(alloc_id: str, namespace: str = "default", node_id: str = "n1",
              status: str = "running") -> Allocation:
        return Allocation(id=alloc_id, name="j.g[0]", namespace=namespace, node_id=node_id,
                          job=asks, task_group=asks.task_groups[0].name, client_status=status)

    vol = msgspec.structs.replace(_ready(), node_id="n1")
    allocs = [alloc("mine"), alloc("prod", namespace="prod"), alloc("elsewhere", node_id="n2"),
              alloc("done", status="complete")]
    assert [a.id for a in claims(vol, allocs)] == ["mine"]
    prod = msgspec.structs.replace(vol, namespace="prod")
    assert [a.id for a in claims(prod, allocs)] == ["prod"]

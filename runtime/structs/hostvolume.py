"""Nomad 1.10's dynamic host volumes as data: the `HostVolume` a server stores, its list stub,
and the pure rules every entry point applies before anything is created (Nomad's
nomad/structs/host_volumes.go).

Invariants: field and JSON names are Nomad's (`HostVolume`, `HostVolumeStub`,
`HostVolumeCapability`); a volume's `State` is one of pending, ready, unavailable and is
never "" once stored; `validate` returns every problem at once, in Nomad's words, and looks
at nothing but the volume (the state checks, "no such namespace", "node … does not exist",
are the server's: runtime/server/hostvolumes.py). `canonicalize_for_create` /
`canonicalize_for_register` fill what the server owns (ID, plugin, times, the default
capability) as Nomad's `CanonicalizeForCreate` / `CanonicalizeForRegister` do; the clock and
the ID source are parameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

import msgspec
from msgspec import field

from yurt.runtime.structs.base import Base
from yurt.runtime.structs.constraint import Constraint

STATE_PENDING: Final = "pending"
STATE_READY: Final = "ready"
STATE_UNAVAILABLE: Final = "unavailable"

#: nomad/structs/host_volumes.go `DefaultHostVolumePlugin`: a create without `plugin_id`.
DEFAULT_PLUGIN: Final = "default"
#: client/hostvolumemanager/host_volume_plugin.go `HostVolumePluginMkdirID`.
MKDIR_PLUGIN: Final = "mkdir"

ATTACHMENT_MODES: Final = ("block-device", "file-system")
ACCESS_MODES: Final = ("single-node-reader-only", "single-node-writer",
                       "single-node-single-writer", "single-node-multi-writer")

_UUID: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class HostVolumeNodeError(Exception):
    """A node's refusal or plugin failure, in Nomad's words (runtime/client/hostvolumes.py
    raises it). `status` is what the API answers: 400 for what the request is to blame for
    (a bad parameter, an unknown plugin, a path not there), 409 for a name taken on the
    node, 500 for a plugin or the node failing."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


class HostVolumeCapability(Base):
    """`capability { access_mode, attachment_mode }`: how jobs may claim the volume."""

    attachment_mode: str = ""
    access_mode: str = ""


def default_capability() -> HostVolumeCapability:
    """What a volume declaring none offers (`CanonicalizeForCreate`)."""
    return HostVolumeCapability(attachment_mode="file-system", access_mode="single-node-writer")


class HostVolume(Base):
    """Nomad's `structs.HostVolume`."""

    namespace: str = ""
    id: str = field(default="", name="ID")
    name: str = ""
    plugin_id: str = field(default="", name="PluginID")
    node_pool: str = ""
    node_id: str = field(default="", name="NodeID")
    constraints: list[Constraint] = field(default_factory=list)
    requested_capacity_min_bytes: int = 0
    requested_capacity_max_bytes: int = 0
    capacity_bytes: int = 0
    requested_capabilities: list[HostVolumeCapability] = field(default_factory=list)
    parameters: dict[str, str] = field(default_factory=dict)
    host_path: str = ""
    state: str = ""
    create_index: int = 0
    create_time: int = 0
    modify_index: int = 0
    modify_time: int = 0
    #: Denormalised on read, never stored (Nomad: "never written to Raft").
    allocations: list[dict[str, object]] | None = None


class HostVolumeStub(Base):
    """Nomad's `structs.HostVolumeStub`: one row of `GET /v1/volumes?type=host`."""

    namespace: str = ""
    id: str = field(default="", name="ID")
    name: str = ""
    plugin_id: str = field(default="", name="PluginID")
    node_pool: str = ""
    node_id: str = field(default="", name="NodeID")
    capacity_bytes: int = 0
    state: str = ""
    create_index: int = 0
    create_time: int = 0
    modify_index: int = 0
    modify_time: int = 0


def stub(vol: HostVolume) -> HostVolumeStub:
    """`HostVolume.Stub`."""
    return HostVolumeStub(
        namespace=vol.namespace, id=vol.id, name=vol.name, plugin_id=vol.plugin_id,
        node_pool=vol.node_pool, node_id=vol.node_id, capacity_bytes=vol.capacity_bytes,
        state=vol.state, create_index=vol.create_index, create_time=vol.create_time,
        modify_index=vol.modify_index, modify_time=vol.modify_time)


def capability_error(cap: HostVolumeCapability) -> str | None:
    """`HostVolumeCapability.Validate`."""
    if cap.attachment_mode not in ATTACHMENT_MODES:
        return f'invalid attachment mode: "{cap.attachment_mode}"'
    if cap.access_mode not in ACCESS_MODES:
        return f'invalid access mode: "{cap.access_mode}"'
    return None


def validate(vol: HostVolume) -> list[str]:
    """`HostVolume.Validate`: every problem of the spec alone, in Nomad's words (empty: valid).
    The server joins them as Nomad's `FlattenMultierror` does ("volume validation failed:
    …")."""
    errors: list[str] = []
    if vol.id and not _UUID.match(vol.id):
        errors.append(f'invalid ID "{vol.id}"')
    if not vol.name:
        errors.append("missing name")
    if vol.requested_capacity_max_bytes < vol.requested_capacity_min_bytes:
        errors.append(f"capacity_max ({vol.requested_capacity_max_bytes}) must be larger "
                      f"than capacity_min ({vol.requested_capacity_min_bytes})")
    for cap in vol.requested_capabilities:
        why = capability_error(cap)
        if why is not None:
            errors.append(why)
    for constraint in vol.constraints:
        if constraint.operator in ("distinct_hosts", "distinct_property"):
            errors.append(f"invalid constraint {constraint.operator}: host volumes of the "
                          "same name are always on distinct hosts")
    return errors


def update_errors(vol: HostVolume, existing: HostVolume) -> list[str]:
    """`HostVolume.ValidateUpdate`: what an update of `existing` may not change."""
    errors: list[str] = []
    if existing.allocations:
        ids = ", ".join(str(a.get("ID", "")) for a in existing.allocations)
        errors.append(f"cannot update a volume in use: claimed by allocs ({ids})")
    if vol.node_id and vol.node_id != existing.node_id:
        errors.append("node ID cannot be updated")
    if vol.node_pool and vol.node_pool != existing.node_pool:
        errors.append("node pool cannot be updated")
    if 0 < vol.requested_capacity_max_bytes < existing.capacity_bytes:
        errors.append(f"capacity_max ({vol.requested_capacity_max_bytes}) cannot be less "
                      f"than existing provisioned capacity ({existing.capacity_bytes})")
    return errors


def flatten(errors: list[str]) -> str:
    """helper/funcs.go `FlattenMultierror`: one error as itself, more as Nomad's multierror
    lists them."""
    if len(errors) == 1:
        return errors[0]
    lines = "\n\t".join(f"* {e}" for e in errors)
    return f"{len(errors)} errors occurred:\n\t{lines}\n\n"


def canonicalize_for_create(vol: HostVolume, existing: HostVolume | None, now: int,
                            new_id: Callable[[], str]) -> HostVolume:
    """`HostVolume.CanonicalizeForCreate`: `vol` as the server will hand it to the node."""
    if existing is None:
        vol = msgspec.structs.replace(
            vol, id=new_id(), plugin_id=vol.plugin_id or DEFAULT_PLUGIN, capacity_bytes=0,
            host_path="", create_time=now,
            requested_capabilities=vol.requested_capabilities or [default_capability()])
    else:
        vol = msgspec.structs.replace(
            vol, plugin_id=vol.plugin_id or existing.plugin_id,
            node_pool=vol.node_pool or existing.node_pool, node_id=existing.node_id,
            constraints=existing.constraints, capacity_bytes=existing.capacity_bytes,
            host_path=existing.host_path, create_time=existing.create_time)
    return msgspec.structs.replace(vol, state=STATE_PENDING, modify_time=now, allocations=None)


def canonicalize_for_register(vol: HostVolume, existing: HostVolume | None, now: int,
                              new_id: Callable[[], str]) -> HostVolume:
    """`HostVolume.CanonicalizeForRegister`: a volume whose directory exists already."""
    if existing is None:
        vol = msgspec.structs.replace(
            vol, id=vol.id or new_id(), create_time=now,
            requested_capabilities=vol.requested_capabilities or [default_capability()])
    else:
        vol = msgspec.structs.replace(
            vol, plugin_id=vol.plugin_id or existing.plugin_id,
            node_pool=vol.node_pool or existing.node_pool, node_id=existing.node_id,
            constraints=existing.constraints, create_time=existing.create_time)
    return msgspec.structs.replace(vol, state=STATE_PENDING, modify_time=now, allocations=None)


def claimable(vol: HostVolume, namespace: str, access_mode: str, attachment_mode: str,
              read_only: bool) -> bool:
    """scheduler/feasible/feasible.go `HostVolumeChecker.nodeIsFeasibleForRequest` for a
    dynamic volume (`hostVolumeIsAvailable`): of the job's namespace, ready, offering the
    requested capability (by default single-node-writer, or single-node-reader-only when
    read-only; file-system), a reader mode asked read-only and a writer mode not.
    single-node-single-writer is taken as single-node-multi-writer: the other writers on the
    node are not counted (yurt keeps no volume claims)."""
    if vol.namespace != namespace or vol.state != STATE_READY:
        return False
    access = access_mode or ("single-node-reader-only" if read_only else "single-node-writer")
    attachment = attachment_mode or "file-system"
    if not any(c.access_mode == access and c.attachment_mode == attachment
               for c in vol.requested_capabilities):
        return False
    if access == "single-node-reader-only":
        return read_only
    if access == "single-node-writer":
        return not read_only
    return True

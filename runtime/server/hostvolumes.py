"""`HostVolumeBook`: the server's dynamic host volumes (Nomad's nomad/host_volume_endpoint.go
`Create`, `Register`, `Delete`, `Get`, `List`, and the state it writes,
nomad/state/state_store_host_volumes.go).

What state lives here: every volume, by ID, in memory and in
`<data-dir>/server/host-volumes.json` (written atomically before a change is answered, as
node-state.json is: server/nodestate.py `write_atomically`; a failed write is logged and the
next change writes the whole book; an unreadable file is kept aside and the agent starts
without it). Rejected: a table in objects.db, whose etcd twin (state/objects_etcd.py) would
have to hold volumes a cluster cannot create (below). The book is the embedded server's
only: a cluster (`yurt server`, state in etcd) has no way to call a node's plugin (yurt's node
RPC, structs/noderpc.py, only flows from clients to servers), so the API answers 501 there.

Invariants:
- A change is one server index (`LocalServer.change`): the volume's ModifyIndex (and
  CreateIndex when new), persisted, then published as a `HostVolume` event.
- The node acts before the state is written (Nomad: "creating the volume on the client via
  the plugin can't be made atomic with the registration"): a plugin failure writes nothing.
  Operations on one volume run one at a time (Nomad's `serializeCall`); here, all of them do,
  under one lock: they are rare.
- The node's records and the book are two files written one after the other (the node's
  first, server/hostvolumes.py `create`): an agent that dies between them restarts with a
  volume the node holds and the book lacks, whose name would block creates and whose
  DELETE would answer 404. `reconcile` adopts it (its namespace, name, plugin, parameters,
  path and capacity from the node's record; the default capability) rather than deleting
  it: its directory may hold data, and Nomad's client likewise offers what it restored
  (client/hostvolumemanager/host_volumes.go `restoreFromState`) for the server to find.
  The operator then sees it and can delete it as any other.
- A stored volume is `ready` when the node offers its name, else `pending` (just made) or
  `unavailable` (it was ready and the node lost it): `UpsertHostVolume` and
  `upsertHostVolumeForNode`, applied again by `reconcile` after the node changes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, TypeVar, final

import msgspec
import trio

from yurt.runtime.eventstream import Event
from yurt.runtime.server.nodestate import write_atomically
from yurt.runtime.server.scheduler.feasible import meets
from yurt.runtime.structs.constraint import Constraint
from yurt.runtime.structs.hostvolume import (
    STATE_PENDING,
    STATE_READY,
    STATE_UNAVAILABLE,
    HostVolume,
    HostVolumeNodeError,
    canonicalize_for_create,
    canonicalize_for_register,
    flatten,
    update_errors,
    validate,
)

if TYPE_CHECKING:
    from yurt.runtime.server.local import LocalServer

log = logging.getLogger("yurt.server.hostvolumes")

FILE_NAME: Final = "host-volumes.json"
T = TypeVar("T")


class NodeVolumes(Protocol):
    """The node's plugin side (runtime/client/hostvolumes.py `HostVolumeManager`); its
    refusals are `HostVolumeNodeError`s."""

    async def create(self, vol: HostVolume) -> tuple[str, int]: ...
    async def register(self, vol: HostVolume) -> None: ...
    async def delete(self, vol: HostVolume) -> None: ...
    def held(self) -> list[HostVolume]: ...


class VolumeRefused(Exception):
    """A request Nomad refuses, in its words. Nomad's HTTP layer answers every RPC error 500;
    yurt answers what the request is to blame for 400 (invalid, unknown namespace, node or
    pool), an unknown volume 404, what the state refuses 409 (no node can take it, a volume
    in use, a name taken on the node), keeping 500 for a node or plugin failing: a 5xx from
    yurt's API is never the caller's fault (runtime/api/__init__.py)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Stored(msgspec.Struct):
    volumes: list[HostVolume] = msgspec.field(default_factory=list)


@final
class HostVolumeBook:
    """See the module header. `namespace_exists` and `pool_exists` ask the object store."""

    def __init__(self, server: LocalServer, directory: Path | None, node: NodeVolumes, *,
                 namespace_exists: Callable[[str], Awaitable[bool]],
                 pool_exists: Callable[[str], Awaitable[bool]],
                 unix_clock: Callable[[], int] = time.time_ns,
                 new_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self._server = server
        self._path = directory / FILE_NAME if directory is not None else None
        self._node = node
        self._namespace_exists = namespace_exists
        self._pool_exists = pool_exists
        self._clock = unix_clock
        self._new_id = new_id
        self._lock = trio.Lock()
        self.volumes: dict[str, HostVolume] = {}

    async def load(self) -> None:
        """Take back an earlier agent's volumes, their states reconciled with the node."""
        if self._path is None:
            return
        path = self._path

        def read() -> _Stored:
            try:
                return msgspec.json.decode(path.read_bytes(), type=_Stored)
            except FileNotFoundError:
                return _Stored()
            except (msgspec.DecodeError, OSError) as e:
                # Unreadable: kept aside for the operator, and the agent starts without it
                # (the node's volumes are then unknown to placement, never mounted wrongly).
                aside = path.with_name(f"{path.name}.unreadable-{time.time_ns()}")
                log.error("host volumes %s unreadable (%s): kept as %s", path, e, aside)
                with contextlib.suppress(OSError):
                    os.replace(path, aside)
                return _Stored()

        stored = await trio.to_thread.run_sync(read)
        self.volumes = {v.id: v for v in stored.volumes}
        for vol in stored.volumes:
            self._server.observe_index(vol.modify_index)
        await self.reconcile()

    async def _save(self) -> None:
        """Every volume, written before the change is answered. A write that fails (a full
        disk) is logged and the change holds in memory: the next change writes the whole
        book again (as server/nodestate.py does)."""
        if self._path is None:
            return
        data = msgspec.json.encode(_Stored(sorted(self.volumes.values(), key=lambda v: v.id)))
        try:
            await trio.to_thread.run_sync(write_atomically, self._path, data)
        except OSError as e:
            log.warning("host volumes %s not written: %s", self._path, e)

    def _state_on_node(self, vol: HostVolume) -> str:
        offered = self._server.node.host_volumes.get(vol.name)
        if offered is not None and offered.id == vol.id and vol.node_id == self._server.node.id:
            return STATE_READY
        return STATE_UNAVAILABLE if vol.state == STATE_READY else vol.state or STATE_PENDING

    async def reconcile(self) -> None:
        """`upsertHostVolumeForNode`: every volume's state from what the node offers now;
        a change is numbered and written. A volume the node holds and the book lacks is
        adopted (see the module header)."""
        async with self._lock:
            adopted = [self._adoptable(v) for v in self._node.held() if v.id not in self.volumes]
            changed = [v for v in self.volumes.values() if self._state_on_node(v) != v.state]
            if not changed and not adopted:
                return
            async with self._server.change() as index:
                for vol in adopted:
                    log.warning("host volume %s (%s) held by the node but not in the book: "
                                "adopted", vol.name, vol.id)
                    self.volumes[vol.id] = msgspec.structs.replace(
                        vol, state=self._state_on_node(vol), create_index=index,
                        modify_index=index)
                for vol in changed:
                    self.volumes[vol.id] = msgspec.structs.replace(
                        vol, state=self._state_on_node(vol), modify_index=index)
                await self._save()
                self._publish("HostVolumeRegistered",
                              [self.volumes[v.id] for v in (*adopted, *changed)])

    def _adoptable(self, held: HostVolume) -> HostVolume:
        """A volume the node holds, as the book keeps it: this node's, its capabilities the
        default (the node's record does not keep the requested ones)."""
        node = self._server.node
        vol = canonicalize_for_register(held, None, self._clock(), self._new_id)
        return msgspec.structs.replace(vol, node_id=node.id, node_pool=node.node_pool)

    def _publish(self, kind: str, vols: list[HostVolume]) -> None:
        self._server.publish([Event(topic="HostVolume", type=kind, key=v.id,
                                    namespace=v.namespace, payload={"HostVolume": v})
                              for v in vols])

    # ------------------------------------------------------------------ reads

    def get(self, namespace: str, vol_id: str) -> HostVolume | None:
        """`HostVolumeByID`: the volume of that ID in `namespace` (exactly: "*" finds
        none, as Nomad's index by namespace and ID)."""
        vol = self.volumes.get(vol_id)
        return vol if vol is not None and vol.namespace == namespace else None

    def matching(self, namespace: str, prefix: str = "", node_id: str = "",
             node_pool: str = "") -> list[HostVolume]:
        """`List`: by namespace ("*": all), name or ID prefix, node and pool; in ID order
        within each namespace, as Nomad's index returns them."""
        return sorted((v for v in self.volumes.values()
                       if namespace in ("*", v.namespace)
                       and (v.name.startswith(prefix) or v.id.startswith(prefix))
                       and node_id in ("", v.node_id) and node_pool in ("", v.node_pool)),
                      key=lambda v: (v.namespace, v.id))

    # ------------------------------------------------------------------ writes

    async def _existing(self, vol: HostVolume) -> HostVolume | None:
        """`validateVolumeUpdate`."""
        errors = validate(vol)
        if errors:
            raise VolumeRefused(f"volume validation failed: {flatten(errors)}")
        if not await self._namespace_exists(vol.namespace):
            raise VolumeRefused(
                f'volume validation failed: no such namespace "{vol.namespace}"')
        if not vol.id:
            return None
        existing = self.get(vol.namespace, vol.id)
        if existing is None:
            raise VolumeRefused(f'cannot update volume "{vol.id}": volume does not exist')
        errors = update_errors(vol, existing)
        if errors:
            raise VolumeRefused(f'validating volume "{vol.id}" update failed: '
                                f"{flatten(errors)}")
        return existing

    async def _check_state(self, vol: HostVolume, what: str) -> None:
        """`validateVolumeForState`, its error as the caller wraps it."""
        node = self._server.node
        why = None
        if vol.node_id and vol.node_id != node.id:
            why = f'node "{vol.node_id}" does not exist'
        elif vol.node_pool and not await self._pool_exists(vol.node_pool):
            why = f'node pool "{vol.node_pool}" does not exist'
        elif vol.node_id and vol.node_pool and vol.node_pool != node.node_pool:
            why = f'node ID "{vol.node_id}" is not in pool "{vol.node_pool}"'
        if why is not None:
            raise VolumeRefused(f'validating volume "{what}" against state failed: {why}')

    def _place(self, vol: HostVolume) -> HostVolume:
        """`placeHostVolume` over this server's one node: the plugin must be fingerprinted
        there (`${attr.plugins.host_volume.<plugin>.version} is_set`) and the constraints
        hold; a node already offering the name is skipped."""
        node = self._server.node
        constraints = [Constraint(attribute=f"${{attr.plugins.host_volume.{vol.plugin_id}"
                                            ".version}", operator="is_set"),
                       *vol.constraints]
        feasible = all(meets(c, node) for c in constraints)
        if vol.node_id:
            if not feasible:
                raise VolumeRefused(f'could not place volume "{vol.name}": node '
                                    f"{vol.node_id} is not feasible for volume", 409)
            return msgspec.structs.replace(vol, node_pool=node.node_pool)
        existing = vol.name in node.host_volumes
        in_pool = not vol.node_pool or vol.node_pool == node.node_pool
        if in_pool and not existing and feasible:
            return msgspec.structs.replace(vol, node_id=node.id, node_pool=node.node_pool)
        counts = (int(in_pool and existing), int(in_pool and not existing and not feasible))
        raise VolumeRefused(
            f'could not place volume "{vol.name}": no node meets constraints: {counts[0]} '
            "nodes had existing volume, 0 nodes filtered by node pool governance, "
            f"{counts[1]} nodes were infeasible", 409)

    async def _store(self, vol: HostVolume, existing: HostVolume | None) -> HostVolume:
        """`UpsertHostVolume` at the next index: ready when the node offers the volume."""
        async with self._server.change(capacity=True) as index:
            state = STATE_READY if self._state_on_node(vol) == STATE_READY else vol.state
            vol = msgspec.structs.replace(
                vol, state=state, node_pool=self._server.node.node_pool,
                create_index=existing.create_index if existing is not None else index,
                create_time=existing.create_time if existing is not None else vol.create_time,
                modify_index=index, allocations=None)
            self.volumes[vol.id] = vol
            await self._save()
            self._publish("HostVolumeRegistered", [vol])
        return vol

    async def create(self, vol: HostVolume) -> HostVolume:
        """`HostVolume.Create`: validate, place, run the node's plugin, store.

        Raises:
            VolumeRefused: in Nomad's words (the node's plugin errors as they come).
        """
        async with self._lock:
            existing = await self._existing(vol)
            vol = canonicalize_for_create(vol, existing, self._clock(), self._new_id)
            await self._check_state(vol, vol.name)
            vol = self._place(vol)
            host_path, capacity = await self._node_call(self._node.create(vol))
            vol = msgspec.structs.replace(vol, host_path=host_path, capacity_bytes=capacity)
            return await self._store(vol, existing)

    async def register(self, vol: HostVolume) -> HostVolume:
        """`HostVolume.Register`: a volume whose directory is on the node already."""
        async with self._lock:
            if not vol.node_id:
                raise VolumeRefused("cannot register volume: node ID is required")
            if not vol.host_path:
                raise VolumeRefused("cannot register volume: host path is required")
            existing = await self._existing(vol)
            vol = canonicalize_for_register(vol, existing, self._clock(), self._new_id)
            await self._check_state(vol, vol.id)
            await self._node_call(self._node.register(vol))
            return await self._store(vol, existing)

    async def delete(self, namespace: str, vol_id: str,
                     claimed: Callable[[HostVolume], list[str]], *, force: bool = False) -> int:
        """`HostVolume.Delete`: `claimed(vol)`, asked under the lock (no placement slips in
        between the check and the delete), gives the IDs of live allocations that mount it.

        A volume of another node (a book restored from another agent's snapshot) has no
        plugin here to run: as Nomad's `Delete` for an unknown node, it is refused unless
        `force`, which drops it from the book without touching any node.

        Returns:
            The index of the delete.
        """
        async with self._lock:
            if not vol_id:
                raise VolumeRefused("missing volume ID to delete")
            vol = self.get(namespace, vol_id)
            if vol is None:
                raise VolumeRefused(f"no such volume: {vol_id}", 404)
            in_use = claimed(vol)
            if in_use:
                raise VolumeRefused(f"volume {vol_id} in use by allocations: "
                                    f"[{' '.join(in_use)}]", 409)
            if vol.node_id == self._server.node.id:
                await self._node_call(self._node.delete(vol))
            elif not force:
                raise VolumeRefused(
                    "volume cannot be removed from unknown node without force=true", 409)
            async with self._server.change(capacity=True) as index:
                del self.volumes[vol.id]
                await self._save()
                self._publish("HostVolumeDeleted", [vol])
            return index

    async def _node_call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except HostVolumeNodeError as e:  # the node's plugin, in its words (as Nomad's)
            raise VolumeRefused(str(e), e.status) from e

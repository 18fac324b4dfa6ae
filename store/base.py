"""The typed layer shared by every store: structs to bytes and back, over a tiny key space.

A store implements five primitives on keys and JSON bytes (`_put`, `_get`, `_scan_allocations`,
`_delete_allocation`, `_delete_task`) and `get_all_state`, the one read a restart makes; this
class turns the rest of the `StateDB` protocol into them, so the encoding, the key layout and
the per-row decode-error handling exist once. `get_all_state` reads the rows `RESTORE_*_KINDS`
name from one consistent snapshot and decodes them with `snapshot_from_rows`, a plain function
so that a store may run it where it reads (the SQLite store decodes in its worker thread, next
to the read, rather than on the event loop).

Key layout (mirrors Nomad's buckets in `client/state/db_bolt.go`):
    ("alloc", alloc_id, kind)        kind: alloc | deploy_status | network_status |
                                           acknowledged_state
    ("task",  alloc_id, task, kind)  kind: local_state | task_state
    ("node",  kind)                  kind: driver_plugin_state | device_plugin_state |
                                           node_meta | node_registration
Values are Nomad-shaped JSON (msgspec), so an operator can read the SQLite file with `sqlite3`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import TypeVar

import msgspec

from yurt.runtime.structs import (
    AcknowledgedState,
    Allocation,
    AllocDeploymentStatus,
    AllocNetworkStatus,
    LocalState,
    NodeRegistration,
    PluginState,
    TaskState,
)
from yurt.store.protocol import SavedTask, StateSnapshot

#: ("alloc", alloc_id, kind) | ("task", alloc_id, task, kind) | ("node", kind)
Key = tuple[str, ...]

T = TypeVar("T")

_encoder = msgspec.json.Encoder()


def alloc_key(alloc_id: str, kind: str) -> Key:
    return ("alloc", alloc_id, kind)


def task_key(alloc_id: str, task: str, kind: str) -> Key:
    return ("task", alloc_id, task, kind)


def node_key(kind: str) -> Key:
    return ("node", kind)


def encode(value: object) -> bytes:
    return _encoder.encode(value)


def decode(data: bytes | None, type_: type[T]) -> T | None:
    return None if data is None else msgspec.json.decode(data, type=type_)


#: The kinds of row a restart reads (see `snapshot_from_rows`).
RESTORE_ALLOC_KINDS = ("alloc", "acknowledged_state")
RESTORE_TASK_KINDS = ("local_state", "task_state")


def snapshot_from_rows(rows: list[tuple[Key, bytes]]) -> StateSnapshot:
    """Decode the rows a restart read, row by row: a corrupt row is reported (on its
    allocation, or on its task) and never hides the others."""
    snapshot = StateSnapshot()
    for key, data in rows:
        try:
            if key[0] == "alloc" and key[2] == "alloc":
                snapshot.allocations.append(msgspec.json.decode(data, type=Allocation))
            elif key[0] == "alloc" and key[2] == "acknowledged_state":
                snapshot.acknowledged[key[1]] = msgspec.json.decode(
                    data, type=AcknowledgedState)
            elif key[0] == "task":
                tasks = snapshot.tasks.setdefault(key[1], {})
                saved = tasks.get(key[2], SavedTask())
                if key[3] == "local_state":
                    saved = replace(saved, local=msgspec.json.decode(data, type=LocalState))
                elif key[3] == "task_state":
                    saved = replace(saved, state=msgspec.json.decode(data, type=TaskState))
                tasks[key[2]] = saved
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            if key[0] == "alloc" and key[2] == "alloc":
                snapshot.errors[key[1]] = f"failed to decode allocation: {e}"
            elif key[0] == "task":
                tasks = snapshot.tasks.setdefault(key[1], {})
                tasks[key[2]] = replace(tasks.get(key[2], SavedTask()),
                                        error=f"failed to decode task {key[3]}: {e}")
            # An undecodable acknowledged state reads as none: the update is resent.
    return snapshot


class KeyValueStateDB(ABC):
    """`StateDB` on top of five key-value primitives and `get_all_state`."""

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    async def _put(self, key: Key, data: bytes) -> None: ...

    @abstractmethod
    async def _get(self, key: Key) -> bytes | None: ...

    @abstractmethod
    async def _scan_allocations(self) -> list[tuple[str, bytes]]:
        """Every stored `("alloc", id, "alloc")` value, in one read."""

    @abstractmethod
    async def _delete_allocation(self, alloc_id: str) -> None: ...

    @abstractmethod
    async def _delete_task(self, alloc_id: str, task: str) -> None: ...

    # ---------------------------------------------------------------- allocations

    async def get_all_allocations(self) -> tuple[list[Allocation], dict[str, str]]:
        allocs: list[Allocation] = []
        errors: dict[str, str] = {}
        for alloc_id, data in await self._scan_allocations():
            try:
                allocs.append(msgspec.json.decode(data, type=Allocation))
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                errors[alloc_id] = f"failed to decode allocation: {e}"
        return allocs, errors

    @abstractmethod
    async def get_all_state(self) -> StateSnapshot:
        """Every row a restart reads (`RESTORE_ALLOC_KINDS` of "alloc" keys and
        `RESTORE_TASK_KINDS` of "task" keys), from one consistent snapshot, decoded."""

    async def put_allocation(self, alloc: Allocation) -> None:
        await self._put(alloc_key(alloc.id, "alloc"), encode(alloc))

    async def get_deployment_status(self, alloc_id: str) -> AllocDeploymentStatus | None:
        return decode(await self._get(alloc_key(alloc_id, "deploy_status")),
                      AllocDeploymentStatus)

    async def put_deployment_status(self, alloc_id: str, status: AllocDeploymentStatus) -> None:
        await self._put(alloc_key(alloc_id, "deploy_status"), encode(status))

    async def get_network_status(self, alloc_id: str) -> AllocNetworkStatus | None:
        return decode(await self._get(alloc_key(alloc_id, "network_status")), AllocNetworkStatus)

    async def put_network_status(self, alloc_id: str, status: AllocNetworkStatus) -> None:
        await self._put(alloc_key(alloc_id, "network_status"), encode(status))

    async def get_acknowledged_state(self, alloc_id: str) -> AcknowledgedState | None:
        return decode(await self._get(alloc_key(alloc_id, "acknowledged_state")),
                      AcknowledgedState)

    async def put_acknowledged_state(self, alloc_id: str, state: AcknowledgedState) -> None:
        await self._put(alloc_key(alloc_id, "acknowledged_state"), encode(state))

    async def delete_allocation_bucket(self, alloc_id: str) -> None:
        await self._delete_allocation(alloc_id)

    # ---------------------------------------------------------------- tasks

    async def get_task_runner_state(
        self, alloc_id: str, task: str
    ) -> tuple[LocalState | None, TaskState | None]:
        local = decode(await self._get(task_key(alloc_id, task, "local_state")), LocalState)
        state = decode(await self._get(task_key(alloc_id, task, "task_state")), TaskState)
        return local, state

    async def put_task_runner_local_state(self, alloc_id: str, task: str,
                                          state: LocalState) -> None:
        await self._put(task_key(alloc_id, task, "local_state"), encode(state))

    async def put_task_state(self, alloc_id: str, task: str, state: TaskState) -> None:
        await self._put(task_key(alloc_id, task, "task_state"), encode(state))

    async def delete_task_bucket(self, alloc_id: str, task: str) -> None:
        await self._delete_task(alloc_id, task)

    # ---------------------------------------------------------------- node

    async def get_driver_plugin_state(self) -> PluginState | None:
        return decode(await self._get(node_key("driver_plugin_state")), PluginState)

    async def put_driver_plugin_state(self, state: PluginState) -> None:
        await self._put(node_key("driver_plugin_state"), encode(state))

    async def get_device_plugin_state(self) -> PluginState | None:
        return decode(await self._get(node_key("device_plugin_state")), PluginState)

    async def put_device_plugin_state(self, state: PluginState) -> None:
        await self._put(node_key("device_plugin_state"), encode(state))

    async def get_node_meta(self) -> dict[str, str] | None:
        return decode(await self._get(node_key("node_meta")), dict[str, str])

    async def put_node_meta(self, meta: dict[str, str]) -> None:
        await self._put(node_key("node_meta"), encode(meta))

    async def get_node_registration(self) -> NodeRegistration | None:
        return decode(await self._get(node_key("node_registration")), NodeRegistration)

    async def put_node_registration(self, reg: NodeRegistration) -> None:
        await self._put(node_key("node_registration"), encode(reg))

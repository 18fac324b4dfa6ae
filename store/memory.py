"""`MemoryStateDB`: the state DB as a dict, for tests that want speed and determinism.

It stores encoded bytes, not live structs, so it has exactly the copy semantics of the SQLite
store (and catches a struct that cannot be encoded just as early). It never touches a thread
or the disk, so it is safe under `autojump_clock`. Every method checkpoints, like a real store.
"""

from __future__ import annotations

from typing import final

import trio

from yurt.store.base import (
    RESTORE_ALLOC_KINDS,
    RESTORE_TASK_KINDS,
    Key,
    KeyValueStateDB,
    snapshot_from_rows,
)
from yurt.store.protocol import StateSnapshot


@final
class MemoryStateDB(KeyValueStateDB):
    def __init__(self) -> None:
        self._data: dict[Key, bytes] = {}

    @property
    def name(self) -> str:
        return "memory"

    async def _put(self, key: Key, data: bytes) -> None:
        await trio.lowlevel.checkpoint()
        self._data[key] = data

    async def _get(self, key: Key) -> bytes | None:
        await trio.lowlevel.checkpoint()
        return self._data.get(key)

    async def _scan_allocations(self) -> list[tuple[str, bytes]]:
        await trio.lowlevel.checkpoint()
        return [(k[1], v) for k, v in self._data.items() if k[0] == "alloc" and k[2] == "alloc"]

    async def get_all_state(self) -> StateSnapshot:
        await trio.lowlevel.checkpoint()
        return snapshot_from_rows([(k, v) for k, v in self._data.items()
                                   if (k[0] == "alloc" and k[2] in RESTORE_ALLOC_KINDS)
                                   or (k[0] == "task" and k[3] in RESTORE_TASK_KINDS)])

    async def _delete_allocation(self, alloc_id: str) -> None:
        await trio.lowlevel.checkpoint()
        for key in [k for k in self._data if k[0] in ("alloc", "task") and k[1] == alloc_id]:
            del self._data[key]

    async def _delete_task(self, alloc_id: str, task: str) -> None:
        await trio.lowlevel.checkpoint()
        for key in [k for k in self._data if k[0] == "task" and k[1:3] == (alloc_id, task)]:
            del self._data[key]

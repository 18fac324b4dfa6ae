"""Allocation garbage collection: destroy terminal allocations when the node needs room.

Nomad's client GC (`client/gc.go` `AllocGarbageCollector`). Terminal allocations are queued
oldest first (by the time they were marked); a pass destroys them one after another while the
alloc dir's file system is over `disk_threshold` % full, or over `inode_threshold` % of its
inodes, or more than `max_allocs` allocations are live, with at most `parallel` destroys at
once. Passes run every `interval` seconds and whenever something is marked. `collect(id)` and
`collect_all()` are the API's forced collections; an allocation that is not terminal is never in
the queue.

An allocation is collected only once `ready` says the server knows it ended: its state is
deleted with it, and a crash between that delete and the server hearing of the end would leave
the server with a live allocation this node knows nothing of (run again, or never reported).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import final

import trio

log = logging.getLogger("yurt.gc")

#: How long a forced collection waits for the server to acknowledge an allocation's end
#: (the sync sends such an update on its next 200 ms tick).
READY_WAIT = 5.0


@dataclass(frozen=True)
class GCConfig:
    interval: float = 60.0
    disk_threshold: float = 80.0
    inode_threshold: float = 70.0
    max_allocs: int = 50
    parallel: int = 2


def _statvfs_usage(path: Path) -> tuple[float, float]:
    st = os.statvfs(path if path.exists() else path.parent)
    space = 100.0 * (1 - st.f_bavail / st.f_blocks) if st.f_blocks else 0.0
    inodes = 100.0 * (1 - st.f_favail / st.f_files) if st.f_files else 0.0
    return space, inodes


async def disk_usage(path: Path) -> tuple[float, float]:
    """(% of space used, % of inodes used) on the file system holding `path`."""
    return await trio.to_thread.run_sync(_statvfs_usage, path)


@final
class AllocGarbageCollector:
    def __init__(self, destroy: Callable[[str], Awaitable[None]], live_count: Callable[[], int],
                 alloc_root: Path, config: GCConfig = GCConfig(),
                 usage: Callable[[Path], Awaitable[tuple[float, float]]] = disk_usage,
                 ready: Callable[[str], bool] = lambda alloc_id: True) -> None:
        self._destroy = destroy
        self._ready = ready
        self._live_count = live_count
        self._root = alloc_root
        self.config = config
        self._usage = usage
        self._queue: dict[str, float] = {}  # insertion order is marking order: oldest first
        # Being destroyed now (not marked again meanwhile). Forgotten once destroyed: the
        # client never reports a collected allocation again, so nothing is kept for ever.
        self._collecting: set[str] = set()
        self._wakeup = trio.Event()
        self._readiness = trio.Event()  # set (and replaced) by `wake`
        self._limiter = trio.CapacityLimiter(config.parallel)

    def mark(self, alloc_id: str) -> None:
        """Queue a terminal allocation for collection (idempotent) and wake the collector."""
        if alloc_id not in self._queue and alloc_id not in self._collecting:
            self._queue[alloc_id] = trio.current_time()
            self._wakeup.set()

    def wake(self) -> None:
        """Something changed (e.g. the server acknowledged an allocation's end): look again."""
        self._wakeup.set()
        self._readiness.set()
        self._readiness = trio.Event()

    def _oldest_ready(self) -> str | None:
        return next((a for a in self._queue if self._ready(a)), None)

    @property
    def queued(self) -> list[str]:
        return list(self._queue)

    @property
    def tracked(self) -> int:
        """How many allocations the collector holds on to (queued or being destroyed)."""
        return len(self._queue) + len(self._collecting)

    async def reason(self) -> str:
        """Why a pass should collect now ("" if it should not)."""
        space, inodes = await self._usage(self._root)
        if space > self.config.disk_threshold:
            return f"disk usage {space:.0f}% is over {self.config.disk_threshold:.0f}%"
        if inodes > self.config.inode_threshold:
            return f"inode usage {inodes:.0f}% is over {self.config.inode_threshold:.0f}%"
        live = self._live_count()
        if live > self.config.max_allocs:
            return f"{live} allocations is over the maximum of {self.config.max_allocs}"
        return ""

    async def _collect_one(self, alloc_id: str) -> None:
        self._collecting.add(alloc_id)
        try:
            async with self._limiter:
                await self._destroy(alloc_id)
        except Exception:  # one failed destroy must not stop the others
            log.exception("destroying allocation %s failed", alloc_id)
        finally:
            self._collecting.discard(alloc_id)

    async def keep_usage_below_threshold(self) -> int:
        """One pass; returns how many allocations it destroyed."""
        destroyed = 0
        while self._oldest_ready() is not None and (why := await self.reason()):
            alloc_id = self._oldest_ready()
            if alloc_id is None:  # acknowledged allocations went away meanwhile
                break
            del self._queue[alloc_id]
            log.info("garbage collecting allocation %s: %s", alloc_id, why)
            # One at a time here, so usage is measured again after each; forced collections
            # (collect_all) run in parallel, up to the limit.
            await self._collect_one(alloc_id)
            destroyed += 1
        await trio.lowlevel.checkpoint()
        return destroyed

    async def collect(self, alloc_id: str) -> bool:
        """Destroy a queued allocation now; False if it is not terminal/queued, or if the
        server has not acknowledged its end within `READY_WAIT` seconds."""
        with trio.move_on_after(READY_WAIT):
            while alloc_id in self._queue and not self._ready(alloc_id):
                await self._readiness.wait()
        if alloc_id not in self._queue or not self._ready(alloc_id):
            await trio.lowlevel.checkpoint()
            return False
        del self._queue[alloc_id]
        await self._collect_one(alloc_id)
        return True

    async def collect_all(self) -> int:
        """Destroy every queued allocation whose end the server knows; how many."""
        ids = [a for a in self._queue if self._ready(a)]
        for alloc_id in ids:
            del self._queue[alloc_id]
        async with trio.open_nursery() as nursery:
            for alloc_id in ids:
                nursery.start_soon(self._collect_one, alloc_id)
        return len(ids)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        task_status.started()
        while True:
            with trio.move_on_after(self.config.interval):
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            await self.keep_usage_below_threshold()

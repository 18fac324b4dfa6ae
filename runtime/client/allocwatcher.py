"""Waiting for the allocations a new one replaces or preempts, and taking over their disk.

Nomad's allocwatcher (`client/allocwatcher/alloc_watcher.go` `NewAllocWatcher`,
`group_alloc_watcher.go`). A new allocation's prerun may have to wait:

- for its *previous* allocation (a job update), until that one is client-terminal — a desired
  stop alone does not release it, the tasks must really be dead — and then, for a sticky or
  migrating ephemeral disk, move `alloc/data` and each task's `local/` into the new alloc dir;
- for every allocation it *preempted*, until each is client-terminal (no migration).

`GroupWatcher` waits for all of them at once. Without anything to wait for the watcher is a
no-op that returns at once. A migration that fails is soft: the new allocation starts with
whatever did move (nothing is deleted: the previous allocation no longer has it), and
`migrate_error` says why.

The watcher knows the allocations it waits for only as `WatchedRunner`s (their ID, alloc dir
and broadcast client views), so it serves any runner and imports no runner's module.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, final

import trio

from yurt.runtime.client.allocdir import AllocDir
from yurt.runtime.client.allocrunner.broadcaster import AllocBroadcaster
from yurt.runtime.structs import Allocation, is_client_terminal

if TYPE_CHECKING:
    from yurt.runtime.client.allocrunner.interface import AllocState

log = logging.getLogger("yurt.allocwatcher")


class Terminating(Protocol):
    """An allocation runner whose end can be awaited: its client views, live and broadcast
    (every `AllocRunner` of allocrunner/interface.py is one)."""

    @property
    def broadcaster(self) -> AllocBroadcaster[Allocation]: ...
    def alloc_state(self) -> AllocState: ...


class WatchedRunner(Terminating, Protocol):
    """The runner of an allocation a new one replaces or preempted: what `GroupWatcher` needs
    of it (its ID and alloc dir, for a sticky disk's migration)."""

    @property
    def id(self) -> str: ...
    @property
    def alloc_dir(self) -> AllocDir | None: ...


async def wait_terminal(runner: Terminating) -> None:
    """Until `runner`'s allocation is client-terminal (complete, failed or lost)."""
    listener = runner.broadcaster.listen()
    try:
        if is_client_terminal(runner.alloc_state().client_status):
            await trio.lowlevel.checkpoint()
            return
        async for alloc in listener:
            if is_client_terminal(alloc.client_status):
                return
    finally:
        listener.close()


@final
class GroupWatcher:
    """The previous allocation (optional, maybe with disk migration) and the preempted ones."""

    def __init__(self, previous: WatchedRunner | None = None, *, sticky: bool = False,
                 preempted: Sequence[WatchedRunner] | None = None) -> None:
        self.previous = previous
        self.sticky = sticky
        self.preempted = list(preempted or [])
        self.waiting = False
        self.migrate_error = ""

    @property
    def is_noop(self) -> bool:
        return self.previous is None and not self.preempted

    async def wait(self) -> None:
        """Until the previous and every preempted allocation are client-terminal."""
        if self.is_noop:
            await trio.lowlevel.checkpoint()
            return
        self.waiting = True
        try:
            # One after the other: all must end, so the order costs nothing, and without a
            # nursery an error reaches the caller as itself, never as an ExceptionGroup.
            for runner in [*([self.previous] if self.previous else []), *self.preempted]:
                await wait_terminal(runner)
        finally:
            self.waiting = False

    async def migrate(self, dest: AllocDir, tasks: list[str]) -> None:
        """Move the previous allocation's data into `dest` (sticky disks only; soft)."""
        if self.previous is None or not self.sticky or self.previous.alloc_dir is None:
            await trio.lowlevel.checkpoint()
            return
        try:
            await dest.move(self.previous.alloc_dir, tasks)
        except OSError as e:
            # Soft: start with what did move. Never delete it: the previous allocation no
            # longer has it.
            self.migrate_error = (f"failed to migrate data from allocation "
                                  f"{self.previous.id}: {e}")
            log.warning("%s; starting with what was moved", self.migrate_error)

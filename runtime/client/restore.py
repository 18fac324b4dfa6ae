"""Re-attaching to the allocations an earlier agent ran, behind an API that already answers.

Why it is shaped this way. A restart used to re-attach every allocation before the API came
up, one allocation after another, each task reading its two rows from the store in its own
thread hop: with 500 tasks the API stayed silent for 2.8 s. Now the agent reads all state in
one transaction (`StateDB.get_all_state`), starts serving, and re-attaches behind it:

- Allocations re-attach concurrently. Only an allocation that waits for another one (its
  previous allocation, or one it preempted) is restored after it, so that its watcher finds
  that runner, as the oldest-first order guaranteed before. The drivers check processes
  without a thread hop (raw_exec reads /proc and opens a pidfd on the event loop).
- Until an allocation's runner is restored and launched it is *restoring*: it has no runner
  in `Client.runners` (nothing can act on a half-restored runner), `pending` lists it, and the
  API shows the server's copy with the client view the earlier agent persisted laid over it
  (`ClientStatus` and `TaskStates` keep valid Nomad values: what the tasks were doing when the
  agent died) and the `ClientDescription` `RESTORING`, and counts the allocations still
  restoring in `/v1/agent/self`.
- Nothing races a restore: the agent feeds server changes (new jobs, stops) to the client
  only once `done` is set, API actions on a restoring allocation wait for it, and shutdown
  waits for it before it stops or destroys runners.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, final

import trio

from yurt.runtime.structs import Allocation

if TYPE_CHECKING:  # the API imports `RESTORING` before the agent loads the runners
    from yurt.runtime.client.allocrunner.interface import AllocRunner
    from yurt.runtime.client.client import Client
    from yurt.store.protocol import SavedTask

log = logging.getLogger("yurt.restore")

#: The `ClientDescription` the API shows for an allocation still being re-attached.
RESTORING: Final = "Restoring: re-attaching to its tasks after an agent restart"


@final
class RestoreProgress:
    """Which allocations are still restoring; `done` once all are (and orphans reaped)."""

    def __init__(self) -> None:
        #: Allocation ID → the client view the earlier agent persisted, until restored.
        self.pending: dict[str, Allocation] = {}
        #: Set by the agent once its API serves. Re-attaching a thousand allocations keeps
        #: the event loop busy for a while, and the API's start-up would wait behind it.
        self.serving = trio.Event()
        self.done = trio.Event()

    def begin(self, stored: list[Allocation]) -> None:
        """These allocations are restoring (call before the API may look); `stored` are
        the client views read from the state DB."""
        self.pending.update((alloc.id, alloc) for alloc in stored)

    async def wait(self, alloc_id: str | None = None) -> None:
        """Until `alloc_id` (None: every allocation) is restored."""
        if alloc_id is None or alloc_id in self.pending:
            await self.done.wait()
        else:
            await trio.lowlevel.checkpoint()


async def reattach_all(client: Client, allocs: list[Allocation],
                       tasks: Mapping[str, Mapping[str, SavedTask]],
                       progress: RestoreProgress) -> list[AllocRunner]:
    """Restore every allocation in `allocs` (oldest first) into `client`, concurrently but
    after the allocations it waits for; one that fails is logged and left out (the server
    sync starts it afresh). Each leaves `progress.pending` once its runner is launched (or
    it failed). Returns the runners restored, in `allocs` order."""
    order = {alloc.id: i for i, alloc in enumerate(allocs)}
    restored = {alloc.id: trio.Event() for alloc in allocs}
    runners: dict[str, AllocRunner] = {}

    async def restore(alloc: Allocation) -> None:
        try:
            for dep in (alloc.previous_allocation, *alloc.preempted_allocations):
                # Only an older one: the order is the one the sequential restore had, and
                # a cycle in corrupt data cannot deadlock.
                if dep in restored and order[dep] < order[alloc.id]:
                    await restored[dep].wait()
            try:
                runners[alloc.id] = await client.restore_alloc(alloc, tasks.get(alloc.id, {}))
            except Exception as e:  # a broken allocation must not stop the others
                log.error("allocation %s cannot be restored: %s", alloc.id, e)
        finally:
            progress.pending.pop(alloc.id, None)
            restored[alloc.id].set()

    async with trio.open_nursery() as nursery:
        for alloc in allocs:
            nursery.start_soon(restore, alloc)
    return [runners[a.id] for a in allocs if a.id in runners]

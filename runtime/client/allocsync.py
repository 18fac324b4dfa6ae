"""Alloc sync: how the client tells the server what its allocations are doing.

Nomad's scheme (`client/client.go` `allocSync` and `pendingClientUpdates`, with the priorities
of `client/allocrunner/alloc_runner.go` `GetUpdatePriority`), chosen because the naive one (send
every change as it happens) melts a server when a thousand allocations start at once:

- `PendingUpdates` holds only the *latest* update per allocation. Alloc runners add to it and
  never block: a burst of ten changes to one allocation is one update on the wire.
- A 200 ms tick. An update whose client status changed since the server last acknowledged it
  is *urgent* and goes on the next tick; every other change waits for every 5th tick (at most
  once a second); an update identical to the acknowledged state is dropped.
- The tick runs only while something is pending (and the server was contacted): an idle
  syncer sleeps on an event until `add`, so a quiet node costs no wake-ups. When it wakes, it
  counts the ticks it slept through and rejoins the same 200 ms grid, so every update leaves
  exactly when the ever-ticking loop (Nomad's `time.Ticker`) would have sent it.
- Nothing is sent before the client first heard from the server (`servers_contacted`).
- A successful send tells `on_acknowledged` (the garbage collector waits for the server to
  know an allocation ended before it deletes the allocation's state).
- A failed send puts its updates back unless a newer one arrived meanwhile, and the next try
  waits 5 s plus up to 5 s of stagger. A successful send records, and persists, each
  allocation's acknowledged state, so a restarted agent does not resend what the server has.

`update_priority` and `PendingUpdates` are pure; `AllocSyncer.run` is the Trio loop, its clock
and stagger injectable so the tests walk minutes of ticks under the mock clock.
"""

from __future__ import annotations

import enum
import logging
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Final, final

import msgspec
import trio

from yurt.runtime.structs import AcknowledgedState, Allocation, is_client_terminal
from yurt.store.protocol import StateDB

log = logging.getLogger("yurt.sync")

SYNC_INTERVAL: Final = 0.2
TYPICAL_EVERY: Final = 5  # ticks
RETRY_AFTER: Final = 5.0
RETRY_STAGGER: Final = 5.0


class UpdatePriority(enum.IntEnum):
    NONE = 0
    TYPICAL = 1
    URGENT = 2


def stripped(alloc: Allocation) -> Allocation:
    """Only what a client update carries (Nomad's fields, plus the deployment the health was
    judged for: the server ignores health of a deployment the allocation has left)."""
    return Allocation(id=alloc.id, node_id=alloc.node_id, task_states=alloc.task_states,
                      deployment_id=alloc.deployment_id,
                      client_status=alloc.client_status,
                      client_description=alloc.client_description,
                      deployment_status=alloc.deployment_status,
                      network_status=alloc.network_status)


def acknowledged(alloc: Allocation, now: int) -> AcknowledgedState:
    return AcknowledgedState(client_status=alloc.client_status,
                             client_description=alloc.client_description,
                             task_states=alloc.task_states,
                             deployment_status=alloc.deployment_status,
                             network_status=alloc.network_status, modify_time=now)


def update_priority(update: Allocation, acked: AcknowledgedState | None) -> UpdatePriority:
    """Nomad's `GetUpdatePriority`: how urgently `update` must reach the server."""
    if acked is None:
        return UpdatePriority.URGENT if update.client_status == "failed" else (
            UpdatePriority.TYPICAL)
    if update.client_status != acked.client_status:
        return UpdatePriority.URGENT
    if (update.client_description != acked.client_description
            or update.deployment_status != acked.deployment_status
            or update.network_status != acked.network_status
            or update.task_states != acked.task_states):
        return UpdatePriority.TYPICAL
    return UpdatePriority.NONE


@final
class PendingUpdates:
    """The latest update per allocation, waiting to be sent."""

    def __init__(self) -> None:
        self._updates: dict[str, Allocation] = {}

    def __len__(self) -> int:
        return len(self._updates)

    def add(self, update: Allocation) -> None:
        self._updates[update.id] = update

    def peek(self) -> list[Allocation]:
        return list(self._updates.values())

    def take(self) -> list[Allocation]:
        """Everything pending, now no longer pending."""
        batch = list(self._updates.values())
        self._updates.clear()
        return batch

    def restore(self, batch: list[Allocation]) -> None:
        """Put back a batch that failed to send, except where something newer arrived."""
        for update in batch:
            self._updates.setdefault(update.id, update)


SendUpdates = Callable[[list[Allocation]], Awaitable[None]]


@final
class AllocSyncer:
    """Sends pending updates to the server on Nomad's schedule. Start `run` in a nursery."""

    def __init__(self, send: SendUpdates, state_db: StateDB, *,
                 unix_clock: Callable[[], int], rng: random.Random | None = None,
                 on_acknowledged: Callable[[], None] = lambda: None) -> None:
        self._send = send
        self._on_acknowledged = on_acknowledged
        self._db = state_db
        self._unix_clock = unix_clock
        self._rng = rng or random.Random()
        self.pending = PendingUpdates()
        self._added = trio.Event()  # set by `add`, replaced by the idle loop
        self.acked: dict[str, AcknowledgedState] = {}
        self.servers_contacted = trio.Event()
        self.calls = 0  # sends attempted (for benchmarks and tests)
        self.sent = 0  # updates carried by successful sends

    def add(self, alloc: Allocation) -> None:
        """Queue the client's latest view of `alloc` (never blocks)."""
        self.pending.add(stripped(alloc))
        self._added.set()

    def load_acknowledged(self, acked: Mapping[str, AcknowledgedState]) -> None:
        """After an agent restart: what the server already has (read with the rest of the
        state, `StateDB.get_all_state`), so it is not resent."""
        self.acked.update(acked)

    def forget(self, alloc_id: str) -> None:
        self.acked.pop(alloc_id, None)

    def acknowledged_terminal(self, alloc_id: str) -> bool:
        """Whether the server has acknowledged that `alloc_id` ended here. Until it has, the
        client must keep the allocation's state: deleted earlier, a crash would leave the
        server with a live allocation the client knows nothing of, run again or never
        reported."""
        acked = self.acked.get(alloc_id)
        return acked is not None and is_client_terminal(acked.client_status)

    def next_batch(self, ticks: int) -> list[Allocation]:
        """What to send on tick number `ticks` (1-based since the last send); may be empty."""
        if not len(self.pending) or not self.servers_contacted.is_set():
            return []
        urgent = False
        keep: list[Allocation] = []
        for update in self.pending.peek():
            priority = update_priority(update, self.acked.get(update.id))
            if priority is UpdatePriority.URGENT:
                urgent = True
            if priority is not UpdatePriority.NONE:
                keep.append(update)
        if ticks % TYPICAL_EVERY != 0 and not urgent:
            return []
        self.pending.take()  # what is not kept needs no sending
        return keep

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        task_status.started()
        ticks = 0
        wait = SYNC_INTERVAL
        while True:
            if self._idle():
                ticks, wait = await self._sleep_while_idle(ticks, wait)
            await trio.sleep(wait)
            wait = SYNC_INTERVAL
            ticks += 1
            batch = self.next_batch(ticks)
            if not batch:
                continue
            self.calls += 1
            try:
                await self._send(batch)
            except Exception as e:  # the server is the one to blame: retry later
                log.warning("sending %d allocation updates failed: %s", len(batch), e)
                self.pending.restore(batch)
                wait = RETRY_AFTER + self._rng.random() * RETRY_STAGGER
                continue
            self.sent += len(batch)
            ticks = 0
            now = self._unix_clock()
            # Written concurrently, so the store's writer commits them as one transaction.
            async with trio.open_nursery() as nursery:
                for update in batch:
                    ack = acknowledged(update, now)
                    self.acked[update.id] = ack
                    nursery.start_soon(self._db.put_acknowledged_state, update.id,
                                       msgspec.structs.replace(ack))
            self._on_acknowledged()

    def _idle(self) -> bool:
        """Whether no tick could send anything until `add` or the first server contact."""
        return not len(self.pending) or not self.servers_contacted.is_set()

    async def _sleep_while_idle(self, ticks: int, wait: float) -> tuple[int, float]:
        """Sleep until there is something to send; return the tick count and the wait to
        the next tick that the ever-ticking loop would have had at that point.

        Its ticks in between would all have found nothing to send, so only their number
        matters (the every-5th-tick rule counts them).
        """
        since = trio.current_time()
        while self._idle():
            self._added = trio.Event()
            if not self.servers_contacted.is_set():
                await self.servers_contacted.wait()
            elif not len(self.pending):
                await self._added.wait()
        slept = trio.current_time() - since
        if slept < wait:
            return ticks, wait - slept
        missed = 1 + math.floor((slept - wait) / SYNC_INTERVAL)  # ticks that found nothing
        return ticks + missed, wait + missed * SYNC_INTERVAL - slept

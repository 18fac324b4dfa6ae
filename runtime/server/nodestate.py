"""`NodeControl`: the node's scheduling eligibility and drain, persisted, and the drainer task.

What an operator sets on the node (`/v1/node/<id>/eligibility`, `/v1/node/<id>/drain`) lives on
the shared `Node` (the server's placement reads `node_refusal` from it) and in
`<data-dir>/server/node-state.json`, written atomically (temporary file, fsync, rename) before
the change is answered, so an agent restart keeps an ineligible or draining node as it was, and
a drain's deadline stays the wall-clock time it was set to.

Invariants:
- Every change takes the next server index (the node's `ModifyIndex`, the answer's
  `NodeModifyIndex`), is written, then published as a `Node` event and woken into blocking
  queries; a node draining is always ineligible. A write that fails (a full disk) is logged
  and the change holds in memory: the next change writes the whole state again.
- `run` is the drainer (Nomad's NodeDrainer on one node): it plans with the pure
  `drain.plan_drain` on every server change and at the deadline, stops allocations through the
  server's `stop_alloc`, and completes the drain. Time comes from `unix_clock` and trio's clock,
  so the whole drain runs under a mock clock in tests. A drain step that fails is logged once
  per distinct error and retried (after `RETRY` or on the next change): it never stops the
  agent.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

import msgspec
import trio

from yurt.runtime.eventstream import Event
from yurt.runtime.server.scheduler.drain import from_unix_ns, plan_drain, start_strategy
from yurt.runtime.structs import (
    NODE_ELIGIBLE,
    NODE_INELIGIBLE,
    TRIGGER_NODE_DRAIN,
    Base,
    DrainMetadata,
    DrainStrategy,
    Node,
    NodeEvent,
)

# A type-only cycle inside server/, kept on purpose: node status and drains are `LocalServer`'s
# loops in a file of their own (Nomad's `nomad/drainer` and `node_endpoint.go` work on the
# server's state likewise); nothing here imports local.py at run time.
if TYPE_CHECKING:
    from yurt.runtime.server.local import LocalServer

log = logging.getLogger("yurt.server.nodestate")

#: Seconds before a drain step that failed is tried again (sooner on a server change).
RETRY: Final = 30.0

#: Nomad keeps a node's last ten events (structs.MaxRetainedNodeEvents).
MAX_EVENTS: Final = 10

# Nomad's messages (nomad/node_endpoint.go, nomad/drainer/drainer.go).
DRAIN_SET: Final = "Node drain strategy set"
DRAIN_UPDATED: Final = "Node drain strategy updated"
DRAIN_DISABLED: Final = "Node drain disabled"
DRAIN_COMPLETE: Final = "Node drain complete"
MARKED_ELIGIBLE: Final = "Node marked as eligible for scheduling"
MARKED_INELIGIBLE: Final = "Node marked as ineligible for scheduling"
REGISTERED: Final = "Node registered"


class PersistedNode(Base):
    """What node-state.json holds."""

    scheduling_eligibility: str = NODE_ELIGIBLE
    drain_strategy: DrainStrategy | None = None
    last_drain: DrainMetadata | None = None
    events: list[NodeEvent] = msgspec.field(default_factory=list)
    modify_index: int = 0


@final
class NodeControl:
    """Eligibility and drain of the server's node. `path` None: nothing is persisted."""

    def __init__(self, server: LocalServer, path: Path | None, *,
                 unix_clock: Callable[[], int] = time.time_ns) -> None:
        self._server = server
        self._path = path
        self._clock = unix_clock
        self._lock = trio.Lock()
        self._kick = trio.Event()
        self._error = ""  # the drain step's last error, logged once

    @property
    def node(self) -> Node:
        return self._server.node

    async def load(self) -> None:
        """Take back what an earlier agent set; a node seen for the first time gets Nomad's
        "Node registered" event."""
        stored = await trio.to_thread.run_sync(_read, self._path) if self._path else None
        node = self.node
        if stored is None:
            # A registration is a change like any other: it takes the next index (the node's
            # CreateIndex and ModifyIndex, its event's CreateIndex) and is written, so the
            # next start finds the node known.
            async with self._changing() as index:
                index = await self._commit(self._event(REGISTERED, "Cluster"),
                                           "NodeRegistration", index)
                node.create_index = index
            return
        node.scheduling_eligibility = stored.scheduling_eligibility
        node.drain_strategy = stored.drain_strategy
        node.drain = stored.drain_strategy is not None
        node.last_drain = stored.last_drain
        node.events = stored.events
        node.modify_index = stored.modify_index
        # Never below an index loaded (the server's store persists the counter with each
        # change; a server without a store has only this).
        self._server.observe_index(stored.modify_index)

    @asynccontextmanager
    async def _changing(self) -> AsyncIterator[int]:
        """One change of the node, made (mutated, recorded, persisted, published) within the
        block, under the server's change lock: a blocking query never sees the node half
        changed (its drain over, say, but not the event saying so). A change may free
        capacity (eligible again, drain off): blocked evaluations are retried after it."""
        async with self._lock, self._server.change(capacity=True) as index:
            yield index

    async def _commit(self, event: NodeEvent | None, event_type: str, index: int) -> int:
        """Record `event` at `index` (the change's, from `_changing`), persist, publish."""
        node = self.node
        node.status_updated_at = self._clock() // 1_000_000_000
        if event is not None:
            event.create_index = index
            node.events = [*node.events, event][-MAX_EVENTS:]
        if self._path is not None:
            state = PersistedNode(scheduling_eligibility=node.scheduling_eligibility,
                                  drain_strategy=node.drain_strategy,
                                  last_drain=node.last_drain, events=node.events,
                                  modify_index=index)
            try:
                await trio.to_thread.run_sync(write_atomically, self._path,
                                              msgspec.json.encode(state))
            except OSError as e:
                # A full disk must not stop the agent or the drain: the change holds in
                # memory, and the next change writes the whole state again.
                log.warning("node state %s not written: %s", self._path, e)
        node.modify_index = index  # last: no reader sees it before what it numbers
        self._server.publish([Event(topic="Node", type=event_type, key=node.id,
                                    payload={"Node": node})])
        self._kick.set()
        return index

    def _event(self, message: str, subsystem: str,
               details: dict[str, str] | None = None) -> NodeEvent:
        return NodeEvent(message=message, subsystem=subsystem, details=details,
                         timestamp=from_unix_ns(self._clock()))

    # ------------------------------------------------------------------ operator changes

    async def set_eligibility(self, eligibility: str) -> int:
        """Nomad's Node.UpdateEligibility. Raises ValueError for what Nomad refuses."""
        if eligibility not in (NODE_ELIGIBLE, NODE_INELIGIBLE):
            raise ValueError(f"invalid scheduling eligibility {eligibility!r}")
        async with self._changing() as index:
            node = self.node
            if node.drain_strategy is not None and eligibility == NODE_ELIGIBLE:
                raise ValueError("can not set node's scheduling eligibility to eligible "
                                 "while it is draining")
            if node.scheduling_eligibility == eligibility:
                await trio.lowlevel.checkpoint()
                return node.modify_index  # nothing to do, as Nomad
            node.scheduling_eligibility = eligibility
            message = MARKED_ELIGIBLE if eligibility == NODE_ELIGIBLE else MARKED_INELIGIBLE
            return await self._commit(self._event(message, "Cluster"), "NodeEligibility",
                                      index)

    async def set_drain(self, deadline: int | None, ignore_system_jobs: bool = False,
                        mark_eligible: bool = False, meta: dict[str, str] | None = None
                        ) -> int:
        """Nomad's Node.UpdateDrain: `deadline` None disables the drain (and with
        `mark_eligible` makes the node eligible again); < 0 forces it now; 0 has none."""
        async with self._changing() as index:
            node = self.node
            now = self._clock()
            previous = node.drain_strategy
            if deadline is None:
                node.drain_strategy = None
                if mark_eligible:
                    node.scheduling_eligibility = NODE_ELIGIBLE
                message = DRAIN_DISABLED if previous is not None else ""
                if node.last_drain is not None and previous is not None:
                    node.last_drain.status = "canceled"
                    node.last_drain.updated_at = from_unix_ns(now)
                    if meta:  # the canceller's (`-m`: "cancel_message"); else kept
                        node.last_drain.meta = meta
            else:
                node.drain_strategy = start_strategy(deadline, ignore_system_jobs, now,
                                                     previous)
                node.scheduling_eligibility = NODE_INELIGIBLE
                message = DRAIN_SET if previous is None else DRAIN_UPDATED
                # An update of a running drain keeps its metadata unless it brings its own
                # (nomad/state/state_store.go `updateNodeDrainImpl`).
                kept = (node.last_drain.meta if previous is not None
                        and node.last_drain is not None else None)
                node.last_drain = DrainMetadata(
                    started_at=node.drain_strategy.started_at, updated_at=from_unix_ns(now),
                    status="draining", meta=meta or kept or None)
            node.drain = node.drain_strategy is not None
            event = self._event(message, "Drain") if message else None
            return await self._commit(event, "NodeDrain", index)

    async def purge(self) -> int:
        """Nomad's Node.Deregister, for the one node an agent is: the node is forgotten and
        registers again at once, as a fresh Nomad client does (eligible, no drain, new
        events); its allocations keep running, since the node that runs them is back."""
        async with self._changing() as index:
            node = self.node
            node.drain_strategy = None
            node.drain = False
            node.scheduling_eligibility = NODE_ELIGIBLE
            node.events = []
            node.last_drain = None
            self._server.publish([Event(topic="Node", type="NodeDeregistration", key=node.id,
                                        payload={"Node": node})])
            index = await self._commit(self._event(REGISTERED, "Cluster"), "NodeRegistration",
                                       index)
            node.create_index = index
            return index

    async def _complete(self, deadlined: bool) -> None:
        async with self._changing() as index:
            node = self.node
            if node.drain_strategy is None:
                await trio.lowlevel.checkpoint()
                return  # disabled meanwhile
            node.drain_strategy = None
            node.drain = False
            now = from_unix_ns(self._clock())
            if node.last_drain is not None:
                node.last_drain.status = "complete"
                node.last_drain.updated_at = now
            details = {"deadline_reached": "true"} if deadlined else None
            await self._commit(self._event(DRAIN_COMPLETE, "Drain", details), "NodeDrain",
                               index)

    # ------------------------------------------------------------------ the drainer

    def _report(self, error: Exception) -> None:
        """Log a failed drain step once per distinct error (it is retried)."""
        text = f"{type(error).__name__}: {error}"
        if text != self._error:
            self._error = text
            log.error("node drain step failed, retried in %.0f s or on the next change: %s",
                      RETRY, text, exc_info=error)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Drain whenever the node has a drain strategy, until cancelled."""
        task_status.started()
        while True:
            changed, kick = self._server.changed, self._kick
            wake = math.inf
            strategy = self.node.drain_strategy
            if strategy is not None:
                try:
                    now = self._clock()
                    plan = plan_drain(strategy, self._server.allocs_for_node(), now)
                    for alloc in plan.stop:
                        # Where a replacement would be placed; on this ineligible node it
                        # cannot be, and waits as a blocked evaluation (the server's part).
                        with contextlib.suppress(KeyError):  # purged meanwhile
                            await self._server.stop_alloc(alloc.id,
                                                          triggered_by=TRIGGER_NODE_DRAIN)
                    if plan.complete:
                        await self._complete(plan.deadlined)
                        self._error = ""
                        continue
                    if plan.wake_at is not None:
                        wake = trio.current_time() + max(plan.wake_at - now, 0) / 1e9
                    self._error = ""
                except Exception as e:  # a drain step's fault must not take the agent down
                    self._report(e)
                    wake = trio.current_time() + RETRY
            with trio.move_on_at(wake):
                await _either(changed, kick)
            if kick.is_set():
                self._kick = trio.Event()


def _read(path: Path) -> PersistedNode | None:
    try:
        return msgspec.json.decode(path.read_bytes(), type=PersistedNode)
    except FileNotFoundError:
        return None
    except (msgspec.DecodeError, OSError):
        return None  # unreadable: the node starts eligible, as a new one would


def write_atomically(path: Path, data: bytes) -> None:
    """`data` in `path` (0600), all or nothing, on disk before this returns.

    The temporary file has a name of its own (two writers never share one, and a crash
    leaves at most a stray `.<name>.*.tmp`), and the directory is synced after the rename so
    that the rename itself survives a power loss."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            view = memoryview(data)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


async def _either(a: trio.Event, b: trio.Event) -> None:
    """Until either event is set."""
    async with trio.open_nursery() as nursery:
        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(wait, a)
        nursery.start_soon(wait, b)

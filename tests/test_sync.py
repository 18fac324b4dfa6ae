"""Alloc sync under the mock clock (layer 1) and its pure rules (layer 0)."""

from __future__ import annotations

import random

import msgspec
import pytest
import trio
from trio.testing import MockClock

from yurt.runtime.client.allocsync import (
    AllocSyncer,
    PendingUpdates,
    UpdatePriority,
    stripped,
    update_priority,
)
from yurt.runtime.structs import AcknowledgedState, Allocation, TaskState
from yurt.store import MemoryStateDB


def alloc(alloc_id: str = "a1", status: str = "running", description: str = "",
          task: str = "running") -> Allocation:
    return Allocation(id=alloc_id, node_id="n1", client_status=status,
                      client_description=description, job_id="job",
                      task_states={"t": TaskState(state=task)})


def ack_of(a: Allocation) -> AcknowledgedState:
    return AcknowledgedState(client_status=a.client_status,
                             client_description=a.client_description,
                             task_states=a.task_states)


# --------------------------------------------------------------------------- pure rules


def test_priority_rules() -> None:
    assert update_priority(alloc(status="failed"), None) is UpdatePriority.URGENT
    assert update_priority(alloc(status="running"), None) is UpdatePriority.TYPICAL
    acked = ack_of(alloc())
    assert update_priority(alloc(), acked) is UpdatePriority.NONE
    assert update_priority(alloc(status="complete"), acked) is UpdatePriority.URGENT
    assert update_priority(alloc(description="x"), acked) is UpdatePriority.TYPICAL
    assert update_priority(alloc(task="dead"), acked) is UpdatePriority.TYPICAL


def test_stripped_update_carries_only_client_fields() -> None:
    full = alloc()
    full.job_id, full.name = "job", "job.g[0]"
    s = stripped(full)
    assert (s.id, s.node_id, s.client_status, s.task_states) == (
        "a1", "n1", "running", full.task_states)
    assert (s.job_id, s.name) == ("", "")
    # The deployment the health was judged for (the server drops a stale one's).
    assert stripped(msgspec.structs.replace(full, deployment_id="d1")).deployment_id == "d1"


def test_pending_keeps_the_latest_and_restore_never_overwrites_newer() -> None:
    pending = PendingUpdates()
    pending.add(alloc(description="1"))
    pending.add(alloc(description="2"))
    batch = pending.take()
    assert [u.client_description for u in batch] == ["2"]
    pending.add(alloc(description="3"))  # arrives while the send fails
    pending.restore(batch)
    again = pending.take()
    assert [u.client_description for u in again] == ["3"]
    pending.restore(batch)
    assert [u.client_description for u in pending.take()] == ["2"]


# --------------------------------------------------------------------------- the loop


class FakeServer:
    def __init__(self) -> None:
        self.received: list[tuple[float, list[str]]] = []
        self.fail = False

    async def update_allocs(self, batch: list[Allocation]) -> None:
        await trio.lowlevel.checkpoint()
        if self.fail:
            raise ConnectionError("server unavailable")
        self.received.append((round(trio.current_time(), 3),
                              [f"{a.id}:{a.client_status}:{a.client_description}"
                               for a in batch]))


@pytest.fixture
def parts() -> tuple[FakeServer, MemoryStateDB]:
    return FakeServer(), MemoryStateDB()


def syncer_for(server: FakeServer, db: MemoryStateDB) -> AllocSyncer:
    return AllocSyncer(server.update_allocs, db, unix_clock=lambda: 0, rng=random.Random(3))


async def test_nothing_is_sent_before_the_server_was_contacted(
        autojump_clock: MockClock, parts: tuple[FakeServer, MemoryStateDB]) -> None:
    server, db = parts
    syncer = syncer_for(server, db)
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        syncer.add(alloc(status="failed"))
        await trio.sleep(10)
        assert server.received == []
        syncer.servers_contacted.set()
        await trio.sleep(0.25)
        assert server.received == [(10.2, ["a1:failed:"])]
        nursery.cancel_scope.cancel()


async def test_urgent_next_tick_typical_at_most_once_a_second(
        autojump_clock: MockClock, parts: tuple[FakeServer, MemoryStateDB]) -> None:
    server, db = parts
    syncer = syncer_for(server, db)
    syncer.servers_contacted.set()
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        await trio.sleep(0.05)  # off the tick grid: no ties with the syncer's wake-ups
        syncer.add(alloc(status="pending"))  # first sight: typical
        await trio.sleep(1.0)
        assert server.received == [(1.0, ["a1:pending:"])]
        for i in range(20):  # a burst of typical changes: one send per second at most
            syncer.add(alloc(status="pending", description=str(i)))
            await trio.sleep(0.1)
        assert [t for t, _ in server.received] == [1.0, 2.0, 3.0]
        assert server.received[-1][1] == ["a1:pending:19"]
        syncer.add(alloc(status="running", description="19"))  # status change: urgent
        await trio.sleep(0.2)
        assert server.received[-1] == (3.2, ["a1:running:19"])
        syncer.add(alloc(status="running", description="19"))  # identical: never sent
        await trio.sleep(5)
        assert server.received[-1][0] == 3.2
        nursery.cancel_scope.cancel()


async def test_failed_send_is_retried_after_a_backoff_with_the_newest_update(
        autojump_clock: MockClock, parts: tuple[FakeServer, MemoryStateDB]) -> None:
    server, db = parts
    syncer = syncer_for(server, db)
    syncer.servers_contacted.set()
    server.fail = True
    async with trio.open_nursery() as nursery:
        await nursery.start(syncer.run)
        syncer.add(alloc(status="failed", description="first"))
        await trio.sleep(0.25)  # the first try failed at 0.2 s
        syncer.add(alloc(status="failed", description="newer"))
        server.fail = False
        await trio.sleep(12)
        ((when, updates),) = server.received
        assert 0.2 + 5 <= when < 0.2 + 10 + 0.2
        assert updates == ["a1:failed:newer"]
        assert syncer.calls == 2
        nursery.cancel_scope.cancel()


async def test_acknowledged_state_is_persisted_and_not_resent_after_restart(
        autojump_clock: MockClock, parts: tuple[FakeServer, MemoryStateDB]) -> None:
    server, db = parts
    first = syncer_for(server, db)
    first.servers_contacted.set()
    async with trio.open_nursery() as nursery:
        await nursery.start(first.run)
        first.add(alloc(status="complete"))
        await trio.sleep(1.1)
        nursery.cancel_scope.cancel()
    assert len(server.received) == 1
    persisted = await db.get_acknowledged_state("a1")
    assert persisted is not None
    assert persisted.client_status == "complete"

    second = syncer_for(server, db)  # a restarted agent
    second.load_acknowledged((await db.get_all_state()).acknowledged)
    second.servers_contacted.set()
    async with trio.open_nursery() as nursery:
        await nursery.start(second.run)
        second.add(alloc(status="complete"))
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    assert len(server.received) == 1
    assert second.calls == 0


class StepCounter(trio.abc.Instrument):
    """Counts the steps (wake-ups) of the tasks whose name contains `name`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.name in task.name:
            self.steps += 1


async def test_an_idle_syncer_does_not_wake_and_rejoins_the_tick_grid(
        autojump_clock: MockClock, parts: tuple[FakeServer, MemoryStateDB]) -> None:
    server, db = parts
    syncer = syncer_for(server, db)
    counter = StepCounter("AllocSyncer.run")
    trio.lowlevel.add_instrument(counter)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(syncer.run)
            syncer.add(alloc(status="pending"))  # pending, but no server contact yet
            await trio.sleep(30)
            syncer.servers_contacted.set()
            await trio.sleep(1.1)
            assert server.received == [(31.0, ["a1:pending:"])]
            steps = counter.steps
            await trio.sleep(600)  # nothing pending: not one wake-up
            assert counter.steps == steps
            syncer.add(alloc(status="running"))  # urgent: on the next tick of the grid
            await trio.sleep(0.25)
            assert server.received[-1] == (631.2, ["a1:running:"])
            nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(counter)
    # Before the contact and after the last send, the syncer slept on events.
    assert counter.steps < 30

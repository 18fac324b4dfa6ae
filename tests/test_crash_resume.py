"""Stops cut by an agent crash converge after the restart (layer 1: mock driver, in-memory
store that outlives the "crash", `autojump_clock`)."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import trio
from trio.testing import MockClock

from tests.runtime_support import job_alloc, stopped, unix_clock
from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client.allocsync import AllocSyncer
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.gc import AllocGarbageCollector, GCConfig
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.structs import Allocation
from yurt.store import MemoryStateDB

SERVICE = '''job "j" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      config {
        run_for    = "1h"
        kill_after = "2s"
      }
    }
  }
}'''


def new_client(db: MemoryStateDB, driver: MockDriver, reported: list[Allocation]) -> Client:
    return Client(AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                                    unix_clock=unix_clock),
                  EventBroker(), on_alloc_update=reported.append)


async def test_a_stop_cut_by_a_crash_resumes_on_restore_and_is_reported(
        autojump_clock: MockClock) -> None:
    db, driver = MemoryStateDB(), MockDriver(unix_clock)
    alloc = job_alloc(SERVICE)
    reported: list[Allocation] = []
    async with trio.open_nursery() as nursery:
        first = new_client(db, driver, reported)
        await nursery.start(first.run)
        first.sync_allocs([alloc])
        await trio.sleep(5)
        first.sync_allocs([stopped(alloc)])
        await trio.sleep(1)  # the stop takes 2 s: the agent dies in the middle of it
        nursery.cancel_scope.cancel()
    assert reported[-1].client_status == "running"

    reported.clear()
    server_copy = msgspec.structs.replace(stopped(alloc), client_status="running")
    async with trio.open_nursery() as nursery:
        second = new_client(db, driver, reported)
        await nursery.start(second.run)
        await second.restore_alloc(server_copy)
        second.sync_allocs([server_copy])
        await trio.sleep(10)
        assert [kind for _, kind, _ in driver.log] == ["start", "stop"]
        assert reported[-1].client_status == "complete"
        state = reported[-1].task_states["t"]
        assert state.state == "dead"
        assert state.events[-1].type == "Terminated"  # Nomad's step 7: no Killed event
        nursery.cancel_scope.cancel()


async def test_a_stopped_alloc_the_client_has_no_state_for_is_reported_terminal(
        autojump_clock: MockClock) -> None:
    # The client finished the stop and deleted the allocation's state, and died before its
    # last update reached the server: the server still says desired stop, client running.
    db, driver = MemoryStateDB(), MockDriver(unix_clock)
    server_copy = msgspec.structs.replace(
        stopped(job_alloc(SERVICE)), client_status="running",
        desired_description="alloc is being updated")
    reported: list[Allocation] = []
    async with trio.open_nursery() as nursery:
        client = new_client(db, driver, reported)
        await nursery.start(client.run)
        client.sync_allocs([server_copy])
        await trio.sleep(5)
        assert reported, "the client must tell the server how the allocation ended"
        assert reported[-1].client_status == "complete"
        assert reported[-1].task_states["t"].state == "dead"
        assert driver.log == []  # a stopped allocation never starts
        # Once the server has it, nothing more happens for it.
        done = msgspec.structs.replace(server_copy, client_status="complete",
                                       alloc_modify_index=server_copy.alloc_modify_index + 1)
        client.sync_allocs([done])
        await trio.sleep(5)
        assert driver.log == []
        nursery.cancel_scope.cancel()


async def test_the_client_forgets_collected_allocations_the_server_is_done_with(
        autojump_clock: MockClock) -> None:
    db, driver = MemoryStateDB(), MockDriver(unix_clock)
    alloc = job_alloc(SERVICE.replace('"1h"', '"1s"').replace('job "j" {',
                                                               'job "j" {\n type = "batch"'))
    reported: list[Allocation] = []
    async with trio.open_nursery() as nursery:
        client = new_client(db, driver, reported)
        await nursery.start(client.run)
        client.sync_allocs([alloc])
        await trio.sleep(5)
        assert reported[-1].client_status == "complete"
        await client.destroy_alloc(alloc.id)  # collected
        assert client.collected == {alloc.id}
        client.sync_allocs([msgspec.structs.replace(alloc, client_status="running")])
        assert client.collected == {alloc.id}  # the final update is still on its way
        client.sync_allocs([msgspec.structs.replace(alloc, client_status="complete")])
        assert client.collected == set()
        client.sync_allocs([])
        assert client.runners == {}
        assert [kind for _, kind, _ in driver.log] == ["start"]  # never ran again
        nursery.cancel_scope.cancel()


async def test_an_allocation_is_collected_only_once_the_server_knows_it_ended(
        autojump_clock: MockClock) -> None:
    # Deleting the state of an allocation whose end the server never heard of would, after
    # a crash, leave the server with a running allocation this node knows nothing of (a
    # batch job would run again). The collector waits for the acknowledgement.
    db, driver = MemoryStateDB(), MockDriver(unix_clock)
    server_up = False
    sent: list[Allocation] = []

    async def send(batch: list[Allocation]) -> None:
        await trio.lowlevel.checkpoint()
        if not server_up:
            raise ConnectionError("server unreachable")
        sent.extend(batch)

    async def usage(path: Path) -> tuple[float, float]:
        await trio.lowlevel.checkpoint()
        return 0.0, 0.0

    gc: AllocGarbageCollector | None = None
    syncer = AllocSyncer(send, db, unix_clock=unix_clock, rng=random.Random(1),
                         on_acknowledged=lambda: gc.wake() if gc else None)

    def updated(alloc: Allocation) -> None:
        syncer.add(alloc)
        if alloc.client_status == "complete" and gc is not None:
            gc.mark(alloc.id)

    client = Client(AllocRunnerConfig(state_db=db, drivers={"mock_driver": driver},
                                      unix_clock=unix_clock), EventBroker(),
                    on_alloc_update=updated)
    gc = AllocGarbageCollector(client.destroy_alloc, lambda: len(client.runners), Path("/"),
                               GCConfig(max_allocs=0), usage=usage,
                               ready=syncer.acknowledged_terminal)
    batch = job_alloc(SERVICE.replace('"1h"', '"1s"').replace('job "j" {',
                                                               'job "j" {\n type = "batch"'))
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        await nursery.start(syncer.run)
        await nursery.start(gc.run)
        syncer.servers_contacted.set()
        client.sync_allocs([batch])
        await trio.sleep(30)
        assert gc.queued == [batch.id]  # complete, but the server has not heard it
        (kept,), _ = await db.get_all_allocations()
        assert kept.client_status == "complete"
        server_up = True
        await trio.sleep(30)
        assert sent[-1].client_status == "complete"
        assert await db.get_all_allocations() == ([], {})  # now collected
        assert gc.tracked == 0
        nursery.cancel_scope.cancel()

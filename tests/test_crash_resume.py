"""Stops cut by an agent crash converge after the restart (layer 1: mock driver, in-memory
store that outlives the "crash", `autojump_clock`)."""

from __future__ import annotations

import msgspec
import trio
from trio.testing import MockClock

from tests.runtime_support import job_alloc, stopped, unix_clock
from yurt.runtime.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client import Client
from yurt.runtime.drivers.mock import MockDriver
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

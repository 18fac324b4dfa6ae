"""An idle node costs no wake-ups per task or per allocation (layer 1, mock clock).

The runtime core with its services (client, alloc sync, garbage collector, device manager)
runs N allocations of mock tasks that run for a day. Once everything is running and synced,
ten virtual minutes pass: every task step in that window is a wake-up the idle agent pays
for. Their number must not depend on N, and stays a fixed few (the GC's 60 s pass).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import trio
from trio.testing import MockClock

from tests.runtime_support import unix_clock
from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client.allocsync import AllocSyncer
from yurt.runtime.client.client import Client
from yurt.runtime.client.devices.fake import FakeDevicePlugin
from yurt.runtime.client.devices.manager import DeviceManager
from yurt.runtime.client.devices.protocol import DeviceGroup, DeviceInstance
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.gc import AllocGarbageCollector
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.structs import Node
from yurt.store import MemoryStateDB

JOB = """
job "idle" {
  group "g" {
    count = %d
    task "main" {
      driver = "mock_driver"
      config { run_for = "24h" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
    task "side" {
      driver = "mock_driver"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config { run_for = "24h" }
      resources {
        cpu    = 1
        memory = 10
      }
    }
  }
}
"""


class WakeUps(trio.abc.Instrument):
    """Task steps by task name, while `counting`."""

    def __init__(self) -> None:
        self.counting = False
        self.steps: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.counting:
            self.steps[task.name] += 1


async def idle_wake_ups(n: int) -> Counter[str]:
    broker = EventBroker()
    server = LocalServer(Node(id="idle-node", name="idle"), broker)
    db = MemoryStateDB()
    syncer = AllocSyncer(server.update_allocs, db, unix_clock=unix_clock,
                         rng=random.Random(1))
    syncer.servers_contacted.set()

    async def no_usage(path: Path) -> tuple[float, float]:
        await trio.lowlevel.checkpoint()
        return 0.0, 0.0

    async def no_destroy(alloc_id: str) -> None:
        await trio.lowlevel.checkpoint()

    client = Client(AllocRunnerConfig(state_db=db, drivers={"mock_driver": MockDriver(
        unix_clock)}, unix_clock=unix_clock), broker, on_alloc_update=syncer.add)
    gc = AllocGarbageCollector(no_destroy,
                               lambda: len(client.runners), Path("/nonexistent"),
                               usage=no_usage)
    devices = DeviceManager([FakeDevicePlugin([DeviceGroup(
        vendor="nvidia", type="gpu", name="T4", instances=[DeviceInstance(id="GPU-0")])])])
    wake_ups = WakeUps()
    trio.lowlevel.add_instrument(wake_ups)
    try:
        async with trio.open_nursery() as nursery:
            for service in (client.run, syncer.run, gc.run, devices.run):
                await nursery.start(service)
            for alloc in (await server.register_job(parse_job(JOB % n))).placed:
                client.add_alloc(alloc)
            await trio.sleep(60)  # everything started, every update sent
            assert all(r.alloc_state().client_status == "running"
                       for r in client.runners.values())
            assert len(syncer.pending) == 0
            wake_ups.counting = True
            await trio.sleep(600)
            wake_ups.counting = False
            nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(wake_ups)
    del wake_ups.steps[trio.lowlevel.current_task().name]  # this test's own sleep
    return wake_ups.steps


async def test_idle_wake_ups_do_not_grow_with_the_number_of_tasks(
        autojump_clock: MockClock) -> None:
    few = await idle_wake_ups(2)
    many = await idle_wake_ups(40)
    # Only the GC's pass once a minute (20 steps: its wake-up and its usage check; one pass
    # more or less as its timer's phase falls in the window): no runner, sync or device task.
    assert set(few) == set(many) == {"yurt.runtime.client.gc.AllocGarbageCollector.run"}
    assert all(abs(many[name] - few[name]) <= 2 for name in few), (few, many)
    assert sum(many.values()) <= 22, many

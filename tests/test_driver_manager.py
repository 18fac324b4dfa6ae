"""The driver manager under the mock clock (layer 1): health reaches the node, task events
become `Driver` task events, dead plugins are re-dispensed with backoff."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import trio
from trio.testing import MockClock

from tests.runtime_support import harness, job_alloc, types, unix_clock
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.drivers.protocol import Fingerprint
from yurt.runtime.client.pluginmanager.drivers import DriverManager, DriverTaskEvent, enabled
from yurt.runtime.structs import DriverInfo
from yurt.store import MemoryStateDB


class Scripted(MockDriver):
    """Fingerprints follow a script; `"raise"` makes the stream fail."""

    def __init__(self, script: list[str]) -> None:
        super().__init__(unix_clock)
        self.script = script
        self.events: trio.MemorySendChannel[DriverTaskEvent]
        self._events_out: trio.MemoryReceiveChannel[DriverTaskEvent]
        self.events, self._events_out = trio.open_memory_channel(10)

    async def fingerprint(self) -> AsyncIterator[Fingerprint]:  # type: ignore[override]
        while self.script:
            step = self.script.pop(0)
            await trio.sleep(10)
            if step == "raise":
                raise RuntimeError("plugin crashed")
            yield Fingerprint(step, f"now {step}")  # type: ignore[arg-type]
        await trio.sleep_forever()

    async def task_events(self) -> AsyncIterator[DriverTaskEvent]:
        async for event in self._events_out:
            yield event


async def test_health_transitions_reach_the_node_and_a_crash_is_redispensed(
        autojump_clock: MockClock) -> None:
    driver = Scripted(["healthy", "unhealthy", "undetected", "raise", "healthy"])
    seen: list[tuple[float, bool, bool, str]] = []

    def on_info(name: str, info: DriverInfo) -> None:
        seen.append((trio.current_time(), info.detected, info.healthy, info.health_description))

    manager = DriverManager({"scripted": lambda config: driver}, state_db=MemoryStateDB(),
                            unix_clock=unix_clock, on_info=on_info)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await trio.sleep(100)
        nursery.cancel_scope.cancel()
    assert seen == [
        (10.0, True, True, "now healthy"),
        (20.0, True, False, "now unhealthy"),
        (30.0, False, False, "now undetected"),
        (40.0, True, False, "failed to fingerprint driver: plugin crashed"),
        (55.0, True, True, "now healthy"),  # re-dispensed 5 s later, fingerprinted 10 s on
    ]
    assert manager.dispensed["scripted"] == 2


async def test_task_events_become_driver_task_events(autojump_clock: MockClock) -> None:
    driver = Scripted(["healthy"])
    async with harness(driver=driver) as h:
        ar = h.runner(job_alloc('''job "j" {
  group "g" {
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}'''))

        async def route(event: DriverTaskEvent) -> None:
            await ar.task_runners[event.task].driver_event(event.message, event.timestamp,
                                                           event.annotations)

        manager = DriverManager({"mock_driver": lambda config: driver},
                                state_db=MemoryStateDB(), unix_clock=unix_clock,
                                route_event=route)
        await h.nursery.start(manager.run)
        h.nursery.start_soon(ar.run)
        await trio.sleep(1)
        await driver.events.send(DriverTaskEvent(alloc_id="a1", task="t",
                                                 message="pulled image", timestamp=unix_clock(),
                                                 annotations={"image": "busybox"}))
        await trio.sleep(1)
        tr = ar.task_runners["t"]
        assert types(tr)[-1] == "Driver"
        event = tr.state.events[-1]
        assert (event.display_message, event.driver_message) == ("pulled image",
                                                                 "pulled image")
        assert event.details == {"driver_message": "pulled image", "image": "busybox"}
        h.nursery.cancel_scope.cancel()


def test_allow_and_block_lists() -> None:
    names = ["docker", "mock_driver", "raw_exec"]
    assert enabled(names, (), ()) == names
    assert enabled(names, ("raw_exec",), ()) == ["raw_exec"]
    assert enabled(names, (), ("mock_driver",)) == ["docker", "raw_exec"]


async def test_a_disabled_driver_is_reported_undetected(autojump_clock: MockClock) -> None:
    from yurt.runtime.client.drivers.rawexec import plugin

    infos: dict[str, DriverInfo] = {}
    config: dict[str, dict[str, Any]] = {"raw_exec": {"enabled": False}}
    manager = DriverManager({"raw_exec": plugin}, state_db=MemoryStateDB(),
                            unix_clock=unix_clock, plugin_config=config,
                            on_info=lambda name, info: infos.__setitem__(name, info))
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        nursery.cancel_scope.cancel()
    assert (infos["raw_exec"].detected, infos["raw_exec"].health_description) == (
        False, "raw_exec is disabled")
    assert "raw_exec" not in manager.drivers


class Stateful(MockDriver):
    def __init__(self) -> None:
        super().__init__(unix_clock)
        self.restored: dict[str, Any] | None = None

    def plugin_state(self) -> dict[str, Any]:
        return {"epoch": 7}

    def restore_plugin_state(self, state: dict[str, Any]) -> None:
        self.restored = state


async def test_driver_plugin_state_is_persisted_and_handed_back(
        autojump_clock: MockClock) -> None:
    db = MemoryStateDB()
    first = Stateful()
    manager = DriverManager({"stateful": lambda config: first}, state_db=db,
                            unix_clock=unix_clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        nursery.cancel_scope.cancel()
    saved = await db.get_driver_plugin_state()
    assert saved is not None
    assert saved.internal_state == {"stateful": {"epoch": 7}}
    second = Stateful()
    again = DriverManager({"stateful": lambda config: second}, state_db=db,
                          unix_clock=unix_clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(again.run)
        nursery.cancel_scope.cancel()
    assert second.restored == {"epoch": 7}

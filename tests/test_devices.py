"""Device plugins, the device manager and the device hook under the mock clock (layer 1)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest
import trio
from trio.testing import MockClock

from tests.runtime_support import RecoverFailsDriver, job_alloc, types, unix_clock
from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.devices.fake import ENV, FakeDevicePlugin
from yurt.runtime.client.devices.manager import STATS_TIMEOUT, DeviceManager
from yurt.runtime.client.devices.protocol import (
    DeviceGroup,
    DeviceInstance,
    DevicePluginError,
    InstanceStats,
    Reservation,
)
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.structs import (
    AllocatedDevice,
    AllocatedTaskResources,
    Allocation,
    TaskDeviceNode,
)
from yurt.store import MemoryStateDB


def gpus(*ids: str) -> list[DeviceGroup]:
    return [DeviceGroup(vendor="nvidia", type="gpu", name="T4",
                        instances=[DeviceInstance(id=i) for i in ids])]


class Broken:
    """A plugin that misbehaves in a chosen way."""

    def __init__(self, name: str, how: str) -> None:
        self._name = name
        self.how = how

    @property
    def name(self) -> str:
        return self._name

    async def fingerprint(self) -> AsyncIterator[list[DeviceGroup]]:
        if self.how == "hang":
            await trio.sleep_forever()
        if self.how == "raise":
            raise RuntimeError("driver library crashed")
        yield [DeviceGroup(vendor="acme", type="fpga", name="x",
                           instances=[DeviceInstance(id="")])]  # invalid: no ID

    async def reserve(self, ids: list[str]) -> Reservation:
        raise AssertionError("never reserved")

    async def stats(self) -> dict[str, InstanceStats]:
        raise RuntimeError("no stats")


@pytest.mark.parametrize("how", ["hang", "raise", "invalid"])
async def test_a_failing_plugin_does_not_take_the_others_down(
        autojump_clock: MockClock, how: str) -> None:
    changes: list[list[str]] = []
    fake = FakeDevicePlugin(gpus("GPU-0", "GPU-1"))
    manager = DeviceManager([Broken("bad", how), fake], first_fingerprint_timeout=10,
                            on_change=lambda g: changes.append(
                                [i.id for grp in g for i in grp.instances]))
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        assert [i.id for g in manager.all_groups() for i in g.instances] == ["GPU-0", "GPU-1"]
        assert "bad" in manager.errors
        assert changes[-1] == ["GPU-0", "GPU-1"]
        fake.set_health("GPU-1", False, "overheating")
        await trio.sleep(1)
        (group,) = manager.all_groups()
        assert [(i.id, i.healthy) for i in group.instances] == [("GPU-0", True),
                                                                ("GPU-1", False)]
        nursery.cancel_scope.cancel()
    if how == "hang":
        assert manager.errors["bad"] == "no fingerprint within 10s"
    elif how == "invalid":
        assert "has no ID" in manager.errors["bad"]
    else:
        assert "driver library crashed" in manager.errors["bad"]


async def test_reserve_goes_to_the_owner_of_every_id(autojump_clock: MockClock) -> None:
    a = FakeDevicePlugin(gpus("GPU-0", "GPU-1"), name="a")
    b = FakeDevicePlugin([DeviceGroup(vendor="acme", type="fpga", name="x",
                                      instances=[DeviceInstance(id="F-0")])], name="b")
    manager = DeviceManager([a, b])
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        reservation = await manager.reserve("nvidia/gpu/T4", ["GPU-1", "GPU-0"])
        assert reservation.envs == {ENV: "GPU-1,GPU-0"}
        assert a.reserved == [["GPU-1", "GPU-0"]]
        assert b.reserved == []
        with pytest.raises(DevicePluginError, match="with all those IDs"):
            await manager.reserve("nvidia/gpu/T4", ["GPU-0", "GPU-9"])
        with pytest.raises(DevicePluginError, match="no plugin has device group"):
            await manager.reserve("amd/gpu/MI", ["GPU-0"])
        nursery.cancel_scope.cancel()


class CountedStats(FakeDevicePlugin):
    """A fake plugin that records when its stats are read, and can fail or hang."""

    def __init__(self, groups: list[DeviceGroup], *, name: str, how: str = "") -> None:
        super().__init__(groups, name=name)
        self.how = how
        self.calls: list[float] = []

    async def stats(self) -> dict[str, InstanceStats]:
        self.calls.append(trio.current_time())
        if self.how == "raise":
            raise RuntimeError("busy")
        if self.how == "hang":
            await trio.sleep_forever()
        return await super().stats()


async def test_stats_are_read_only_when_asked_and_cached_briefly(
        autojump_clock: MockClock) -> None:
    fake = CountedStats(gpus("GPU-0", "GPU-1"), name="fake")
    manager = DeviceManager([fake], stats_interval=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        await trio.sleep(600)
        assert fake.calls == []  # an idle node never asks its plugins
        assert manager.stats() == {}
        await manager.refresh_stats()
        assert set(manager.stats()) == {"GPU-0", "GPU-1"}
        assert set(manager.stats({"GPU-1"})) == {"GPU-1"}
        await trio.sleep(0.5)
        await manager.refresh_stats()  # fresh enough: served from the cache
        assert len(fake.calls) == 1
        await trio.sleep(0.5)
        async with trio.open_nursery() as askers:  # concurrent askers: one read
            for _ in range(3):
                askers.start_soon(manager.refresh_stats)
        assert len(fake.calls) == 2
        nursery.cancel_scope.cancel()


async def test_a_failing_stats_call_backs_off_and_keeps_the_others(
        autojump_clock: MockClock) -> None:
    fake = CountedStats(gpus("GPU-0", "GPU-1"), name="fake")
    flaky = CountedStats(gpus("GPU-7"), name="flaky", how="raise")
    manager = DeviceManager([fake, flaky], stats_interval=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        for _ in range(40):  # someone asks every second
            await manager.refresh_stats()
            await trio.sleep(1)
        assert set(manager.stats()) == {"GPU-0", "GPU-1"}
        assert len(fake.calls) == 40
        gaps = [round(b - a) for a, b in itertools.pairwise(flaky.calls)]
        assert gaps[:3] == [5, 10, 20]  # 5 s doubling
        nursery.cancel_scope.cancel()


async def test_a_hanging_stats_call_is_cut_off_and_backs_off(
        autojump_clock: MockClock) -> None:
    fake = CountedStats(gpus("GPU-0"), name="fake")
    stuck = CountedStats(gpus("GPU-8"), name="stuck", how="hang")
    manager = DeviceManager([fake, stuck], stats_interval=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        start = trio.current_time()
        await manager.refresh_stats()
        assert trio.current_time() - start == STATS_TIMEOUT
        assert set(manager.stats()) == {"GPU-0"}
        await trio.sleep(1)
        start = trio.current_time()
        await manager.refresh_stats()  # the stuck plugin is not asked during its backoff
        assert trio.current_time() == start
        assert len(stuck.calls) == 1
        assert len(fake.calls) == 2
        nursery.cancel_scope.cancel()


class DiesOnCue:
    """A plugin with one device that serves stats until `die` is set, then fails."""

    def __init__(self) -> None:
        self.die = trio.Event()
        self.stats_calls = 0

    @property
    def name(self) -> str:
        return "dying"

    async def fingerprint(self) -> AsyncIterator[list[DeviceGroup]]:
        yield gpus("GPU-9")
        await self.die.wait()
        raise RuntimeError("device lost")

    async def reserve(self, ids: list[str]) -> Reservation:
        raise AssertionError("never reserved")

    async def stats(self) -> dict[str, InstanceStats]:
        await trio.lowlevel.checkpoint()
        self.stats_calls += 1
        return {"GPU-9": InstanceStats(summary={"utilization_percent": 1.0})}


async def test_a_plugin_cut_off_after_its_stats_were_read_loses_devices_and_stats(
        autojump_clock: MockClock) -> None:
    dying = DiesOnCue()
    fake = FakeDevicePlugin([DeviceGroup(vendor="acme", type="fpga", name="x",
                                         instances=[DeviceInstance(id="F-0")])])
    changes: list[list[str]] = []
    manager = DeviceManager([dying, fake], stats_interval=1, on_change=lambda g: changes.append(
        [i.id for grp in g for i in grp.instances]))
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        await manager.refresh_stats()
        assert set(manager.stats()) == {"F-0", "GPU-9"}
        dying.die.set()
        await trio.sleep(1)
        assert manager.errors == {"dying": "RuntimeError: device lost"}
        assert [i.id for g in manager.all_groups() for i in g.instances] == ["F-0"]
        assert changes[-1] == ["F-0"]
        assert set(manager.stats()) == {"F-0"}  # its cached stats went with it
        await trio.sleep(5)
        await manager.refresh_stats()  # and it is never asked again
        assert dying.stats_calls == 1
        nursery.cancel_scope.cancel()


async def test_nvidia_plugin_without_a_gpu_reports_nothing_and_no_error(
        autojump_clock: MockClock) -> None:
    from yurt.runtime.client.devices.nvidia import NvidiaDevicePlugin

    plugin = NvidiaDevicePlugin()
    manager = DeviceManager([plugin])
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        nursery.cancel_scope.cancel()
    if not plugin.detected:  # this machine: no NVML, or no GPU
        assert manager.all_groups() == []
        assert manager.errors == {}


def test_device_requests_match_by_type_vendor_type_or_full_name() -> None:
    from yurt.runtime.structs import NodeDeviceResource

    group = NodeDeviceResource(vendor="nvidia", type="gpu", name="T4")
    assert group.matches("gpu")
    assert group.matches("nvidia/gpu")
    assert group.matches("nvidia/gpu/T4")
    assert not group.matches("amd/gpu")
    assert not group.matches("nvidia/gpu/A100")
    assert not group.matches("fpga")


def test_computed_class_follows_devices_and_ignores_unique_attributes() -> None:
    from yurt.runtime.client.fingerprint import computed_class
    from yurt.runtime.structs import Node, NodeDeviceResource, NodeResources

    base = Node(id="a", attributes={"kernel.name": "linux", "unique.hostname": "one"})
    twin = Node(id="b", attributes={"kernel.name": "linux", "unique.hostname": "two"})
    assert computed_class(base) == computed_class(twin)
    assert computed_class(base).startswith("v1:")
    with_gpu = Node(id="c", attributes=dict(base.attributes), node_resources=NodeResources(
        devices=[NodeDeviceResource(vendor="nvidia", type="gpu", name="T4")]))
    assert computed_class(with_gpu) != computed_class(base)


GPU_JOB = '''job "j" {
  type = "%s"
  group "g" {
    restart {
      attempts = 1
      delay    = "5s"
      interval = "1h"
      mode     = "fail"
    }
    task "t" {
      driver = "mock_driver"
      config { %s }
    }
  }
}'''


def gpu_alloc(job_type: str, config: str) -> Allocation:
    alloc = job_alloc(GPU_JOB % (job_type, config))
    alloc.task_resources = {"t": AllocatedTaskResources(devices=[AllocatedDevice(
        vendor="nvidia", type="gpu", name="T4", device_ids=["GPU-1"])])}
    return alloc


EXPECTED_NODES = [TaskDeviceNode(task_path="/dev/fake/GPU-1", host_path="/dev/fake/GPU-1")]


async def test_the_driver_gets_the_reserved_env_and_device_nodes_on_every_start(
        autojump_clock: MockClock) -> None:
    plugin = FakeDevicePlugin(gpus("GPU-0", "GPU-1"))
    manager = DeviceManager([plugin])
    driver = MockDriver(unix_clock)
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"mock_driver": driver},
                               unix_clock=unix_clock, device_manager=manager)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        ar = AllocRunner(gpu_alloc("batch", 'run_for = "1s"\n exit_code = 1'), config,
                         nursery=nursery)
        await ar.run()
        nursery.cancel_scope.cancel()
    assert types(ar.task_runners["t"]).count("Started") == 2  # failed once, restarted
    assert len(driver.started) == 2
    for started in driver.started:
        assert started.env[ENV] == "GPU-1"
        assert started.devices == EXPECTED_NODES
        assert started.mounts == []
    assert plugin.reserved == [["GPU-1"]]  # the restart reused the finished hook's answer


async def test_a_restored_task_that_must_start_again_keeps_its_device_nodes(
        autojump_clock: MockClock) -> None:
    plugin = FakeDevicePlugin(gpus("GPU-0", "GPU-1"))
    manager = DeviceManager([plugin])
    db = MemoryStateDB()
    alloc = gpu_alloc("service", 'run_for = "1h"')
    first_driver, second_driver = MockDriver(unix_clock), RecoverFailsDriver()
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await manager.first_fingerprints.wait()
        first = AllocRunner(alloc, AllocRunnerConfig(
            state_db=db, drivers={"mock_driver": first_driver}, unix_clock=unix_clock,
            device_manager=manager), nursery=nursery)
        nursery.start_soon(first.run)
        await trio.sleep(10)
        first.shutdown()
        await first.shutdown_done.wait()

        second = AllocRunner(alloc, AllocRunnerConfig(
            state_db=db, drivers={"mock_driver": second_driver}, unix_clock=unix_clock,
            device_manager=manager), nursery=nursery)
        await second.restore()
        nursery.start_soon(second.run)
        await trio.sleep(10)
        assert types(second.task_runners["t"])[-2:] == ["Failed Restoring Task", "Started"]
        nursery.cancel_scope.cancel()
    assert [c.devices for c in first_driver.started] == [EXPECTED_NODES]
    assert [c.devices for c in second_driver.started] == [EXPECTED_NODES]
    assert second_driver.started[0].env[ENV] == "GPU-1"
    assert plugin.reserved == [["GPU-1"]]

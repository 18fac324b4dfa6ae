"""A restarted agent answers its API at once while allocations re-attach behind it (layer 2).

The mock driver re-attaches its tasks across agents (it keeps what is left of `run_for`), and a
wrapper holds its `recover_task` on an event: while held, the allocation is *restoring*. What
the API shows then, and that a stop sent meanwhile waits for the restore instead of racing it
(without the wait, the server change would give the allocation a second runner), are checked
here; `runtime/client/restore.py` explains the design.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import httpx2
import trio

from tests.agent_support import mock_job
from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.drivers.protocol import Driver
from yurt.runtime.client.restore import RESTORING
from yurt.runtime.structs import TaskHandle


class HeldRecovery:
    """The mock driver, with `recover_task` waiting for `release` (and counting callers)."""

    def __init__(self, release: trio.Event) -> None:
        self.inner = MockDriver(time.time_ns)
        self.release = release
        self.recovering = 0
        self.all_held = trio.Event()  # both allocations' tasks are in `recover_task`

    async def recover_task(self, handle: TaskHandle) -> None:
        self.recovering += 1
        if self.recovering == 2:
            self.all_held.set()
        await self.release.wait()
        await self.inner.recover_task(handle)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def allocations(client: httpx2.AsyncClient) -> list[dict[str, Any]]:
    return cast(list[dict[str, Any]], (await client.get("/v1/allocations")).json())


async def until(client: httpx2.AsyncClient, ok: Any) -> list[dict[str, Any]]:
    """The allocations, once `ok(allocations)` holds (bounded by the caller)."""
    while True:  # an HTTP client learns of a change only by asking again
        allocs = await allocations(client)
        if ok(allocs):
            return allocs
        await trio.sleep(0.02)


async def test_api_answers_while_restoring_and_a_stop_waits_for_the_restore(
        tmp_path: Path) -> None:
    drivers: list[MockDriver | HeldRecovery] = []
    release = trio.Event()

    def plain(config: dict[str, Any]) -> Driver:
        drivers.append(MockDriver(time.time_ns))
        return drivers[-1]

    def held(config: dict[str, Any]) -> Driver:
        drivers.append(HeldRecovery(release))
        return cast(Driver, drivers[-1])

    def config(factory: Any) -> AgentConfig:
        return AgentConfig(data_dir=tmp_path, port=0, driver_factories={"mock_driver": factory},
                           device_wait=0)

    with trio.fail_after(30):
        first = Agent(config(plain))
        async with trio.open_nursery() as nursery:
            address = await nursery.start(first.run)
            async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                submitted = await client.post("/v1/jobs", json=mock_job("held", 2))
                assert submitted.status_code == 200
                await until(client, lambda a: len(a) == 2 and all(
                    x["ClientStatus"] == "running" for x in a))
            first.stop()  # tasks are left running for the next agent to re-attach

        second = Agent(config(held))
        async with trio.open_nursery() as nursery:
            # Returns only once the API serves: before the change, not while a restore hangs.
            address = await nursery.start(second.run)
            async with httpx2.AsyncClient(base_url=address, timeout=20) as client:
                driver = drivers[-1]
                assert isinstance(driver, HeldRecovery)
                allocs = await allocations(client)
                assert len(allocs) == 2
                for alloc in allocs:
                    # Nomad's fields stay valid: the last status the server heard.
                    assert alloc["ClientStatus"] == "running"
                    assert alloc["ClientDescription"] == RESTORING
                one = allocs[0]["ID"]
                single = (await client.get(f"/v1/allocation/{one}")).json()
                assert single["ClientDescription"] == RESTORING
                agent_self = (await client.get("/v1/agent/self")).json()
                assert agent_self["stats"]["client"]["restoring_allocations"] == "2"
                assert second.client.runners == {}  # nothing can act on a half restore

                # A stop while restoring is queued behind the restore.
                stopped = await client.post(f"/v1/allocation/{one}/stop")
                assert stopped.status_code == 200
                await driver.all_held.wait()
                assert second.client.runners == {}
                assert driver.inner.started == []

                release.set()

                def replaced(listed: list[dict[str, Any]]) -> bool:
                    # Nomad's alloc stop: stopped, and a replacement placed that runs.
                    by_id = {x["ID"]: x for x in listed}
                    after = by_id[one]["NextAllocation"]
                    return (by_id[one]["ClientStatus"] == "complete" and after in by_id
                            and by_id[after]["ClientStatus"] == "running")

                allocs = await until(client, replaced)
                replacement = next(a for a in allocs if a["ID"] == one)["NextAllocation"]
                other = next(a for a in allocs if a["ID"] not in (one, replacement))
                assert other["ClientStatus"] == "running"
                assert other["ClientDescription"] != RESTORING
                agent_self = (await client.get("/v1/agent/self")).json()
                assert agent_self["stats"]["client"]["restoring_allocations"] == "0"
                # Re-attached and stopped, never started again: the one start is the
                # replacement's; one runner per allocation.
                assert [c.alloc_id for c in driver.inner.started] == [replacement]
                assert set(second.client.runners) == {a["ID"] for a in allocs}
                assert sorted((kind, task_id.split("/")[0])
                              for _, kind, task_id in driver.inner.log) == [
                    ("start", replacement), ("stop", one)]
            second.stop()

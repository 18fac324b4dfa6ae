"""The agent freezes its long-lived heap after the restore and after a settled burst of new
allocations, and not while they keep changing (layer 2: a real agent, mock tasks)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.agent_support import Running, mock_job, running_agent
from yurt.runtime.agent import agent as agent_module

pytestmark = pytest.mark.usefixtures("unfrozen", "small_bursts")


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield None
    gc.unfreeze()


@pytest.fixture
def small_bursts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three new allocations make a burst, settled after 0.3 s without news."""
    monkeypatch.setattr(agent_module, "BURST_ALLOCS", 3)
    monkeypatch.setattr(agent_module, "BURST_QUIET", 0.3)


async def restored(run: Running) -> None:
    """Wait for the freeze after the restore, which goes on behind the API."""
    if run.agent.freezes == 0:
        await run.agent.frozen.wait()


async def test_a_settled_burst_is_frozen_once(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as run:
            await restored(run)
            assert run.agent.freezes == 1  # after the (empty) restore
            small = await run.client.post("/v1/jobs", json=mock_job("small", 2))
            assert small.status_code == 200
            burst = await run.client.post("/v1/jobs", json=mock_job("burst", 3))
            assert burst.status_code == 200
            await run.agent.frozen.wait()  # 2 + 3 new allocations: a burst
            assert run.agent.freezes == 2


async def test_a_wave_of_destroys_thaws_what_the_destroyed_allocations_left_frozen(
        tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with running_agent(tmp_path) as run:
            await restored(run)
            burst = await run.client.post("/v1/jobs", json=mock_job("burst", 3))
            assert burst.status_code == 200
            await run.agent.frozen.wait()
            assert run.agent.last_freeze is not None
            assert not run.agent.last_freeze.thawed
            assert (await run.client.delete("/v1/job/burst")).status_code == 200
            # A client GC destroys the three once the server knows they ended (under load,
            # perhaps not all in one pass: a freeze may follow the first ones' destroys).
            while run.agent.freezes == 2 or run.agent.client.runners:
                assert (await run.client.put("/v1/client/gc")).status_code == 200
                with trio.move_on_after(0.5):
                    await run.agent.frozen.wait()
            assert not run.agent.client.runners
            assert run.agent.last_freeze is not None
            assert run.agent.last_freeze.thawed

"""The agent's API answers before its state is loaded (layer 2).

After a restart the agent binds its API first and loads behind it (stores, drivers' first
fingerprints, the server's state, the restore snapshot). A driver whose first fingerprint is
held keeps the load from finishing: meanwhile `/v1/agent/self` must answer, saying the state is
not loaded yet, and a request that needs the state must wait for it rather than fail.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import httpx2
import trio
import trio.testing

from yurt.runtime.agent.agent import Agent, AgentConfig
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.client.drivers.protocol import Driver, Fingerprint


class HeldFingerprint:
    """The mock driver, with its first fingerprint held until `release`."""

    def __init__(self, release: trio.Event) -> None:
        self.inner = MockDriver(time.time_ns)
        self.release = release

    async def fingerprint(self) -> AsyncIterator[Fingerprint]:
        await self.release.wait()
        async for fp in self.inner.fingerprint():
            yield fp

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_the_api_answers_while_the_state_still_loads(tmp_path: Path) -> None:
    release = trio.Event()

    def held(config: dict[str, Any]) -> Driver:
        return cast(Driver, HeldFingerprint(release))

    agent = Agent(AgentConfig(data_dir=tmp_path, port=0, device_wait=20,
                              driver_factories={"mock_driver": held}))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.run)
            await agent.api_up.wait()
            async with httpx2.AsyncClient(base_url=agent.address, timeout=20) as client:
                answer = await client.get("/v1/agent/self")
                assert answer.status_code == 200
                assert answer.json()["stats"]["client"]["state_loaded"] == "false"
                assert not agent.ready.is_set()  # still held: answered before the load

                jobs: list[httpx2.Response] = []

                async def list_jobs() -> None:
                    jobs.append(await client.get("/v1/jobs"))

                async with trio.open_nursery() as requests:
                    requests.start_soon(list_jobs)
                    # Sent and waiting in the agent (not refused) before the load goes on.
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert jobs == []
                    release.set()
                assert agent.ready.is_set()
                assert jobs[0].status_code == 200
                assert jobs[0].json() == []
                loaded = (await client.get("/v1/agent/self")).json()
                assert loaded["stats"]["client"]["state_loaded"] == "true"
            agent.stop()


async def test_an_open_event_stream_does_not_hold_the_agents_stop(tmp_path: Path) -> None:
    """The API is cut once the tasks are shut down, before the state stores close: an event
    stream open at the stop must not keep the server in its graceful shutdown, which waits
    5 s for open connections while handlers could still run against closed stores."""
    agent = Agent(AgentConfig(data_dir=tmp_path, port=0, dev_mode=True))
    with trio.fail_after(30):
        await _stop_with_a_stream_open(agent)


async def _stop_with_a_stream_open(agent: Agent) -> None:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(agent.run)
        host, port = address.removeprefix("http://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(b"GET /v1/event/stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head = b""
            with trio.fail_after(20):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive_some(4096)
            assert head.startswith(b"HTTP/1.1 200")
            # Well under the server's 5 s grace: the stop does not wait for this stream,
            # and the agent has ended (the nursery below is left) once the stream ends.
            with trio.fail_after(3):
                agent.stop()
                while await stream.receive_some(4096):
                    pass  # the server cut the stream

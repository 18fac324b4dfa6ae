"""`disconnect { stop_on_client_after }` on a client without servers, under `autojump_clock`
(layer 1): an allocation asking for it is destroyed once that long has passed since the last
answered heartbeat, one that does not ask is left running, and an answered heartbeat moves
the deadline (Nomad's client/heartbeatstop.go)."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio
from trio.testing import MockClock

from tests.runtime_support import job_alloc
from yurt.runtime.client.heartbeatstop import due, stop_timeout, watch_heartbeat_stop
from yurt.runtime.structs import Allocation

JOB = '''job "j" {
  group "g" {
    %s
    task "t" {
      driver = "mock_driver"
      config { run_for = "1h" }
    }
  }
}
'''
STOPPING = JOB % 'disconnect {\n stop_on_client_after = "30s"\n }'


@dataclass
class _Runner:
    alloc: Allocation


@dataclass
class _Client:
    runners: dict[str, _Runner]
    destroyed: list[tuple[str, float]] = field(default_factory=list)

    async def destroy_alloc(self, alloc_id: str) -> None:
        await trio.lowlevel.checkpoint()
        self.destroyed.append((alloc_id, trio.current_time()))
        self.runners.pop(alloc_id, None)


def test_the_timeout_is_the_groups_and_due_is_nomads() -> None:
    assert stop_timeout(job_alloc(STOPPING)) == 30.0
    assert stop_timeout(job_alloc(JOB % "")) is None
    assert not due(now=40.0, last_ok=20.0, started=0.0, timeout=30.0)
    assert due(now=50.1, last_ok=20.0, started=0.0, timeout=30.0)
    assert due(now=30.1, last_ok=None, started=0.0, timeout=30.0)  # never answered


async def test_allocations_that_ask_are_stopped_after_the_last_heartbeat(
        autojump_clock: MockClock) -> None:
    client = _Client({"stop": _Runner(job_alloc(STOPPING, "stop")),
                      "keep": _Runner(job_alloc(JOB % "", "keep"))})
    start = trio.current_time()
    contact = [start + 10.0]  # a heartbeat answered 10 s in
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_heartbeat_stop, client, lambda: contact[0])
        await trio.sleep(35)
        contact[0] = trio.current_time()  # answered again at 35 s: the deadline moves
        await trio.sleep(60)
        nursery.cancel_scope.cancel()
    ((alloc_id, at),) = client.destroyed
    assert alloc_id == "stop"
    assert 65.0 < at - start < 66.5  # 35 s + 30 s
    assert list(client.runners) == ["keep"]

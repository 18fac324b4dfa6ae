"""When a `RemoteServer` heartbeats, under the mock clock over an in-process transport: every
TTL the server told it (Nomad's client: `heartbeat = time.After(c.heartbeatTTL)`), not every
half TTL; and once a failed heartbeat has let the TTL run out, it tries again every 1-2 s
(Nomad's `getHeartbeatRetryIntv`), within the server's grace."""

from __future__ import annotations

import random

import msgspec
import trio

from yurt.runtime.client.remote import RemoteServer
from yurt.runtime.structs import Node

TTL = 10.0


class Server:
    """Answers registrations and heartbeats with `TTL`; allocation pulls block for their
    wait. `down_from`: heartbeats at or after this time (trio clock) find no server."""

    def __init__(self) -> None:
        self.heartbeats: list[float] = []  # when each heartbeat was tried
        self.down_from = float("inf")
        self.up_again = float("inf")

    async def __call__(self, method: str, url: str, *, content: bytes | None,
                       params: dict[str, str] | None, headers: dict[str, str]
                       ) -> tuple[int, bytes]:
        now = trio.current_time()
        if method == "GET":
            await trio.sleep_forever()
        if url.endswith("/heartbeat"):
            self.heartbeats.append(now)
            if self.down_from <= now < self.up_again:
                await trio.lowlevel.checkpoint()
                raise OSError("connection refused")
        await trio.lowlevel.checkpoint()
        return 200, msgspec.json.encode({"HeartbeatTTL": int(TTL * 1e9), "Index": 1})


async def beat(server: Server, until: float) -> RemoteServer:
    remote = RemoteServer(Node(id="n1", name="n1"), ["http://server"], "secret",
                          rng=random.Random(1), transport=server)
    with trio.move_on_after(until):
        await remote.run()
    return remote


async def test_a_node_heartbeats_every_ttl(autojump_clock: object) -> None:
    server = Server()
    await beat(server, 5 * TTL + 1)
    gaps = [b - a for a, b in zip(server.heartbeats, server.heartbeats[1:], strict=False)]
    assert len(server.heartbeats) == 5  # at 10, 20, 30, 40, 50 s; half the TTL made ten
    assert all(abs(gap - TTL) < 0.01 for gap in gaps)


async def test_past_the_ttl_a_failed_heartbeat_is_retried_within_seconds(
        autojump_clock: object) -> None:
    server = Server()
    server.down_from, server.up_again = 15.0, 25.0  # the heartbeat at 20 s fails
    await beat(server, 40)
    failed = [t for t in server.heartbeats if 15 <= t < 25]
    retries = [t for t in server.heartbeats if t > failed[0]]
    assert failed[0] == 2 * TTL  # the second heartbeat
    # Every retry at most 2 s after the one before (not half the TTL): back within the
    # server's grace (10 s).
    assert len(failed) >= 3
    assert all(0 < b - a <= 2.0 for a, b in zip(failed, retries, strict=False))
    answered = next(t for t in server.heartbeats if t >= 25)
    assert answered - 2 * TTL < 7


async def test_a_heartbeat_answered_past_ttl_and_grace_counts_as_a_miss(
        autojump_clock: object) -> None:
    # Down from 15 s to 25 s: answered again within the grace, no miss.
    server = Server()
    server.down_from, server.up_again = 15.0, 25.0
    assert (await beat(server, 60)).heartbeat_misses == 0
    # Down from 15 s to 45 s: the last answer at 10 s, the next past 10 + TTL + 10 s.
    server = Server()
    now = trio.current_time()
    server.down_from, server.up_again = now + 15.0, now + 45.0
    remote = await beat(server, 60)
    assert remote.heartbeat_misses == 1
    assert remote.heartbeat_failures > 0

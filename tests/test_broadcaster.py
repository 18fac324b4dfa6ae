"""AllocBroadcaster: listeners only ever see the newest value (layer 1)."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from yurt.runtime.client.allocrunner.broadcaster import AllocBroadcaster, BroadcasterClosedError


async def test_listener_sees_only_the_newest_value(autojump_clock: MockClock) -> None:
    b: AllocBroadcaster[int] = AllocBroadcaster()
    listener = b.listen()
    for i in range(100):
        b.send(i)  # never blocks, however slow the listener
    assert await listener.receive() == 99
    b.send(100)
    assert await listener.receive() == 100


async def test_listen_is_primed_with_the_last_value(autojump_clock: MockClock) -> None:
    b: AllocBroadcaster[str] = AllocBroadcaster()
    b.send("old")
    b.send("new")
    assert await b.listen().receive() == "new"


async def test_receive_waits_for_a_value(autojump_clock: MockClock) -> None:
    b: AllocBroadcaster[int] = AllocBroadcaster()
    listener = b.listen()
    got: list[int] = []

    async def reader() -> None:
        got.append(await listener.receive())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.sleep(5)
        assert got == []
        b.send(7)
    assert got == [7]


async def test_close_delivers_the_last_value_once_then_ends(autojump_clock: MockClock) -> None:
    b: AllocBroadcaster[int] = AllocBroadcaster()
    early = b.listen()
    b.send(1)
    b.close()
    assert [v async for v in early] == [1]
    late = b.listen()
    assert [v async for v in late] == [1]
    with pytest.raises(BroadcasterClosedError, match="alloc broadcaster closed"):
        b.send(2)


async def test_closed_listener_gets_nothing_more(autojump_clock: MockClock) -> None:
    b: AllocBroadcaster[int] = AllocBroadcaster()
    listener = b.listen()
    listener.close()
    b.send(1)
    with pytest.raises(trio.EndOfChannel):
        await listener.receive()

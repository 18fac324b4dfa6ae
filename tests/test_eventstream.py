"""The event broker's fan-out: one encoding per record for every subscriber, bounded buffers.

Layer 1 (no I/O, no clock): the broker and its subscriptions alone. `receive_encoded` must give
every subscriber the same bytes, equal to what encoding the record for that subscriber gives,
and a slow subscriber must still learn how many records it lost.
"""

from __future__ import annotations

import msgspec
import trio

from yurt.runtime.eventstream import (
    EventBroker,
    Published,
    Record,
    as_line,
    encode_record,
    topic_filter,
)
from yurt.runtime.structs import Allocation, TaskEvent


def _alloc(alloc_id: str, job_id: str = "web") -> Allocation:
    return Allocation(id=alloc_id, name=f"{job_id}.g[0]", job_id=job_id, task_group="g")


def _lines(items: list[Published | bytes]) -> list[bytes]:
    return [as_line(i).removesuffix(b"\n") for i in items]


async def test_every_subscriber_gets_the_same_bytes_encoded_once() -> None:
    broker = EventBroker()
    subs = [broker.subscribe() for _ in range(50)]
    broker.allocation_updated(_alloc("a1"))
    broker.task_event(_alloc("a1"), "t", TaskEvent(type="Started", time=5))
    got = [await sub.receive_encoded() for sub in subs]
    for items in got:
        assert len(items) == 2
        # The very same objects: the encoding is shared, not merely equal.
        assert all(a is b for a, b in zip(items, got[0], strict=True))
    first, second = got[0]
    assert isinstance(first, Published)
    assert isinstance(second, Published)
    assert first.data is first.data  # made once, then kept
    # Exactly what encoding the record gives, and the record Nomad-shaped.
    assert first.data == encode_record(first.record)
    decoded = msgspec.json.decode(second.data)
    assert decoded["Index"] == 2
    (event,) = decoded["Events"]
    assert (event["Topic"], event["Type"], event["Key"]) == ("Task", "TaskEvent", "a1")
    assert event["Payload"]["Event"]["Type"] == "Started"
    assert "Lost" not in decoded
    assert second.text == second.data.decode()
    assert second.line == second.data + b"\n"
    assert second.line is second.line


async def test_encoded_and_structured_receives_agree() -> None:
    broker = EventBroker()
    structured, encoded = broker.subscribe(), broker.subscribe()
    for i in range(5):
        broker.allocation_updated(_alloc(f"a{i}"))
    records = [await structured.receive() for _ in range(5)]
    lines = _lines(await encoded.receive_encoded())
    assert lines == [encode_record(r) for r in records]


async def test_a_slow_subscriber_gets_lost_counts_on_the_shared_bytes() -> None:
    broker = EventBroker()
    slow = broker.subscribe(size=3)
    fast = broker.subscribe()
    for i in range(10):
        broker.allocation_updated(_alloc(f"a{i}"))
    lines = _lines(await slow.receive_encoded())
    assert len(lines) == 3
    first = msgspec.json.decode(lines[0])
    assert first["Lost"] == 7
    assert first["Index"] == 8
    # Byte for byte what encoding the record with its Lost count gives.
    reference = [await fast.receive() for _ in range(10)][7]
    assert lines[0] == encode_record(msgspec.structs.replace(reference, lost=7))
    assert "Lost" not in msgspec.json.decode(lines[1])
    # The count starts again: more loss, a new count on the next record.
    for i in range(5):
        broker.allocation_updated(_alloc(f"b{i}"))
    again = msgspec.json.decode(_lines(await slow.receive_encoded(limit=1))[0])
    assert again["Lost"] == 2


async def test_filters_drop_or_keep_whole_records_and_keep_lost_counts() -> None:
    broker = EventBroker()
    matches = topic_filter(["Task"])
    sub = broker.subscribe(size=2)
    broker.task_event(_alloc("a1"), "t", TaskEvent(type="Started", time=1))
    broker.allocation_updated(_alloc("a1"))
    items = await sub.receive_encoded(matches)
    assert len(items) == 1
    assert isinstance(items[0], Published)  # kept whole: still the shared bytes
    # Lost records and a record the filter drops: still told, with no events.
    for i in range(3):
        broker.allocation_updated(_alloc(f"x{i}"))
    lines = _lines(await sub.receive_encoded(matches))
    assert len(lines) == 1
    decoded = msgspec.json.decode(lines[0])
    assert decoded["Events"] == []
    assert decoded["Lost"] == 1
    # Same answer as the structured path's filter.
    record = Record(index=decoded["Index"], events=[], lost=1)
    assert lines[0] == encode_record(record)


async def test_a_record_whose_events_the_filter_splits_is_encoded_for_that_subscriber(
        ) -> None:
    broker = EventBroker()
    sub = broker.subscribe()
    broker.task_event(_alloc("a1"), "t", TaskEvent(type="Started", time=1))
    # A record of two events (the broker publishes one event per record; history replays
    # may not): only the matching one is sent.
    published = sub._buffer[0]
    second = msgspec.structs.replace(published.record.events[0], key="other")
    sub._buffer[0] = Published(msgspec.structs.replace(published.record,
                                                       events=[*published.record.events,
                                                               second]))
    matches = topic_filter(["Task:a1"])
    (line,) = await sub.receive_encoded(matches)
    assert isinstance(line, bytes)
    assert second.key == "other"
    expected = msgspec.structs.replace(published.record, events=[published.record.events[0]])
    assert line == encode_record(expected)


async def test_a_cancelled_receive_loses_nothing() -> None:
    broker = EventBroker()
    sub = broker.subscribe()
    broker.allocation_updated(_alloc("a1"))
    with trio.CancelScope() as scope:
        scope.cancel()
        await sub.receive_encoded()
    assert scope.cancelled_caught
    assert len(sub._buffer) == 1  # the cancelled receive took nothing
    assert len(_lines(await sub.receive_encoded())) == 1


async def test_closed_subscription_ends() -> None:
    broker = EventBroker()
    sub = broker.subscribe()
    broker.allocation_updated(_alloc("a1"))
    sub.close()
    assert len(await sub.receive_encoded()) == 1  # what was buffered is still delivered
    try:
        await sub.receive_encoded()
    except trio.EndOfChannel:
        pass
    else:
        raise AssertionError("a closed, empty subscription must end")

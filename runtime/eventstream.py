"""The event stream: Nomad-shaped records for `yurt run --json`, the HTTP stream and websocket.

A record is `{"Index": n, "Events": [{"Topic", "Type", "Key", "Namespace", "FilterKeys",
"Index", "Payload"}]}`, as Nomad's `/v1/event/stream` writes it, with yurt's extra topic
`Task` (`Type` `TaskEvent`, `Payload = {AllocID, JobID, TaskGroup, Task, Event}`), one per task
event as it happens.

Indexes. In the agent, the server's one index space numbers everything: a server commit is one
record whose `Index`, and every event's, is the index the commit took (`publish_events`), and an
event that is no state change of its own (a task event) carries the server's current index
(`index_source`). `subscribe(from_index=N)` replays the kept records whose index is at least N,
as Nomad's `StartAtClosest` does, so a client that saw index N asks for N+1. A broker alone
(`yurt run`) numbers its records itself, one more for each.

Back-pressure (stated, per subscriber): each subscriber has a bounded buffer; when it is full
the oldest record is dropped and counted, and the subscriber's next record carries `"Lost": n`
so a consumer knows it missed something and can re-read state. Publishing never blocks, so a
slow consumer can never slow an allocation down.

Fan-out cost. A record is encoded once, for every subscriber: the broker hands each buffer the
same `Published` (the record and its JSON, made on first use and shared; a record nobody
encodes, as with `yurt run --json` alone, costs no encoding). A subscriber that asks for its
records encoded (`receive_encoded`) gets those shared bytes; only a record it must change costs
it an encode of its own: one carrying `Lost` (spliced onto the shared bytes, no re-encode) or
one whose events its topic filter splits. And it takes everything buffered at once, so a
stream writes one chunk per wake-up, not one per record: under load the cost per subscriber
grows with its wake-ups, not with the event rate. (Encoding per subscriber, as before, made
200 subscribers cost 200 encodes of every allocation update.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final, final

import msgspec
import trio

from yurt.runtime.structs import Allocation, Job, Node, TaskEvent
from yurt.runtime.structs.allocresources import alloc_json
from yurt.runtime.structs.update import Deployment

_encoder = msgspec.json.Encoder()

DEFAULT_BUFFER: Final = 10_000
#: Records kept for subscribers that ask to start from an earlier index.
HISTORY: Final = 1_000


class Event(msgspec.Struct, rename="pascal", kw_only=True):
    topic: str
    type: str
    key: str
    namespace: str = "default"
    filter_keys: list[str] = msgspec.field(default_factory=list)
    index: int = 0
    payload: dict[str, Any] = msgspec.field(default_factory=dict)


class Record(msgspec.Struct, rename="pascal", kw_only=True, omit_defaults=True):
    index: int
    events: list[Event]
    lost: int = 0


@final
class Published:
    """A record as published, with its JSON made once (on first use) for every subscriber."""

    __slots__ = ("_data", "_line", "_text", "record")

    def __init__(self, record: Record) -> None:
        self.record = record
        self._data: bytes | None = None
        self._line: bytes | None = None
        self._text: str | None = None

    @property
    def data(self) -> bytes:
        """`encode_record(record)`, shared by every subscriber."""
        if self._data is None:
            self._data = encode_record(self.record)
        return self._data

    @property
    def line(self) -> bytes:
        """`data` and a newline (an NDJSON line), shared: no copy per subscriber to add it."""
        if self._line is None:
            self._line = self.data + b"\n"
        return self._line

    @property
    def text(self) -> str:
        """`data` as text (a websocket text frame), shared as well."""
        if self._text is None:
            self._text = self.data.decode()
        return self._text


def as_line(item: Published | bytes) -> bytes:
    """An item of `Subscription.receive_encoded` as an NDJSON line (the HTTP stream)."""
    return item.line if isinstance(item, Published) else item + b"\n"


def as_text(item: Published | bytes) -> str:
    """An item of `Subscription.receive_encoded` as text (a websocket text frame)."""
    return item.text if isinstance(item, Published) else item.decode()


@final
class Subscription:
    def __init__(self, broker: EventBroker, size: int) -> None:
        self._broker = broker
        self._buffer: deque[Published] = deque()
        self._size = size
        self._lost = 0
        self._wakeup = trio.Event()
        self._closed = False

    def _push(self, published: Published) -> None:
        if len(self._buffer) >= self._size:
            self._buffer.popleft()
            self._lost += 1
        self._buffer.append(published)
        self._wakeup.set()

    async def _wait(self) -> None:
        while not self._buffer:
            if self._closed:
                raise trio.EndOfChannel
            await self._wakeup.wait()
            self._wakeup = trio.Event()
        # Nothing is taken before this last checkpoint: a cancelled receive loses nothing.
        await trio.lowlevel.checkpoint()

    def _take_lost(self) -> int:
        lost, self._lost = self._lost, 0
        return lost

    async def receive(self) -> Record:
        await self._wait()
        record = self._buffer.popleft().record
        if lost := self._take_lost():
            record = msgspec.structs.replace(record, lost=lost)
        return record

    async def receive_encoded(self, matches: Callable[[Event], bool] | None = None,
                              *, limit: int = 1_000) -> list[Published | bytes]:
        """Up to `limit` of the records buffered (at least one: waits for it), as each
        should be sent: the shared `Published` where the subscriber gets the record as
        published, bytes of its own where it does not (`Lost` added, events filtered).
        Records `matches` filters out entirely are left out, so the list may be empty.

        Raises:
            trio.EndOfChannel: the subscription is closed and its buffer empty.
        """
        await self._wait()
        out: list[Published | bytes] = []
        for _ in range(min(limit, len(self._buffer))):
            published = self._buffer.popleft()
            lost = self._take_lost()
            if matches is not None:
                kept = [e for e in published.record.events if matches(e)]
                if len(kept) != len(published.record.events):
                    if kept or lost:
                        out.append(encode_record(msgspec.structs.replace(
                            published.record, events=kept, lost=lost)))
                    continue
            out.append(published if not lost else with_lost(published.data, lost))
        return out

    def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        self._broker._subscriptions.discard(self)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Record:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


def with_lost(data: bytes, lost: int) -> bytes:
    """An encoded record (`Lost` omitted, as published) with `"Lost": lost` added: the bytes
    `encode_record` gives for the record with `lost` set (the field comes last)."""
    return data[:-1] + b',"Lost":%d}' % lost


@final
class EventBroker:
    """Numbers events and fans them out to subscribers; never blocks a publisher."""

    def __init__(self) -> None:
        #: The index of the last record published.
        self.index = 0
        #: The index an event that is not a state change of its own carries (the server's
        #: current one); None: the broker numbers records itself.
        self.index_source: Callable[[], int] | None = None
        self._subscriptions: set[Subscription] = set()
        self._history: deque[Published] = deque(maxlen=HISTORY)

    def subscribe(self, size: int = DEFAULT_BUFFER, *, from_index: int | None = None
                  ) -> Subscription:
        """A new subscription; with `from_index`, first the kept records from that index on
        (Nomad's `index` parameter; 0 means the oldest kept)."""
        sub = Subscription(self, size)
        if from_index is not None:
            for published in self._history:
                if published.record.index >= from_index:
                    sub._push(published)
        self._subscriptions.add(sub)
        return sub

    def close(self) -> None:
        for sub in list(self._subscriptions):
            sub.close()

    def publish(self, topic: str, type_: str, key: str, payload: dict[str, Any],
                filter_keys: list[str] | None = None, *, index: int | None = None,
                namespace: str = "default") -> None:
        self.publish_events([Event(topic=topic, type=type_, key=key, namespace=namespace,
                                   filter_keys=filter_keys or [], payload=payload)],
                            index=index)

    def publish_events(self, events: list[Event], *, index: int | None = None) -> None:
        """One record of `events`, all numbered `index` (a server commit's); without it, the
        server's current index (`index_source`) or, for a broker alone, the next one."""
        if not events:
            return
        if index is None:
            index = self.index_source() if self.index_source is not None else self.index + 1
        for event in events:
            event.index = index
        self.index = max(self.index, index)
        published = Published(Record(index=index, events=events))
        self._history.append(published)
        for sub in self._subscriptions:
            sub._push(published)

    # Nomad's topics, typed.

    def job_registered(self, job: Job, *, index: int | None = None) -> None:
        self.publish_events([job_event("JobRegistered", job)], index=index)

    def job_deregistered(self, job: Job, *, index: int | None = None) -> None:
        self.publish_events([job_event("JobDeregistered", job)], index=index)

    def node_registered(self, node: Node, *, index: int | None = None) -> None:
        self.publish("Node", "NodeRegistration", node.id, {"Node": node}, index=index)

    def allocation_updated(self, alloc: Allocation, *, index: int | None = None) -> None:
        self.publish_events([alloc_event(alloc)], index=index)

    def task_event(self, alloc: Allocation, task: str, event: TaskEvent) -> None:
        self.publish("Task", "TaskEvent", alloc.id,
                     {"AllocID": alloc.id, "JobID": alloc.job_id, "TaskGroup": alloc.task_group,
                      "Task": task, "Event": event}, [alloc.job_id, task],
                     namespace=alloc.namespace)  # what the ACL filter reads (api/events.py)


def job_event(type_: str, job: Job) -> Event:
    return Event(topic="Job", type=type_, key=job.id, namespace=job.namespace,
                 payload={"Job": job})


def deployment_event(type_: str, deployment: Deployment) -> Event:
    """Nomad's `Deployment` topic: DeploymentStatusUpdate, DeploymentPromotion,
    DeploymentAllocHealth; keyed by the deployment, filterable by its job."""
    return Event(topic="Deployment", type=type_, key=deployment.id,
                 namespace=deployment.namespace, filter_keys=[deployment.job_id],
                 payload={"Deployment": deployment})


def alloc_event(alloc: Allocation) -> Event:
    return Event(topic="Allocation", type="AllocationUpdated", key=alloc.id,
                 namespace=alloc.namespace, filter_keys=[alloc.job_id],
                 payload={"Allocation": alloc})


def encode_record(record: Record) -> bytes:
    """A record as the event stream sends it. An allocation is answered as Nomad's API
    answers it (`AllocatedResources`, not the stored `AllocatedShared`); the payload itself
    keeps the Allocation, for in-process readers."""
    if any(e.topic == "Allocation" for e in record.events):
        record = msgspec.structs.replace(record, events=[_wire(e) for e in record.events])
    return _encoder.encode(record)


def _wire(event: Event) -> Event:
    alloc = event.payload.get("Allocation")
    if event.topic != "Allocation" or not isinstance(alloc, Allocation):
        return event
    return msgspec.structs.replace(event, payload={**event.payload,
                                                   "Allocation": alloc_json(alloc)})


def topic_filter(specs: list[str]) -> Callable[[Event], bool] | None:
    """Nomad's `topic=Topic:key` filters: `Allocation` (= `Allocation:*`), `Job:web`, `*`;
    a key matches the event's Key or any of its FilterKeys. None when everything passes, so
    that a subscriber without a filter sends the shared bytes without looking at events."""
    wanted: dict[str, set[str]] = {}
    for spec in specs:
        topic, _, key = spec.partition(":")
        wanted.setdefault(topic, set()).add(key or "*")
    if not wanted or "*" in wanted.get("*", set()):
        return None

    def matches(event: Event) -> bool:
        keys = wanted.get(event.topic, set()) | wanted.get("*", set())
        return "*" in keys or event.key in keys or any(k in keys for k in event.filter_keys)

    return matches

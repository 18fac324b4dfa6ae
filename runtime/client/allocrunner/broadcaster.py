"""`AllocBroadcaster`: fan the allocation's newest client state out to any number of listeners.

Nomad's `AllocBroadcaster` (`client/structs/broadcaster.go`). A listener holds one slot: a new
value replaces an unread old one, so a slow listener only ever sees the newest state and the
sender never blocks or buffers. `listen()` primes the slot with the last value sent; after
`close()` a listener still gets that last value once, then `receive()` raises
`trio.EndOfChannel`.
"""

from __future__ import annotations

from typing import Generic, TypeVar, final

import trio

T = TypeVar("T")


class BroadcasterClosedError(Exception):
    def __init__(self) -> None:
        super().__init__("alloc broadcaster closed")


@final
class Listener(Generic[T]):
    def __init__(self, owner: AllocBroadcaster[T]) -> None:
        self._owner = owner
        self._value: T | None = None
        self._has_value = False
        self._closed = False
        self._wakeup = trio.Event()

    def _offer(self, value: T) -> None:
        self._value, self._has_value = value, True
        self._wakeup.set()

    def _close(self) -> None:
        self._closed = True
        self._wakeup.set()

    async def receive(self) -> T:
        """The newest value not yet received; waits for one. `EndOfChannel` once closed."""
        while not self._has_value:
            if self._closed:
                raise trio.EndOfChannel
            await self._wakeup.wait()
            self._wakeup = trio.Event()
        await trio.lowlevel.checkpoint()
        value, self._value, self._has_value = self._value, None, False
        return value  # type: ignore[return-value]

    def close(self) -> None:
        """Stop listening."""
        self._owner._listeners.discard(self)
        self._close()

    def __aiter__(self) -> Listener[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


@final
class AllocBroadcaster(Generic[T]):
    def __init__(self) -> None:
        self._listeners: set[Listener[T]] = set()
        self._last: T | None = None
        self._has_last = False
        self.closed = False

    def send(self, value: T) -> None:
        if self.closed:
            raise BroadcasterClosedError
        self._last, self._has_last = value, True
        for listener in self._listeners:
            listener._offer(value)

    def listen(self) -> Listener[T]:
        listener: Listener[T] = Listener(self)
        if self._has_last:
            listener._offer(self._last)  # type: ignore[arg-type]
        if self.closed:
            listener._close()
        else:
            self._listeners.add(listener)
        return listener

    def close(self) -> None:
        self.closed = True
        for listener in self._listeners:
            listener._close()
        self._listeners.clear()

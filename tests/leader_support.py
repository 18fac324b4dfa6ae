"""A lease backend for election tests: leases on the trio clock, in memory, and candidates
that can be frozen (a dead leader) or made to fail (an outage), which the in-memory etcd
(runtime/server/cluster/etcd/memkv.py) does not model."""

from __future__ import annotations

import math
from typing import final

import trio

from yurt.runtime.server.cluster.leader import LeaseBackendError


@final
class FakeLeaseStore:
    """An in-memory etcd for elections: leases on the trio clock (they expire at their TTL
    unless kept alive) and keys bound to them. Share one between several `FakeLeaseBackend`s,
    one per candidate."""

    def __init__(self) -> None:
        self._expiry: dict[int, float] = {}
        self._ttl: dict[int, int] = {}
        self._keys: dict[str, tuple[str, int]] = {}
        self._next_lease = 0x1000
        self._changed = trio.Event()

    def holder(self, key: str) -> str | None:
        """The key's value now (expired leases dropped): the invariant tests check against
        it."""
        self._expire()
        entry = self._keys.get(key)
        return entry[0] if entry is not None else None

    def lease_of(self, key: str) -> int | None:
        self._expire()
        entry = self._keys.get(key)
        return entry[1] if entry is not None else None

    def delete(self, key: str) -> None:
        """Delete a key (an operator's `etcdctl del`)."""
        if self._keys.pop(key, None) is not None:
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _expire(self) -> None:
        now = trio.current_time()
        dead = {lease for lease, at in self._expiry.items() if at <= now}
        if dead:
            self._drop(dead)

    def _drop(self, leases: set[int]) -> None:
        for lease in leases:
            self._expiry.pop(lease, None)
            self._ttl.pop(lease, None)
        gone = [k for k, (_, lease) in self._keys.items() if lease in leases]
        for key in gone:
            del self._keys[key]
        if gone:
            self._notify()

    def _key_expiry(self, key: str) -> float:
        entry = self._keys.get(key)
        if entry is None or entry[1] == 0:
            return math.inf
        return self._expiry.get(entry[1], math.inf)


@final
class FakeLeaseBackend:
    """One candidate's connection to a `FakeLeaseStore`.

    `freeze()` simulates that candidate dying or being cut off: every call it makes (and any
    it is in) hangs until `thaw()`, so its leases stop being kept alive and expire.
    `fail_calls` makes every call raise `LeaseBackendError` (a backend outage) while set.
    """

    def __init__(self, store: FakeLeaseStore) -> None:
        self.store = store
        self.fail_calls = False
        self._thawed: trio.Event | None = None

    @property
    def frozen(self) -> bool:
        return self._thawed is not None

    def freeze(self) -> None:
        if self._thawed is None:
            self._thawed = trio.Event()

    def thaw(self) -> None:
        if self._thawed is not None:
            self._thawed.set()
            self._thawed = None

    async def _call(self) -> None:
        await trio.lowlevel.checkpoint()
        while self._thawed is not None:
            await self._thawed.wait()
        if self.fail_calls:
            raise LeaseBackendError("backend unavailable (fake)")
        self.store._expire()

    async def grant(self, ttl: int) -> int:
        await self._call()
        store = self.store
        store._next_lease += 1
        lease = store._next_lease
        store._expiry[lease] = trio.current_time() + ttl
        store._ttl[lease] = ttl
        return lease

    async def keepalive(self, lease: int) -> int:
        await self._call()
        store = self.store
        if lease not in store._expiry:
            return 0
        store._expiry[lease] = trio.current_time() + store._ttl[lease]
        return store._ttl[lease]

    async def revoke(self, lease: int) -> None:
        await self._call()
        self.store._drop({lease})

    async def create_if_absent(self, key: str, value: str, lease: int) -> bool:
        await self._call()
        store = self.store
        if lease not in store._expiry:
            raise LeaseBackendError(f"lease {lease:x} not found")
        if key in store._keys:
            return False
        store._keys[key] = (value, lease)
        store._notify()
        return True

    async def get(self, key: str) -> str | None:
        await self._call()
        entry = self.store._keys.get(key)
        return entry[0] if entry is not None else None

    async def wait_changed(self, key: str, value: str | None) -> str | None:
        store = self.store
        while True:
            await self._call()
            entry = store._keys.get(key)
            current = entry[0] if entry is not None else None
            if current != value:
                return current
            changed = store._changed
            # Wake at the next write, or when the key's lease runs out.
            with trio.move_on_at(store._key_expiry(key)):
                await changed.wait()



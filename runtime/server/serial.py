"""Check-then-act steps done one at a time: a Trio lock per (owner, key).

An API handler that reads the server's state, decides, and then commits across an `await`
(a file written in a worker thread, a job registered) lets a second request read the same
state in between: two check-and-sets both succeed, two dispatches with one idempotency token
both create a child. `serialized(owner, key)` is the lock such a step holds from the check to
the commit, one per owner (the agent's `LocalServer`, so two agents in one process never share
one) and per key (the step, and what it is about: a parent job's ID).

Invariants: locks are created on first use inside a Trio run and forgotten with their owner
(a weak reference) or as soon as nobody holds or waits for them, so the table stays as small
as the number of steps under way.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

_LOCKS: weakref.WeakKeyDictionary[object, dict[str, trio.Lock]] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def serialized(owner: object, key: str) -> AsyncIterator[None]:
    """Hold the lock of (`owner`, `key`) for the block."""
    locks = _LOCKS.setdefault(owner, {})
    lock = locks.setdefault(key, trio.Lock())
    try:
        async with lock:
            yield
    finally:
        if not lock.locked() and lock.statistics().tasks_waiting == 0 and \
                locks.get(key) is lock:
            del locks[key]

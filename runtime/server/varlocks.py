"""Nomad's variable locks (`PUT /v1/var/<path>?lock-acquire|lock-renew|lock-release`): who
holds the lock of which variable, until when.

Nomad keeps a lock in the variable's `Lock` field and its TTL in a leader's timer
(nomad/variables_endpoint.go `RenewLock`, nomad/state/state_store_variables.go
`VarLockAcquire`/`VarLockRelease`, nomad/lock/ttl.go). yurt's embedded server keeps the same
facts here, in memory, one `LockTable` per object store:

- a lock is *held* until its TTL runs out unrenewed; then it stays on the variable for its
  LockDelay (nobody may take it, the old holder may not renew it) and then is gone;
- acquiring a variable whose lock is on it (held or in its delay) by another ID conflicts;
  a new lock gets a new random ID (Nomad's is a UUID);
- renewing needs the holder's ID and a lock still held; releasing needs the holder's ID, and
  takes the lock off at once (no delay: the holder let go).

Invariants: at most one lock per (namespace, path); time is a monotonic clock (injectable for
tests), never wall time. The table lives as long as the agent: an agent restart forgets every
lock, so a holder's next renew answers 409 and it stops (Nomad's leader restores its timers
from the state; the single agent does not persist them).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

#: nomad/structs/variables.go `minVariableLockTTL`, `maxVariableLockTTL`.
MIN_TTL_NS: Final = 10 * 1_000_000_000
MAX_TTL_NS: Final = 24 * 3600 * 1_000_000_000
#: nomad/variables_endpoint.go's texts (their 409s and 404).
LOCK_NOT_FOUND: Final = "variable doesn't hold a lock"
VAR_IS_LOCKED: Final = "attempting to modify locked variable"
VAR_NOT_FOUND: Final = "variable doesn't exist"


def lock_error(ttl_ns: int, delay_ns: int) -> str | None:
    """nomad/structs/variables.go `VariableLock.Validate`: its text, or None when valid."""
    problems = []
    if ttl_ns < 0 or delay_ns < 0:
        problems.append("Lock delay and TTL must be positive")
    if not MIN_TTL_NS <= ttl_ns <= MAX_TTL_NS:
        problems.append("TTL must be between 10 seconds and 24 hours")
    return "; ".join(problems) or None


@dataclass(frozen=True)
class HeldLock:
    """One lock: its ID, TTL and delay (ns, as Nomad's durations), and when (on the table's
    clock, seconds) its TTL runs out unless renewed."""

    id: str
    ttl_ns: int
    delay_ns: int
    expires: float


@final
class LockTable:
    """The locks of one server's variables."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._locks: dict[tuple[str, str], HeldLock] = {}

    def current(self, namespace: str, path: str) -> HeldLock | None:
        """The lock on the variable (held, or in its delay after the TTL ran out)."""
        key = (namespace, path)
        found = self._locks.get(key)
        if found is not None and self._clock() >= found.expires + found.delay_ns / 1e9:
            del self._locks[key]  # its delay is over too: gone
            return None
        return found

    def _held(self, lock: HeldLock) -> bool:
        return self._clock() < lock.expires

    def acquire(self, namespace: str, path: str, ttl_ns: int, delay_ns: int,
                holder: str = "") -> HeldLock | None:
        """A new lock for the caller; None when another holds it (or it is in its delay).
        `holder` is the ID the caller sent, if any (Nomad's `isLocked`: the holder itself
        may acquire again)."""
        found = self.current(namespace, path)
        if found is not None and found.id != holder:
            return None
        lock = HeldLock(id=str(uuid.uuid4()), ttl_ns=ttl_ns, delay_ns=delay_ns,
                        expires=self._clock() + ttl_ns / 1e9)
        self._locks[(namespace, path)] = lock
        return lock

    def renew(self, namespace: str, path: str, lock_id: str) -> HeldLock | str:
        """The renewed lock, or Nomad's reason for a 409."""
        found = self.current(namespace, path)
        if found is None:
            return LOCK_NOT_FOUND
        if found.id != lock_id or not self._held(found):
            return VAR_IS_LOCKED  # not the holder, or its TTL ran out: the delay ends it
        renewed = HeldLock(id=found.id, ttl_ns=found.ttl_ns, delay_ns=found.delay_ns,
                           expires=self._clock() + found.ttl_ns / 1e9)
        self._locks[(namespace, path)] = renewed
        return renewed

    def release(self, namespace: str, path: str, lock_id: str) -> str | None:
        """None when released, else Nomad's reason for a 409."""
        found = self.current(namespace, path)
        if found is None:
            return LOCK_NOT_FOUND
        if found.id != lock_id:
            return VAR_IS_LOCKED
        del self._locks[(namespace, path)]
        return None

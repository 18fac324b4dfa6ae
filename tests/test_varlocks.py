"""Nomad's variable-lock rules as runtime/server/varlocks.py keeps them (layer 1: pure logic,
a fake clock): one holder at a time, renewals only by the holder within its TTL, the lock
delay after a TTL that ran out, release only by the holder; and the TTL bounds' texts."""

from __future__ import annotations

from yurt.runtime.server.varlocks import (
    LOCK_NOT_FOUND,
    VAR_IS_LOCKED,
    HeldLock,
    LockTable,
    lock_error,
)

S = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_held_lock_refuses_another_and_lets_its_holder_renew_and_release() -> None:
    clock = Clock()
    table = LockTable(clock)
    first = table.acquire("default", "p", 10 * S, 15 * S)
    assert isinstance(first, HeldLock)
    assert table.acquire("default", "p", 10 * S, 15 * S) is None
    assert table.acquire("default", "p", 10 * S, 15 * S, holder="someone-else") is None
    assert table.acquire("other-ns", "p", 10 * S, 15 * S) is not None  # another variable
    clock.now += 9
    renewed = table.renew("default", "p", first.id)
    assert isinstance(renewed, HeldLock)
    assert renewed.expires == clock.now + 10
    assert table.renew("default", "p", "not-the-holder") == VAR_IS_LOCKED
    assert table.release("default", "p", "not-the-holder") == VAR_IS_LOCKED
    assert table.release("default", "p", first.id) is None
    assert table.current("default", "p") is None
    assert table.release("default", "p", first.id) == LOCK_NOT_FOUND
    assert table.acquire("default", "p", 10 * S, 15 * S) is not None  # free at once


def test_a_lock_whose_ttl_ran_out_blocks_for_its_delay_then_is_gone() -> None:
    clock = Clock()
    table = LockTable(clock)
    lock = table.acquire("default", "p", 10 * S, 5 * S)
    assert lock is not None
    clock.now += 10.5  # TTL over, delay not
    assert table.renew("default", "p", lock.id) == VAR_IS_LOCKED
    assert table.acquire("default", "p", 10 * S, 5 * S) is None
    clock.now += 5  # delay over
    assert table.current("default", "p") is None
    assert table.renew("default", "p", lock.id) == LOCK_NOT_FOUND
    again = table.acquire("default", "p", 10 * S, 5 * S)
    assert again is not None
    assert again.id != lock.id


def test_the_holder_may_acquire_again_with_its_id() -> None:
    table = LockTable(Clock())
    lock = table.acquire("default", "p", 10 * S, 0)
    assert lock is not None
    assert table.acquire("default", "p", 10 * S, 0, holder=lock.id) is not None


def test_ttl_bounds_are_nomads() -> None:
    assert lock_error(10 * S, 0) is None
    assert lock_error(24 * 3600 * S, 15 * S) is None
    assert lock_error(9 * S, 0) == "TTL must be between 10 seconds and 24 hours"
    assert lock_error(25 * 3600 * S, 0) == "TTL must be between 10 seconds and 24 hours"
    assert lock_error(15 * S, -1) == "Lock delay and TTL must be positive"

"""Leader election (runtime/server/cluster/leader.py) over the in-memory lease backend, under
`autojump_clock`. An instrument checks after every task step that at most one server
believes it leads, and that one holds the election key in the store right then."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.lowlevel
from trio.testing import MockClock

from tests.leader_support import FakeLeaseBackend, FakeLeaseStore
from yurt.runtime.server.cluster.leader import LeaderElection, LeaseBackendError

TTL = 5
PERIOD = TTL / 3


class OneLeader(trio.abc.Instrument):
    """Records every task step after which the invariant does not hold (an instrument that
    raises is removed, so it records and the test asserts)."""

    def __init__(self, store: FakeLeaseStore, elections: list[LeaderElection],
                 holds_key: bool) -> None:
        self.store = store
        self.holds_key = holds_key
        self.elections = elections
        self.violations: list[str] = []
        self.steps = 0

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
        leaders = [e for e in self.elections if e.is_leader]
        now = trio.current_time()
        if len(leaders) > 1:
            self.violations.append(f"{now}: {len(leaders)} leaders")
        for e in leaders if self.holds_key else []:
            holder = self.store.holder(e.key)
            if holder != e.address:
                self.violations.append(f"{now}: {e.address} leads, the store says {holder}")


@contextmanager
def one_leader(store: FakeLeaseStore, elections: list[LeaderElection], *,
               holds_key: bool = True) -> Iterator[OneLeader]:
    checker = OneLeader(store, elections, holds_key)
    trio.lowlevel.add_instrument(checker)
    try:
        yield checker
    finally:
        trio.lowlevel.remove_instrument(checker)
    assert checker.violations == []
    assert checker.steps > 0


def pair(store: FakeLeaseStore) -> tuple[LeaderElection, LeaderElection]:
    a = LeaderElection(FakeLeaseBackend(store), "server", "http://a:4646", ttl=TTL)
    b = LeaderElection(FakeLeaseBackend(store), "server", "http://b:4646", ttl=TTL)
    return a, b


def fake(e: LeaderElection) -> FakeLeaseBackend:
    assert isinstance(e.backend, FakeLeaseBackend)
    return e.backend


async def test_one_leader_and_the_follower_knows_it(autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    a, b = pair(store)
    with one_leader(store, [a, b]):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            assert a.is_leader
            assert a.leader_address() == "http://a:4646"
            await nursery.start(b.run)
            assert not b.is_leader
            assert b.leader_address() == "http://a:4646"
            # Many keepalive periods later nothing has moved.
            await trio.sleep(20 * TTL)
            assert a.is_leader
            assert a.term == 1
            assert not b.is_leader
            assert store.holder(a.key) == "http://a:4646"
            nursery.cancel_scope.cancel()


async def test_a_dead_leader_is_replaced_within_ttl_and_one_period(
        autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    a, b = pair(store)
    cancelled_at: list[float] = []
    with one_leader(store, [a, b]):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await nursery.start(b.run)

            async def leader_work(task_status: trio.TaskStatus[None]) -> None:
                async with a.leading() as scope:
                    task_status.started()
                    await trio.sleep_forever()
                assert scope.cancelled_caught
                assert not a.is_leader
                cancelled_at.append(trio.current_time())

            await nursery.start(leader_work)
            await trio.sleep(7.3)  # somewhere between two keepalives
            died = trio.current_time()
            fake(a).freeze()
            await b.wait_leader()
            took = trio.current_time() - died
            assert took <= TTL + PERIOD
            # Not before the dead leader's lease could have run out.
            assert took >= TTL - PERIOD
            assert b.leader_address() == "http://b:4646"
            # The dead leader stopped believing it leads, and its work was cancelled, before
            # the other took over.
            assert not a.is_leader
            assert len(cancelled_at) == 1
            assert cancelled_at[0] < died + took
            nursery.cancel_scope.cancel()


async def test_a_stopping_leader_hands_over_at_once(autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    a, b = pair(store)
    with one_leader(store, [a, b]):
        async with trio.open_nursery() as nursery:
            a_scope = trio.CancelScope()

            async def run_a(task_status: trio.TaskStatus[None]) -> None:
                with a_scope:
                    await a.run(task_status=task_status)

            await nursery.start(run_a)
            await nursery.start(b.run)
            await trio.sleep(3.0)
            stopped = trio.current_time()
            a_scope.cancel()
            await b.wait_leader()
            # The lease was revoked: no TTL to wait out.
            assert trio.current_time() - stopped < 0.01
            nursery.cancel_scope.cancel()


async def test_leadership_passes_back_and_forth(autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    a, b = pair(store)
    with one_leader(store, [a, b]):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await nursery.start(b.run)
            for leader, follower in [(a, b), (b, a), (a, b), (b, a)]:
                assert leader.is_leader
                fake(leader).freeze()
                await follower.wait_leader()
                fake(leader).thaw()
                # The thawed one follows the new leader.
                while leader.leader_address() != follower.address:
                    await leader.wait_changed()
                assert not leader.is_leader
            assert (a.term, b.term) == (3, 2)
            nursery.cancel_scope.cancel()


async def test_a_deleted_key_ends_the_term(autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    a, b = pair(store)
    # Someone else deleting the key: the leader learns it a task step later (over etcd, a
    # watch event later), so only "at most one leader" is checked here, not "and it holds
    # the key".
    with one_leader(store, [a, b], holds_key=False):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await nursery.start(b.run)
            async with a.leading() as scope:
                await trio.sleep(1.0)
                store.delete(a.key)
                await trio.sleep_forever()
            assert scope.cancelled_caught
            # Someone leads again, at once (both campaign; either may win).
            while not (a.is_leader or b.is_leader):
                await a.wait_changed()
            nursery.cancel_scope.cancel()


async def test_keepalive_errors_are_ridden_out_until_the_lease_would_expire(
        autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    a, b = pair(store)
    with one_leader(store, [a, b]):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await nursery.start(b.run)
            await trio.sleep(2.0)
            # A short outage: a keeps leading.
            fake(a).fail_calls = True
            await trio.sleep(TTL / 2)
            assert a.is_leader
            fake(a).fail_calls = False
            await trio.sleep(2 * TTL)
            assert a.is_leader
            assert a.term == 1
            # A long one: a steps down before its lease can run out, b takes over.
            fake(a).fail_calls = True
            failed_at = trio.current_time()
            await a.wait_changed()
            assert not a.is_leader
            assert trio.current_time() - failed_at < TTL
            await b.wait_leader()
            assert trio.current_time() - failed_at <= TTL + PERIOD
            nursery.cancel_scope.cancel()


async def test_a_backend_down_at_start_is_retried(autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    a = LeaderElection(FakeLeaseBackend(store), "server", "http://a:4646", ttl=TTL)
    fake(a).fail_calls = True
    with one_leader(store, [a]):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)  # started even though nothing answers
            assert not a.is_leader
            assert a.leader_address() is None
            await trio.sleep(10.0)
            fake(a).fail_calls = False
            await a.wait_leader()
            nursery.cancel_scope.cancel()


async def test_leading_waits_for_the_next_term(autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    a, b = pair(store)
    terms: list[int] = []
    entered = trio.Event()
    with one_leader(store, [a, b]):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            await nursery.start(b.run)

            async def b_work() -> None:
                while True:
                    async with b.leading():
                        terms.append(b.term)
                        entered.set()
                        await trio.sleep_forever()

            nursery.start_soon(b_work)
            await trio.sleep(10.0)
            assert terms == []  # b never led
            fake(a).freeze()
            await entered.wait()
            assert b.is_leader
            assert terms == [1]
            nursery.cancel_scope.cancel()


async def test_the_fake_store_expires_leases_on_the_trio_clock(
        autojump_clock: MockClock) -> None:
    store = FakeLeaseStore()
    backend = FakeLeaseBackend(store)
    lease = await backend.grant(3)
    assert await backend.create_if_absent("k", "v", lease)
    assert not await backend.create_if_absent("k", "w", lease)
    start = trio.current_time()
    assert await backend.wait_changed("k", "v") is None
    assert trio.current_time() - start == pytest.approx(3.0)
    assert await backend.keepalive(lease) == 0
    with pytest.raises(LeaseBackendError):
        await backend.create_if_absent("k", "v", lease)


def test_the_ttl_must_be_a_whole_second() -> None:
    with pytest.raises(ValueError, match="at least 1 s"):
        LeaderElection(FakeLeaseBackend(FakeLeaseStore()), "s", "a", ttl=0)

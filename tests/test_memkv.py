"""`MemoryKV` behaves as etcd does: the same assertions run against it and against a real etcd
(`kv` is parametrized), then memory-only tests pin what only the mock clock can show exactly
(when a lease expires, that a watcher wakes for it) and the handles sharing one key space."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest
import trio
import trio.testing

from yurt.runtime.server.cluster.etcd.client import (
    Compare,
    EtcdClient,
    EtcdCompacted,
    EtcdError,
    Op,
)
from yurt.runtime.server.cluster.etcd.kv import KV
from yurt.runtime.server.cluster.etcd.memkv import MemoryKV


@pytest.fixture(params=["memory", "etcd"])
async def kv(request: pytest.FixtureRequest) -> AsyncIterator[KV]:
    client: KV
    if request.param == "memory":
        client = MemoryKV()
    else:
        client = EtcdClient(request.getfixturevalue("etcd_urls"))
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> bytes:
    # A fresh prefix per test on the shared etcd; the memory one is empty anyway.
    value: bytes = request.getfixturevalue("etcd_prefix")
    return value


async def test_put_get_prefix_delete_revisions(kv: KV, prefix: bytes) -> None:
    r1 = await kv.put(prefix + b"a", b"1")
    r2 = await kv.put(prefix + b"b", b"\x00binary\xff")
    assert r2 > r1
    r3 = await kv.put(prefix + b"a", b"2")
    got, revision = await kv.get(prefix + b"a")
    assert got is not None
    assert (got.value, got.create_revision, got.mod_revision, got.version, got.lease) == (
        b"2", r1, r3, 2, 0)
    assert revision >= r3
    assert (await kv.get(prefix + b"missing"))[0] is None
    await kv.put(prefix[:-1] + b"\xff", b"outside")  # sorts after every key of the prefix
    kvs, _ = await kv.get_prefix(prefix)
    assert [(k.key, k.value) for k in kvs] == [(prefix + b"a", b"2"),
                                              (prefix + b"b", b"\x00binary\xff")]
    r4 = await kv.delete(prefix + b"a")
    assert r4 > r3
    # Deleting what is not there writes nothing: the revision stays.
    _, now = await kv.get(prefix + b"a")
    assert await kv.delete(prefix + b"a") == now
    r5 = await kv.put(prefix + b"a", b"3")
    got, _ = await kv.get(prefix + b"a")
    assert got is not None
    assert (got.create_revision, got.version) == (r5, 1)  # a new life after the delete
    await kv.delete(prefix[:-1] + b"\xff")


async def test_txn_compares_and_branches(kv: KV, prefix: bytes) -> None:
    key, other = prefix + b"counter", prefix + b"other"
    created = await kv.txn([Compare.create_revision(key, "=", 0)],
                           [Op.put(key, b"1"), Op.put(other, b"o"), Op.get(key)], [Op.get(key)])
    assert created.succeeded
    # One transaction is one revision, and a get later in the branch sees its puts.
    assert [kv_.value for kv_ in created.responses[2]] == [b"1"]
    assert created.responses[:2] == [[], []]
    got, _ = await kv.get(other)
    assert got is not None
    assert got.mod_revision == created.revision
    again = await kv.txn([Compare.create_revision(key, "=", 0)], [Op.put(key, b"x")],
                         [Op.get(key), Op.get_prefix(prefix)])
    assert not again.succeeded
    assert again.revision == created.revision  # a read-only branch writes nothing
    assert again.responses[0][0].value == b"1"
    assert [k.key for k in again.responses[1]] == [key, other]
    stale = await kv.txn([Compare.mod_revision(key, "=", created.revision - 1)],
                         [Op.put(key, b"2")])
    assert (stale.succeeded, stale.responses) == (False, [])
    fresh = await kv.txn([Compare.mod_revision(key, "=", created.revision),
                          Compare.value(key, "=", b"1")], [Op.put(key, b"2")])
    assert fresh.succeeded
    assert fresh.revision > created.revision
    # A value compare against a missing key is false, whatever the operator.
    for op in ("=", "!="):
        missing = await kv.txn([Compare.value(prefix + b"nope", op, b"")], [Op.put(key, b"x")])
        assert not missing.succeeded
    assert (await kv.txn([Compare.mod_revision(key, ">", created.revision),
                          Compare.value(key, "!=", b"1")], [])).succeeded
    with pytest.raises(EtcdError, match="duplicate key"):
        await kv.txn([], [Op.put(key, b"a"), Op.put(key, b"b")])
    with pytest.raises(EtcdError, match="duplicate key"):
        await kv.txn([], [Op.delete_prefix(prefix), Op.put(key, b"b")])
    gone = await kv.txn([], [Op.delete_prefix(prefix)])
    assert gone.succeeded
    assert (await kv.get_prefix(prefix))[0] == []


async def test_lease_expiry_deletes_keys_in_one_revision(kv: KV, prefix: bytes) -> None:
    with trio.fail_after(15):
        start = await kv.put(prefix + b"seed", b"0")
        kept = await kv.lease_grant(2)
        lapsed = await kv.lease_grant(2)
        await kv.put(prefix + b"kept", b"k", lease=kept)
        await kv.txn([], [Op.put(prefix + b"lapsed1", b"l", lease=lapsed),
                          Op.put(prefix + b"lapsed2", b"l", lease=lapsed)])
        got, _ = await kv.get(prefix + b"kept")
        assert got is not None
        assert got.lease == kept
        deleted: list[tuple[int, list[bytes]]] = []
        async with trio.open_nursery() as nursery:
            async def watch() -> None:
                async with aclosing(kv.watch(prefix, start + 1)) as stream:
                    async for revision, events in stream:
                        gone = [e.kv.key for e in events if e.type == "DELETE"]
                        if gone:
                            deleted.append((revision, gone))
                            nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            while not deleted:  # keeps `kept` alive until the other lease lapsed
                assert await kv.lease_keepalive(kept) > 0
                await trio.sleep(0.5)
        assert [keys for _, keys in deleted] == [[prefix + b"lapsed1", prefix + b"lapsed2"]]
        assert (await kv.get(prefix + b"lapsed1"))[0] is None
        assert (await kv.get(prefix + b"kept"))[0] is not None
        assert await kv.lease_keepalive(lapsed) == 0
        with pytest.raises(EtcdError, match="lease not found"):
            await kv.put(prefix + b"late", b"x", lease=lapsed)
        await kv.lease_revoke(kept)
        assert (await kv.get(prefix + b"kept"))[0] is None
        await kv.lease_revoke(kept)  # revoking twice is not an error
        # A put without a lease detaches the key from its lease: it outlives the revoke.
        third = await kv.lease_grant(5)
        await kv.put(prefix + b"moved", b"1", lease=third)
        await kv.put(prefix + b"moved", b"2")
        await kv.lease_revoke(third)
        assert (await kv.get(prefix + b"moved"))[0] is not None


async def test_watch_groups_by_revision_in_order(kv: KV, prefix: bytes) -> None:
    with trio.fail_after(10):
        start = await kv.put(prefix + b"seed", b"0")
        seen: list[tuple[int, list[tuple[str, bytes, bytes]]]] = []
        done = trio.Event()

        async def watch() -> None:
            async with aclosing(kv.watch(prefix, start + 1)) as stream:
                async for revision, events in stream:
                    seen.append((revision, [(e.type, e.kv.key, e.kv.value) for e in events]))
                    if len(seen) >= 4:
                        done.set()
                        return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            r1 = await kv.put(prefix + b"x", b"1")
            await kv.put(b"/elsewhere-" + prefix, b"not ours")  # outside the prefix
            both = await kv.txn([], [Op.put(prefix + b"y", b"2"), Op.put(prefix + b"z", b"3")])
            r3 = await kv.delete(prefix + b"x")
            r4 = await kv.txn([], [Op.delete_prefix(prefix)])
            await done.wait()
        expected = [(r1, [("PUT", prefix + b"x", b"1")]),
                    (both.revision, [("PUT", prefix + b"y", b"2"),
                                     ("PUT", prefix + b"z", b"3")]),
                    (r3, [("DELETE", prefix + b"x", b"")]),
                    (r4.revision, [("DELETE", prefix + b"seed", b""),
                                   ("DELETE", prefix + b"y", b""),
                                   ("DELETE", prefix + b"z", b"")])]
        assert seen == expected
        # History replays from any revision still kept, with the same grouping.
        replay: list[tuple[int, list[tuple[str, bytes, bytes]]]] = []
        async with aclosing(kv.watch(prefix, both.revision)) as stream:
            async for revision, events in stream:
                replay.append((revision, [(e.type, e.kv.key, e.kv.value) for e in events]))
                if len(replay) == 3:
                    break
        assert replay == expected[1:]
        await kv.delete(b"/elsewhere-" + prefix)


# ------------------------------------------------------------------------------ memory only


async def test_lease_expires_on_the_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    kv = MemoryKV()
    start = trio.current_time()
    lease = await kv.lease_grant(10)
    await kv.put(b"k", b"v", lease=lease)
    seen: list[tuple[float, str]] = []
    async with trio.open_nursery() as nursery:
        async def watch() -> None:
            async with aclosing(kv.watch(b"k", 0)) as stream:
                async for _, events in stream:
                    seen.extend((trio.current_time() - start, e.type) for e in events)
                    nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await trio.sleep(6)
        assert await kv.lease_keepalive(lease) == 10  # now due at 16
        # Nobody calls anything: the watcher alone wakes at the deadline and reports it.
    assert seen == [(16.0, "DELETE")]
    assert await kv.lease_keepalive(lease) == 0


async def test_a_later_lease_does_not_delay_an_earlier_expiry(
        autojump_clock: trio.testing.MockClock) -> None:
    kv = MemoryKV()
    start = trio.current_time()
    long = await kv.lease_grant(100)
    await kv.put(b"/long", b"", lease=long)
    seen: list[tuple[float, str, bytes]] = []
    short_gone = trio.Event()
    async with trio.open_nursery() as nursery:
        async def watch() -> None:
            async with aclosing(kv.watch(b"/", 0)) as stream:
                async for _, events in stream:
                    for e in events:
                        seen.append((trio.current_time() - start, e.type, e.kv.key))
                        if e.kv.key == b"/short" and e.type == "DELETE":
                            short_gone.set()

        nursery.start_soon(watch)
        await trio.sleep(1)  # the watcher now sleeps until t=100 at most
        short = await kv.lease_grant(3)
        await kv.put(b"/short", b"", lease=short)
        await short_gone.wait()
        nursery.cancel_scope.cancel()
    assert seen == [(1.0, "PUT", b"/short"), (4.0, "DELETE", b"/short")]


async def test_handles_share_one_space_and_count_their_own_requests() -> None:
    server = MemoryKV()
    a, b = server.client(), server.client()
    revision = await a.put(b"/k", b"1")
    got, now = await b.get(b"/k")
    assert got is not None
    assert (got.value, now) == (b"1", revision)
    assert (a.requests, b.requests, server.requests) == (1, 1, 0)
    assert server.revision == revision == 2  # a fresh etcd is at revision 1


async def test_limits_answer_with_etcds_messages() -> None:
    kv = MemoryKV(max_txn_ops=3, max_request_bytes=1000)
    with pytest.raises(EtcdError, match="too many operations"):
        await kv.txn([], [Op.put(f"/{i}".encode(), b"") for i in range(4)])
    with pytest.raises(EtcdError, match="request is too large"):
        await kv.txn([], [Op.put(b"/big", b"x" * 1000)])
    assert kv.revision == 1
    with pytest.raises(EtcdError, match="lease not found"):
        await kv.txn([], [Op.put(b"/a", b""), Op.put(b"/b", b"", lease=42)])
    assert kv.revision == 1  # nothing of the failed transaction was applied


async def test_a_watch_before_the_compacted_history_raises() -> None:
    kv = MemoryKV()
    r1 = await kv.put(b"/a", b"1")
    r2 = await kv.put(b"/a", b"2")
    await kv.compact(r2)
    async with aclosing(kv.watch(b"/", r1)) as stale:
        with pytest.raises(EtcdCompacted) as compacted:
            await anext(stale)
    assert compacted.value.compact_revision == r2
    async with aclosing(kv.watch(b"/", r2)) as stream:
        async for revision, events in stream:
            assert (revision, events[0].kv.value) == (r2, b"2")
            break

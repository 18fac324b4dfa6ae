"""`EtcdClient` against a real etcd: the JSON gateway's encodings, transactions that compare
revisions, leases that expire, and a watch that sees every change in order."""

from __future__ import annotations

import pytest
import trio

from yurt.runtime.server.cluster.etcd.client import Compare, EtcdClient, EtcdError, Op, prefix_end


def test_prefix_end() -> None:
    assert prefix_end(b"/a/") == b"/a0"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") == b"\x00"


async def test_put_get_prefix_delete(etcd_urls: list[str], etcd_prefix: bytes) -> None:
    client = EtcdClient(etcd_urls)
    try:
        r1 = await client.put(etcd_prefix + b"a", b"1")
        r2 = await client.put(etcd_prefix + b"b", b"\x00binary\xff")
        assert r2 > r1
        kv, revision = await client.get(etcd_prefix + b"b")
        assert kv is not None
        assert kv.value == b"\x00binary\xff"
        assert kv.mod_revision == r2
        assert revision >= r2
        missing, _ = await client.get(etcd_prefix + b"zzz")
        assert missing is None
        kvs, _ = await client.get_prefix(etcd_prefix)
        assert [k.key for k in kvs] == [etcd_prefix + b"a", etcd_prefix + b"b"]
        await client.delete(etcd_prefix + b"a")
        kvs, _ = await client.get_prefix(etcd_prefix)
        assert [k.key for k in kvs] == [etcd_prefix + b"b"]
        assert client.requests == 7
    finally:
        await client.aclose()


async def test_txn_compares_revisions(etcd_urls: list[str], etcd_prefix: bytes) -> None:
    client = EtcdClient(etcd_urls)
    key = etcd_prefix + b"counter"
    try:
        created = await client.txn([Compare.create_revision(key, "=", 0)],
                                   [Op.put(key, b"1")], [Op.get(key)])
        assert created.succeeded
        again = await client.txn([Compare.create_revision(key, "=", 0)],
                                 [Op.put(key, b"x")], [Op.get(key)])
        assert not again.succeeded  # etcd omits "succeeded" when false
        assert again.responses[0][0].value == b"1"
        stale = await client.txn([Compare.mod_revision(key, "=", created.revision - 1)],
                                 [Op.put(key, b"2")])
        assert not stale.succeeded
        fresh = await client.txn([Compare.mod_revision(key, "=", created.revision)],
                                 [Op.put(key, b"2"), Op.put(etcd_prefix + b"other", b"o")])
        assert fresh.succeeded
        kv, _ = await client.get(key)
        assert kv is not None
        assert (kv.value, kv.mod_revision) == (b"2", fresh.revision)
        gone = await client.txn([], [Op.delete_prefix(etcd_prefix)])
        assert gone.succeeded
        assert (await client.get_prefix(etcd_prefix))[0] == []
    finally:
        await client.aclose()


async def test_lease_expires_and_keepalive_holds(etcd_urls: list[str],
                                                  etcd_prefix: bytes) -> None:
    client = EtcdClient(etcd_urls)
    try:
        with trio.fail_after(15):
            kept = await client.lease_grant(2)
            lapsed = await client.lease_grant(2)
            await client.put(etcd_prefix + b"kept", b"k", lease=kept)
            await client.put(etcd_prefix + b"lapsed", b"l", lease=lapsed)
            for _ in range(6):  # 3 s: past the TTL and the time etcd takes to expire it
                assert await client.lease_keepalive(kept) > 0
                await trio.sleep(0.5)
            assert (await client.get(etcd_prefix + b"kept"))[0] is not None
            assert (await client.get(etcd_prefix + b"lapsed"))[0] is None
            assert await client.lease_keepalive(lapsed) == 0
            await client.lease_revoke(kept)
            assert (await client.get(etcd_prefix + b"kept"))[0] is None
            await client.lease_revoke(kept)  # revoking twice is not an error
    finally:
        await client.aclose()


async def test_watch_sees_every_change_in_order(etcd_urls: list[str],
                                                etcd_prefix: bytes) -> None:
    client = EtcdClient(etcd_urls)
    try:
        with trio.fail_after(10):
            start = await client.put(etcd_prefix + b"seed", b"0")
            seen: list[tuple[int, str, bytes, bytes]] = []
            done = trio.Event()

            async def watch() -> None:
                async for revision, events in client.watch(etcd_prefix, start + 1):
                    for e in events:
                        seen.append((revision, e.type, e.kv.key, e.kv.value))
                    if len(seen) >= 4:
                        done.set()
                        return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                r1 = await client.put(etcd_prefix + b"x", b"1")
                both = await client.txn([], [Op.put(etcd_prefix + b"y", b"2"),
                                             Op.put(etcd_prefix + b"z", b"3")])
                r3 = await client.delete(etcd_prefix + b"x")
                await done.wait()
            assert seen == [(r1, "PUT", etcd_prefix + b"x", b"1"),
                            (both.revision, "PUT", etcd_prefix + b"y", b"2"),
                            (both.revision, "PUT", etcd_prefix + b"z", b"3"),
                            (r3, "DELETE", etcd_prefix + b"x", b"")]
    finally:
        await client.aclose()


async def test_second_url_used_when_first_is_down(etcd_urls: list[str],
                                                  etcd_prefix: bytes) -> None:
    from yurt.runtime.server.cluster.etcd.process import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    client = EtcdClient([dead, *etcd_urls])
    try:
        await client.put(etcd_prefix + b"k", b"v")
        assert (await client.get(etcd_prefix + b"k"))[0] is not None
        assert client.requests == 3  # one failed connect, then the live member stays current
    finally:
        await client.aclose()
    nobody = EtcdClient([dead])
    try:
        with pytest.raises(EtcdError, match="no etcd member answered"):
            await nobody.get(b"k")
    finally:
        await nobody.aclose()

"""ACL objects in both object stores: `ObjectStore` on a real SQLite file, `ClusterObjectStore`
on a real etcd.

Theory. Both stores run the same table helpers (server/acl/state.py) in one transaction per
operation, so a bootstrap's check and its token are one commit: of bootstraps racing on one
file (two stores, as two processes would hold) or through two servers of one cluster, exactly
one wins and the others read "ACL bootstrap already done". The operator's
`acl-bootstrap-reset` file in the server's data directory allows one more. Expiry is checked
against the store's clock (replaced here); expired tokens and one-time tokens never open
anything, and go with a later write of their kind. Every ACL write moves `acl_generation`,
which the resolver watches.

Layer 2: real files and a real etcd, the real clock for deadlines; the stores' token clock is
a plain function the test sets.
"""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.acl.identity import AclTokenError
from yurt.runtime.server.acl.resolve import AclResolver
from yurt.runtime.server.acl.validate import AclRefused
from yurt.runtime.server.cluster.etcd.client import EtcdClient
from yurt.runtime.server.cluster.server import ClusterServer
from yurt.runtime.server.state.etcd import ClusterStore
from yurt.runtime.server.state.objects_etcd import ClusterObjectStore
from yurt.runtime.server.state.objects_sqlite import AclObjects, ObjectStore
from yurt.runtime.structs.acl import AclPolicy, AclToken

S = 1_000_000_000
HOUR = 3600 * S
LIMITS = {"min_ttl_ns": 60 * S, "max_ttl_ns": 24 * HOUR}


class Counter:
    """The server's index counter (`IndexSource`) for a store on its own."""

    def __init__(self) -> None:
        self.index = 100
        self._lock = trio.Lock()

    @asynccontextmanager
    async def change(self) -> AsyncIterator[int]:
        async with self._lock:
            self.index += 1
            yield self.index


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000 * S

    def __call__(self) -> int:
        return self.now


async def race_bootstraps(stores: list[AclObjects], each: int) -> tuple[list[AclToken],
                                                                         list[str]]:
    won: list[AclToken] = []
    lost: list[str] = []

    async def attempt(store: AclObjects) -> None:
        try:
            won.append(await store.acl_bootstrap())
        except AclRefused as e:
            lost.append(e.message)

    async with trio.open_nursery() as nursery:
        for _ in range(each):
            for store in stores:
                nursery.start_soon(attempt, store)
    return won, lost


# ---------------------------------------------------------------------- SQLite

async def test_racing_bootstraps_on_one_file_make_one_token(tmp_path: Path) -> None:
    with trio.fail_after(30):
        # Two stores on one file, each with its own lock: only the transaction orders them.
        a = await ObjectStore.open(tmp_path, Counter())
        b = await ObjectStore.open(tmp_path, Counter())
        b._index.index = 500  # type: ignore[attr-defined]
        won, lost = await race_bootstraps([a, b], 4)
        assert len(won) == 1
        assert lost == [f"ACL bootstrap already done (reset index: {won[0].create_index})"] * 7
        assert [t.accessor_id for t in await b.acl_tokens()] == [won[0].accessor_id]
        assert stat.S_IMODE((tmp_path / "objects.db").stat().st_mode) == 0o600


async def test_the_reset_file_allows_one_more_bootstrap(tmp_path: Path) -> None:
    with trio.fail_after(30):
        store = await ObjectStore.open(tmp_path, Counter())
        first = await store.acl_bootstrap()
        (tmp_path / "acl-bootstrap-reset").write_text(f"  {first.create_index}\n")
        second = await store.acl_bootstrap("2b778dd9-f5f1-6f29-b4b4-9a5fa948757a")
        assert second.secret_id == "2b778dd9-f5f1-6f29-b4b4-9a5fa948757a"
        with pytest.raises(AclRefused, match="specified 101, reset index: 102"):
            await store.acl_bootstrap()
        (tmp_path / "acl-bootstrap-reset").write_text("garbage")
        with pytest.raises(AclRefused, match=r"already done \(reset index: 102\)"):
            await store.acl_bootstrap()
        # A store opened again (an agent restarted) finds all of it.
        again = await ObjectStore.open(tmp_path, Counter())
        found = await again.acl_token_by_secret(second.secret_id)
        assert found is not None
        assert found.accessor_id == second.accessor_id


async def test_expired_tokens_never_act_and_go_later(tmp_path: Path) -> None:
    with trio.fail_after(30):
        clock = Clock()
        store = await ObjectStore.open(tmp_path, Counter())
        store.now_ns = clock
        resolver = AclResolver(store, enabled=True, now_ns=clock)
        token = await store.put_acl_token(
            AclToken(type="management", expiration_ttl=60 * S), **LIMITS)
        assert (await resolver.resolve(token.secret_id)).is_management()
        clock.now += 60 * S
        with pytest.raises(AclTokenError, match="ACL token expired"):
            await resolver.resolve(token.secret_id)
        # Listed until an hour has passed, then gone with the next token write.
        clock.now += HOUR
        assert await store.acl_token(token.accessor_id) is not None
        await store.put_acl_token(AclToken(type="client", policies=["p"]), **LIMITS)
        assert await store.acl_token(token.accessor_id) is None
        with pytest.raises(AclTokenError, match="ACL token not found"):
            await resolver.resolve(token.secret_id)


async def test_one_time_tokens_expire_and_are_used_once(tmp_path: Path) -> None:
    with trio.fail_after(30):
        clock = Clock()
        store = await ObjectStore.open(tmp_path, Counter())
        store.now_ns = clock
        token = await store.acl_bootstrap()
        late = await store.create_one_time_token(token.accessor_id)
        clock.now += 10 * 60 * S
        with pytest.raises(AclRefused, match="Permission denied"):
            await store.exchange_one_time_token(late.one_time_secret_id)
        ott = await store.create_one_time_token(token.accessor_id)
        assert (await store.exchange_one_time_token(ott.one_time_secret_id)) == token
        with pytest.raises(AclRefused, match="Permission denied"):
            await store.exchange_one_time_token(ott.one_time_secret_id)


async def test_each_acl_write_moves_the_generation(tmp_path: Path) -> None:
    with trio.fail_after(30):
        store = await ObjectStore.open(tmp_path, Counter())
        before = store.acl_generation
        await store.put_acl_policy(AclPolicy(name="p"))
        await store.acl_policies()
        assert store.acl_generation == before + 1
        with pytest.raises(AclRefused):
            await store.delete_acl_token("nope")
        assert store.acl_generation == before + 2


# ---------------------------------------------------------------------- etcd

@asynccontextmanager
async def cluster_stores(urls: list[str], prefix: bytes, data_dirs: list[Path]
                         ) -> AsyncIterator[list[ClusterObjectStore]]:
    """One `ClusterObjectStore` per data dir, each over its own server and etcd client."""
    stores = []
    async with trio.open_nursery() as nursery:
        clients = []
        for data_dir in data_dirs:
            kv = EtcdClient(urls)
            clients.append(kv)
            server = ClusterServer(EventBroker(), ClusterStore(kv, prefix), kv, prefix)
            await server.load()
            await nursery.start(server.follow)
            stores.append(ClusterObjectStore(server, data_dir))
        try:
            yield stores
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                for kv in clients:
                    await kv.aclose()


async def test_racing_bootstraps_through_two_servers_make_one_token(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    with trio.fail_after(60):
        dirs = [tmp_path / "s1", tmp_path / "s2"]
        for d in dirs:
            d.mkdir()
        async with cluster_stores(etcd_urls, etcd_prefix, dirs) as (s1, s2):
            won, lost = await race_bootstraps([s1, s2], 3)
            assert len(won) == 1
            done = f"ACL bootstrap already done (reset index: {won[0].create_index})"
            assert lost == [done] * 5
            assert [t.accessor_id for t in await s2.acl_tokens()] == [won[0].accessor_id]
            # The reset file is read from the data dir of the server that is asked.
            (dirs[1] / "acl-bootstrap-reset").write_text(str(won[0].create_index))
            with pytest.raises(AclRefused, match="already done"):
                await s1.acl_bootstrap()
            again = await s2.acl_bootstrap()
            assert again.create_index > won[0].create_index


async def test_the_cluster_keeps_tokens_policies_and_roles(
        etcd_urls: list[str], etcd_prefix: bytes, tmp_path: Path) -> None:
    from yurt.runtime.structs.acl import AclPolicyLink, AclRole, AclRoleLink

    with trio.fail_after(60):
        async with cluster_stores(etcd_urls, etcd_prefix, [tmp_path]) as (s1,):
            clock = Clock()
            s1.now_ns = clock
            await s1.put_acl_policy(AclPolicy(name="read", rules='namespace "*" {'
                                                               ' policy = "read" }'))
            role = await s1.put_acl_role(AclRole(name="ops", policies=[
                AclPolicyLink(name="read")]))
            with pytest.raises(AclRefused, match="cannot find policy nope"):
                await s1.put_acl_role(AclRole(name="x", policies=[AclPolicyLink(name="nope")]))
            token = await s1.put_acl_token(AclToken(
                type="client", roles=[AclRoleLink(name="ops")], expiration_ttl=HOUR),
                **LIMITS)
            found = await s1.acl_token_by_secret(token.secret_id)
            assert found == token
            assert [(r.id, r.name) for r in found.roles] == [(role.id, "ops")]
            assert await s1.acl_token_by_secret(token.accessor_id) is None
            assert [p.name for p in await s1.acl_policies_named(["read", "gone"])] == ["read"]
            assert await s1.acl_role_by_name("ops") == role
            assert await s1.acl_policy("../x") is None
            # The secret is in no key: tokens are keyed by a digest of it.
            kvs, _ = await s1._kv.get_prefix(etcd_prefix)
            assert not any(token.secret_id.encode() in kv.key for kv in kvs)

            resolver = AclResolver(s1, enabled=True, now_ns=clock)
            acl = (await resolver.resolve(token.secret_id)).acl
            assert acl is not None
            assert acl.allow_namespace_operation("web", "read-job")
            clock.now += HOUR
            with pytest.raises(AclTokenError, match="ACL token expired"):
                await resolver.resolve(token.secret_id)

            await s1.delete_acl_role(role.id)
            with pytest.raises(AclRefused, match="ACL role not found"):
                await s1.delete_acl_role(role.id)
            left = await s1.acl_token(token.accessor_id)
            assert left is not None
            assert left.roles == []
            ott = await s1.create_one_time_token(token.accessor_id)
            with pytest.raises(AclRefused, match="Permission denied"):
                await s1.exchange_one_time_token(ott.one_time_secret_id)  # token expired

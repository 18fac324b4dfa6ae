"""`AclResolver`: a secret to an identity, and the cache that keeps requests off the store.

Theory. "" is the anonymous token (the `anonymous` policy's ACL, or nothing); an unknown
secret and an expired token are refused with Nomad's texts; a management token acts under
`MANAGEMENT_ACL`; a client token under its policies and its roles' policies, missing ones
skipped. What was read is kept for the TTLs (Nomad's agent `token_ttl`, `policy_ttl`,
`role_ttl`), except that any ACL write through the store (its `acl_generation`) drops it at
once; a token's expiration is checked on every request, cached or not.

Layer 0 in Trio's clothes: a fake store in memory that counts its reads, and a fake clock
passed in. Nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Collection

import pytest

from yurt.runtime.server.acl.acl import MANAGEMENT_ACL
from yurt.runtime.server.acl.identity import ACL_DISABLED, AclTokenError
from yurt.runtime.server.acl.resolve import AclResolver
from yurt.runtime.structs.acl import (
    AclPolicy,
    AclPolicyLink,
    AclRole,
    AclRoleLink,
    AclToken,
)

S = 1_000_000_000
SECRET = "11111111-2222-4333-8444-555555555555"
OTHER = "aaaaaaaa-2222-4333-8444-555555555555"
READ_DEFAULT = 'namespace "default" { policy = "read" }'
WRITE_WEB = 'namespace "web" { policy = "write" }'


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000 * S

    def __call__(self) -> int:
        return self.now


class FakeStore:
    """The resolver's `AclSource`, in memory; `reads` counts round trips."""

    def __init__(self) -> None:
        self.tokens: dict[str, AclToken] = {}
        self.policies: dict[str, AclPolicy] = {}
        self.roles: dict[str, AclRole] = {}
        self.reads = 0
        self.generation = 0
        self.index = 0

    @property
    def acl_generation(self) -> int:
        return self.generation

    def write(self) -> None:
        """As a store does after each ACL write."""
        self.generation += 1

    def policy(self, name: str, rules: str) -> None:
        self.index += 1
        self.policies[name] = AclPolicy(name=name, rules=rules, modify_index=self.index)

    async def acl_token_by_secret(self, secret: str) -> AclToken | None:
        self.reads += 1
        return self.tokens.get(secret)

    async def acl_policies_named(self, names: Collection[str]) -> list[AclPolicy]:
        self.reads += 1
        return [self.policies[n] for n in names if n in self.policies]

    async def acl_roles_by_id(self, ids: Collection[str]) -> list[AclRole]:
        self.reads += 1
        return [self.roles[i] for i in ids if i in self.roles]


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def resolver(store: FakeStore, clock: Clock, **kwargs: object) -> AclResolver:
    options: dict[str, object] = {"enabled": True, "now_ns": clock, "token_ttl": 30.0,
                                  "policy_ttl": 60.0, "role_ttl": 60.0} | kwargs
    return AclResolver(store, **options)  # type: ignore[arg-type]


async def test_disabled_acls_allow_everything(store: FakeStore, clock: Clock) -> None:
    r = resolver(store, clock, enabled=False)
    assert await r.resolve("") is ACL_DISABLED
    assert await r.resolve("whatever") is ACL_DISABLED
    assert store.reads == 0


async def test_anonymous_is_the_anonymous_policy_or_nothing(store: FakeStore,
                                                            clock: Clock) -> None:
    r = resolver(store, clock)
    nobody = await r.resolve("")
    assert nobody.token is None
    assert nobody.acl is not None
    assert not nobody.acl.allow_namespace_operation("default", "read-job")
    store.policy("anonymous", READ_DEFAULT)
    store.write()
    anonymous = await r.resolve("")
    assert anonymous.acl is not None
    assert anonymous.acl.allow_namespace_operation("default", "read-job")
    assert not anonymous.acl.allow_namespace_operation("default", "submit-job")


async def test_unknown_and_expired_tokens_are_refused(store: FakeStore, clock: Clock) -> None:
    r = resolver(store, clock)
    with pytest.raises(AclTokenError, match=r"^ACL token not found$"):
        await r.resolve(SECRET)
    reads = store.reads
    with pytest.raises(AclTokenError, match=r"^ACL token not found$"):
        await r.resolve("not a uuid")
    assert store.reads == reads  # no stored secret is anything but a UUID
    store.tokens[SECRET] = AclToken(accessor_id="a", secret_id=SECRET, type="management",
                                    expiration_time=clock.now - 1)
    with pytest.raises(AclTokenError, match=r"^ACL token expired$"):
        await r.resolve(SECRET)


async def test_management_and_client_tokens(store: FakeStore, clock: Clock) -> None:
    store.tokens[SECRET] = AclToken(accessor_id="m", secret_id=SECRET, type="management")
    store.policy("read-default", READ_DEFAULT)
    store.policy("write-web", WRITE_WEB)
    store.roles["r1"] = AclRole(id="r1", name="web", policies=[
        AclPolicyLink(name="write-web"), AclPolicyLink(name="gone")])
    store.tokens[OTHER] = AclToken(accessor_id="c", secret_id=OTHER, policies=[
        "read-default", "never-written"], roles=[AclRoleLink(id="r1"), AclRoleLink(id="r9")])
    r = resolver(store, clock)
    management = await r.resolve(SECRET)
    assert management.acl is MANAGEMENT_ACL
    assert management.token == store.tokens[SECRET]
    client = await r.resolve(OTHER)
    assert client.token == store.tokens[OTHER]
    assert client.acl is not None
    assert not client.acl.is_management()
    assert client.acl.allow_namespace_operation("default", "read-job")
    assert client.acl.allow_namespace_operation("web", "submit-job")
    assert not client.acl.allow_namespace_operation("default", "submit-job")


async def test_a_static_management_token_is_management_and_stored_nowhere(
        store: FakeStore, clock: Clock) -> None:
    r = resolver(store, clock, static_management="legacy-token")
    found = await r.resolve("legacy-token")
    assert found.acl is MANAGEMENT_ACL
    assert found.token is not None
    assert found.token.is_management()
    assert store.reads == 0
    with pytest.raises(AclTokenError):
        await r.resolve("legacy-tokeN")


async def test_the_steady_state_reads_nothing(store: FakeStore, clock: Clock) -> None:
    store.policy("read-default", READ_DEFAULT)
    store.roles["r1"] = AclRole(id="r1", name="web", policies=[AclPolicyLink(name="x")])
    store.tokens[SECRET] = AclToken(accessor_id="c", secret_id=SECRET,
                                    policies=["read-default"], roles=[AclRoleLink(id="r1")])
    r = resolver(store, clock)
    first = await r.resolve(SECRET)
    await r.resolve("")
    reads = store.reads
    for _ in range(100):
        clock.now += S // 10
        assert await r.resolve(SECRET) is first
        await r.resolve("")
    assert store.reads == reads


async def test_entries_expire_after_their_ttl(store: FakeStore, clock: Clock) -> None:
    store.policy("p", READ_DEFAULT)
    store.tokens[SECRET] = AclToken(accessor_id="c", secret_id=SECRET, policies=["p"])
    r = resolver(store, clock)
    await r.resolve(SECRET)
    reads = store.reads
    # Changed behind the store's back (as another server of a cluster would).
    store.tokens[SECRET] = AclToken(accessor_id="c", secret_id=SECRET, type="management")
    clock.now += 30 * S - 1
    assert (await r.resolve(SECRET)).acl is not MANAGEMENT_ACL
    assert store.reads == reads
    clock.now += 1
    assert (await r.resolve(SECRET)).acl is MANAGEMENT_ACL
    # Deleted elsewhere: refused once the token's entry expires.
    del store.tokens[SECRET]
    clock.now += 30 * S
    with pytest.raises(AclTokenError, match="not found"):
        await r.resolve(SECRET)


async def test_a_policy_changed_elsewhere_counts_after_policy_ttl(store: FakeStore,
                                                                  clock: Clock) -> None:
    store.policy("p", READ_DEFAULT)
    store.tokens[SECRET] = AclToken(accessor_id="c", secret_id=SECRET, policies=["p"])
    r = resolver(store, clock, token_ttl=120.0, policy_ttl=10.0)
    await r.resolve(SECRET)
    store.policy("p", WRITE_WEB)
    clock.now += 10 * S - 1
    acl = (await r.resolve(SECRET)).acl
    assert acl is not None
    assert acl.allow_namespace_operation("default", "read-job")
    clock.now += 1
    acl = (await r.resolve(SECRET)).acl
    assert acl is not None
    assert not acl.allow_namespace_operation("default", "read-job")
    assert acl.allow_namespace_operation("web", "submit-job")


async def test_a_write_through_the_store_invalidates_at_once(store: FakeStore,
                                                             clock: Clock) -> None:
    store.policy("p", READ_DEFAULT)
    store.tokens[SECRET] = AclToken(accessor_id="c", secret_id=SECRET, policies=["p"])
    r = resolver(store, clock)
    await r.resolve(SECRET)
    del store.tokens[SECRET]
    store.write()
    with pytest.raises(AclTokenError, match="not found"):
        await r.resolve(SECRET)
    store.tokens[SECRET] = AclToken(accessor_id="c", secret_id=SECRET, policies=["p"])
    store.policy("p", WRITE_WEB)
    store.write()
    acl = (await r.resolve(SECRET)).acl
    assert acl is not None
    assert acl.allow_namespace_operation("web", "submit-job")


async def test_a_read_that_overlapped_a_write_is_not_kept(store: FakeStore,
                                                          clock: Clock) -> None:
    store.policy("p", READ_DEFAULT)
    store.tokens[SECRET] = AclToken(accessor_id="c", secret_id=SECRET, policies=["p"])
    original = store.acl_token_by_secret

    async def read_during_a_write(secret: str) -> AclToken | None:
        found = await original(secret)
        store.write()  # committed while the read was in flight
        return found

    store.acl_token_by_secret = read_during_a_write  # type: ignore[method-assign]
    r = resolver(store, clock)
    await r.resolve(SECRET)
    store.acl_token_by_secret = original  # type: ignore[method-assign]
    reads = store.reads
    await r.resolve(SECRET)
    assert store.reads > reads  # read again: the first answer was not kept


async def test_a_cached_token_still_expires_on_time(store: FakeStore, clock: Clock) -> None:
    store.tokens[SECRET] = AclToken(accessor_id="c", secret_id=SECRET, type="management",
                                    expiration_time=clock.now + 5 * S)
    r = resolver(store, clock)
    assert (await r.resolve(SECRET)).acl is MANAGEMENT_ACL
    clock.now += 5 * S
    with pytest.raises(AclTokenError, match=r"^ACL token expired$"):
        await r.resolve(SECRET)


async def test_compiled_acls_are_shared_and_follow_policy_versions(store: FakeStore,
                                                                   clock: Clock) -> None:
    store.policy("p", READ_DEFAULT)
    store.tokens[SECRET] = AclToken(accessor_id="a", secret_id=SECRET, policies=["p"])
    store.tokens[OTHER] = AclToken(accessor_id="b", secret_id=OTHER, policies=["p", "p"])
    r = resolver(store, clock)
    a, b = await r.resolve(SECRET), await r.resolve(OTHER)
    assert a.acl is b.acl
    store.policy("p", WRITE_WEB)
    store.write()
    c = await r.resolve(SECRET)
    assert c.acl is not a.acl
    assert c.acl is not None
    assert c.acl.allow_namespace_operation("web", "submit-job")

"""`AclResolver`: a request's secret to its `Identity` (identity.py `TokenResolver`), cached.

Resolution is Nomad's (nomad/auth/auth.go `resolveSecretToken`, `resolveACLFromToken`):
- `""` is the anonymous token: the ACL of the policy named `anonymous`, or nothing when there
  is none (`Identity(token=None, acl=<empty>)`).
- a secret no token has: `AclTokenError("ACL token not found")`; one whose token is past its
  `ExpirationTime`: `AclTokenError("ACL token expired")`. Stored secrets are UUIDs (server/acl/
  state.py takes no other), so anything else is refused without a read.
- a management token: `MANAGEMENT_ACL`; a client token: its policies and its roles' policies,
  compiled together (acl.py `compile_acl`), those that do not exist skipped.
- ACLs disabled: always `ACL_DISABLED`. A `static_management` secret (the agent's legacy
  configured token) is a management token that is stored nowhere; it is compared in constant
  time.

Caching, so that a request costs no store round trip in the steady state: a resolved identity
is kept until the first of its parts would expire (the token `token_ttl`, each policy
`policy_ttl`, each role `role_ttl` after it was read: Nomad's agent `acl { token_ttl,
policy_ttl, role_ttl }`), policies and roles are kept by name and ID (a missing one too), and
compiled ACLs by the names and ModifyIndexes of their policies. A token's expiration is
checked against the clock on every request, cached or not. Every ACL write made through the
store moves its `acl_generation`; the next resolve sees it and drops every cached read, and a
read that overlapped a write is used for its own request but not kept. Writes made elsewhere
(another server of a cluster) are seen once the entries expire. Unknown secrets are not
cached: a token created elsewhere works at once, and each such request costs one read.

The clock (`now_ns`) is a parameter, so the cache is tested with a fake one; no Trio clock,
no timer: entries expire when a request finds them old.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar, final

import trio

from yurt.runtime.server.acl.acl import MANAGEMENT_ACL, Acl, compile_acl
from yurt.runtime.server.acl.identity import ACL_DISABLED, AclTokenError, Identity
from yurt.runtime.server.acl.policy import Policy, PolicyError, parse_policy
from yurt.runtime.server.acl.validate import is_uuid
from yurt.runtime.structs.acl import (
    ANONYMOUS_POLICY,
    TOKEN_MANAGEMENT,
    AclPolicy,
    AclRole,
    AclToken,
)

log = logging.getLogger("yurt.server.acl")

V = TypeVar("V")
K = TypeVar("K")
NOT_FOUND: Final = "ACL token not found"
EXPIRED: Final = "ACL token expired"
#: Bounds on each cache: past them the oldest entries go first.
MAX_IDENTITIES: Final = 4096
MAX_OBJECTS: Final = 4096
MAX_COMPILED: Final = 1024
_NS: Final = 1_000_000_000
#: The identity of the `static_management` secret.
STATIC_ACCESSOR: Final = "static-management"


class AclSource(Protocol):
    """What the resolver reads (server/state/objects_sqlite.py `AclObjects`)."""

    @property
    def acl_generation(self) -> int: ...
    async def acl_token_by_secret(self, secret: str) -> AclToken | None: ...
    async def acl_policies_named(self, names: Collection[str]) -> list[AclPolicy]: ...
    async def acl_roles_by_id(self, ids: Collection[str]) -> list[AclRole]: ...


@dataclass(frozen=True)
class _Kept(Generic[V]):
    value: V
    expires_at: int


def _put(cache: dict[K, V], key: K, value: V, limit: int) -> None:
    """`cache[key] = value`, the oldest entry going first once `cache` holds `limit`."""
    if len(cache) >= limit and key not in cache:
        cache.pop(next(iter(cache)))
    cache[key] = value


@final
class AclResolver:
    """See the module header. `token_ttl`, `policy_ttl`, `role_ttl` are seconds."""

    def __init__(self, store: AclSource, *, enabled: bool, static_management: str = "",
                 now_ns: Callable[[], int] = time.time_ns, token_ttl: float = 30.0,
                 policy_ttl: float = 30.0, role_ttl: float = 30.0) -> None:
        self._store = store
        self._enabled = enabled
        self._static = static_management.encode()
        self._now = now_ns
        self._token_ttl = int(token_ttl * _NS)
        self._policy_ttl = int(policy_ttl * _NS)
        self._role_ttl = int(role_ttl * _NS)
        self._generation = store.acl_generation
        #: By a digest of the secret (b"" for the anonymous token).
        self._identities: dict[bytes, _Kept[Identity]] = {}
        self._policies: dict[str, _Kept[AclPolicy | None]] = {}
        self._roles: dict[str, _Kept[AclRole | None]] = {}
        self._compiled: dict[tuple[tuple[str, int], ...], Acl] = {}
        self._static_identity = Identity(
            token=AclToken(accessor_id=STATIC_ACCESSOR, secret_id=static_management,
                           name="Static management token", type=TOKEN_MANAGEMENT),
            acl=MANAGEMENT_ACL)

    def invalidate(self) -> None:
        """Drop every cached read (compiled ACLs stay: they are keyed by what they compile)."""
        self._identities.clear()
        self._policies.clear()
        self._roles.clear()

    async def resolve(self, secret: str) -> Identity:
        if not self._enabled:
            await trio.lowlevel.checkpoint()
            return ACL_DISABLED
        if self._static and secret and hmac.compare_digest(secret.encode(), self._static):
            await trio.lowlevel.checkpoint()
            return self._static_identity
        generation = self._store.acl_generation
        if generation != self._generation:
            self.invalidate()
            self._generation = generation
        now = self._now()
        key = hashlib.sha256(secret.encode()).digest() if secret else b""
        kept = self._identities.get(key)
        if kept is not None and kept.expires_at > now:
            token = kept.value.token
            if token is not None and token.is_expired(now):
                self._identities.pop(key, None)
                raise AclTokenError(EXPIRED)
            await trio.lowlevel.checkpoint()
            return kept.value
        identity, expires_at = await self._assemble(secret, now)
        if self._store.acl_generation == generation:
            _put(self._identities, key, _Kept(identity, expires_at), MAX_IDENTITIES)
        return identity

    async def _assemble(self, secret: str, now: int) -> tuple[Identity, int]:
        """The identity of `secret` read from the store (and the caches of its parts), and
        when the first of its parts expires."""
        if not secret:
            token = None
            expires_at = now + self._policy_ttl
            names: list[str] = [ANONYMOUS_POLICY]
        else:
            if not is_uuid(secret):
                await trio.lowlevel.checkpoint()
                raise AclTokenError(NOT_FOUND)
            found = await self._store.acl_token_by_secret(secret)
            if found is None:
                raise AclTokenError(NOT_FOUND)
            if found.is_expired(now):
                raise AclTokenError(EXPIRED)
            token, expires_at = found, now + self._token_ttl
            if found.type == TOKEN_MANAGEMENT:
                return Identity(token, MANAGEMENT_ACL), expires_at
            names = list(found.policies)
            if found.roles:
                roles, roles_expire = await self._roles_of([r.id for r in found.roles], now)
                names += [link.name for role in roles for link in role.policies]
                expires_at = min(expires_at, roles_expire)
        policies, policies_expire = await self._policies_of(names, now)
        return Identity(token, self._compile(policies)), min(expires_at, policies_expire)

    async def _roles_of(self, ids: list[str], now: int) -> tuple[list[AclRole], int]:
        return await self._cached(self._roles, ids, self._store.acl_roles_by_id,
                                  lambda role: role.id, now, self._role_ttl)

    async def _policies_of(self, names: list[str], now: int) -> tuple[list[AclPolicy], int]:
        return await self._cached(self._policies, names, self._store.acl_policies_named,
                                  lambda policy: policy.name, now, self._policy_ttl)

    async def _cached(self, cache: dict[str, _Kept[V | None]], keys: Iterable[str],
                      read: Callable[[Collection[str]], Awaitable[list[V]]],
                      key_of: Callable[[V], str],
                      now: int, ttl: int) -> tuple[list[V], int]:
        """The objects of `keys` that exist, from `cache` where it holds them still fresh,
        else in one read; and when the first of them expires."""
        wanted = list(dict.fromkeys(keys))
        fresh = {k: cache[k] for k in wanted if k in cache and cache[k].expires_at > now}
        missing = [k for k in wanted if k not in fresh]
        if missing:
            generation = self._store.acl_generation
            by_key = {key_of(v): v for v in await read(missing)}
            for k in missing:
                fresh[k] = _Kept(by_key.get(k), now + ttl)
                if self._store.acl_generation == generation:
                    _put(cache, k, fresh[k], MAX_OBJECTS)
        else:
            await trio.lowlevel.checkpoint()
        values = [fresh[k].value for k in wanted]
        expires_at = min((fresh[k].expires_at for k in wanted), default=now + ttl)
        return [v for v in values if v is not None], expires_at

    def _compile(self, policies: list[AclPolicy]) -> Acl:
        key = tuple(sorted((p.name, p.modify_index) for p in policies))
        acl = self._compiled.get(key)
        if acl is None:
            parsed: list[Policy] = []
            for policy in policies:
                try:
                    parsed.append(parse_policy(policy.rules, name=policy.name))
                except PolicyError as e:  # stored before a stricter parser: grants nothing
                    log.warning("ACL policy %s no longer parses: %s", policy.name, e)
            acl = compile_acl(parsed)
            _put(self._compiled, key, acl, MAX_COMPILED)
        return acl

"""The ACL tables: policies, tokens, roles, one-time tokens, and the bootstrap mark.

The SQL helpers take an open connection and run inside the caller's transaction
(server/state/objects_sqlite.py owns the file, the thread and the index; a cluster loads the
rows into a private in-memory database and runs the same helpers: objects_etcd.py). Nothing
here does I/O of its own; refusals are `AclRefused` (validate.py), raised before anything is
written, so the caller's transaction leaves the tables as they were.

What is stored, as Nomad's state store keeps it (nomad/state/state_store.go,
state_store_acl.go):
- A policy by name. Deleting one leaves tokens and roles naming it: resolution skips policies
  that do not exist (nomad/auth/auth.go `resolveACLFromToken`).
- A token by AccessorID, its SecretID unique. A token may name policies that do not exist
  (nomad/acl_endpoint.go `upsertTokens` checks only its roles). Its role links are stored by
  ID alone; a read fills in each role's current name and drops links to deleted roles
  (state_store_acl.go `fixTokenRoleLinks`). An update keeps the SecretID, CreateTime and
  ExpirationTime.
- A role by ID, its name unique; every policy it names must exist when it is written.
- A one-time token per AccessorID (a new one replaces the old), its secret unique.
- `acl_meta`: `bootstrap` is the index of the last bootstrap (`acl_token_bootstrap`).

Expired tokens and one-time tokens never authenticate (resolve.py checks the time, and
`exchange_one_time` too); they are removed lazily, by the next write of their kind
(`purge_expired`): tokens an hour after they expired (Nomad's `acl_token_gc_threshold`), so
`acl token list` still shows them for a while, one-time tokens at once.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Collection
from typing import Final, TypeVar

import msgspec

from yurt.runtime.server.acl.validate import (
    AclRefused,
    canonical_token,
    is_uuid,
    refusal,
    token_problems,
)
from yurt.runtime.structs.acl import (
    TOKEN_MANAGEMENT,
    AclPolicy,
    AclPolicyLink,
    AclRole,
    AclRoleLink,
    AclToken,
    OneTimeToken,
)

SCHEMAS: Final = (
    "CREATE TABLE IF NOT EXISTS acl_policies (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS acl_tokens (accessor TEXT PRIMARY KEY, "
    "secret TEXT NOT NULL UNIQUE, create_index INTEGER NOT NULL, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS acl_roles (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
    "value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS acl_one_time_tokens (accessor TEXT PRIMARY KEY, "
    "secret TEXT NOT NULL UNIQUE, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS acl_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)
#: Every ACL table, as a cluster copies them row by row (objects_etcd.py).
TABLES: Final = ("acl_policies", "acl_tokens", "acl_roles", "acl_one_time_tokens", "acl_meta")

#: nomad/acl_endpoint.go `UpsertOneTimeToken`: a one-time token lasts ten minutes.
ONE_TIME_TTL_NS: Final = 10 * 60 * 1_000_000_000
#: Nomad's `acl_token_gc_threshold` default: an expired token is removed an hour later.
EXPIRED_TOKEN_GC_NS: Final = 3600 * 1_000_000_000
BOOTSTRAP_TOKEN_NAME: Final = "Bootstrap Token"

S = TypeVar("S", AclPolicy, AclToken, AclRole, OneTimeToken)
_encode = msgspec.json.Encoder().encode


def _decode(kind: type[S], value: str) -> S:
    return msgspec.json.decode(value, type=kind)


def _values(conn: sqlite3.Connection, kind: type[S], sql: str, args: tuple[object, ...] = ()
            ) -> list[S]:
    return [_decode(kind, v) for (v,) in conn.execute(sql, args)]


def _one(conn: sqlite3.Connection, kind: type[S], sql: str, args: tuple[object, ...]
         ) -> S | None:
    row = conn.execute(sql, args).fetchone()
    return None if row is None else _decode(kind, row[0])


def _like(prefix: str) -> str:
    """A LIKE pattern matching `prefix` literally (`\\` escapes)."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


# ---------------------------------------------------------------------- policies

def list_policies(conn: sqlite3.Connection, prefix: str = "") -> list[AclPolicy]:
    """Policies whose name starts with `prefix`, by name."""
    return _values(conn, AclPolicy, "SELECT value FROM acl_policies WHERE name LIKE ? "
                   "ESCAPE '\\' ORDER BY name", (_like(prefix),))


def get_policy(conn: sqlite3.Connection, name: str) -> AclPolicy | None:
    return _one(conn, AclPolicy, "SELECT value FROM acl_policies WHERE name = ?", (name,))


def get_policies(conn: sqlite3.Connection, names: Collection[str]) -> list[AclPolicy]:
    """The policies of these names that exist, by name."""
    found = (get_policy(conn, name) for name in sorted(set(names)))
    return [p for p in found if p is not None]


def put_policy(conn: sqlite3.Connection, policy: AclPolicy, index: int) -> AclPolicy:
    """Create or update (state_store.go `UpsertACLPolicies`: CreateIndex kept). The caller has
    validated it (validate.py `policy_problems`)."""
    existing = get_policy(conn, policy.name)
    stored = msgspec.structs.replace(
        policy, create_index=existing.create_index if existing is not None else index,
        modify_index=index)
    conn.execute("INSERT INTO acl_policies (name, value) VALUES (?, ?) ON CONFLICT (name) "
                 "DO UPDATE SET value = excluded.value", (policy.name, _encode(stored).decode()))
    return stored


def delete_policy(conn: sqlite3.Connection, name: str) -> None:
    """state_store.go `DeleteACLPolicies`: deleting what does not exist succeeds."""
    conn.execute("DELETE FROM acl_policies WHERE name = ?", (name,))


# ---------------------------------------------------------------------- roles

def list_roles(conn: sqlite3.Connection, prefix: str = "") -> list[AclRole]:
    """Roles whose ID starts with `prefix` (Nomad's `?prefix=` on roles is on the ID), by ID."""
    return _values(conn, AclRole, "SELECT value FROM acl_roles WHERE id LIKE ? ESCAPE '\\' "
                   "ORDER BY id", (_like(prefix),))


def get_role(conn: sqlite3.Connection, role_id: str) -> AclRole | None:
    return _one(conn, AclRole, "SELECT value FROM acl_roles WHERE id = ?", (role_id,))


def role_by_name(conn: sqlite3.Connection, name: str) -> AclRole | None:
    return _one(conn, AclRole, "SELECT value FROM acl_roles WHERE name = ?", (name,))


def get_roles(conn: sqlite3.Connection, ids: Collection[str]) -> list[AclRole]:
    """The roles of these IDs that exist, by ID."""
    found = (get_role(conn, role_id) for role_id in sorted(set(ids)))
    return [r for r in found if r is not None]


def put_role(conn: sqlite3.Connection, role: AclRole, index: int) -> AclRole:
    """nomad/acl_endpoint.go `UpsertRoles` and state_store_acl.go `upsertACLRoleTxn`, on a
    role `validate.role_problems` accepted: without an ID its name must be free, with one the
    role must exist; every policy must exist (links deduplicated, in order); a role written
    unchanged keeps its indexes."""
    if not role.id:
        if role_by_name(conn, role.name) is not None:
            raise AclRefused(f"role with name {role.name} already exists")
        existing = None
        role = msgspec.structs.replace(role, id=str(uuid.uuid4()))
    else:
        existing = get_role(conn, role.id)
        if existing is None:
            raise AclRefused(f"cannot find role {role.id}")
        holder = role_by_name(conn, role.name)
        if holder is not None and holder.id != role.id:
            raise AclRefused(f"ACL role with name {role.name} already exists")
    links: dict[str, AclPolicyLink] = {}
    for link in role.policies:
        if get_policy(conn, link.name) is None:
            raise AclRefused(f"cannot find policy {link.name}")
        links.setdefault(link.name, AclPolicyLink(name=link.name))
    role = msgspec.structs.replace(role, policies=list(links.values()))
    if existing is not None:
        if (existing.name, existing.description, existing.policies) == (
                role.name, role.description, role.policies):
            return existing
        stored = msgspec.structs.replace(role, create_index=existing.create_index,
                                         modify_index=index)
    else:
        stored = msgspec.structs.replace(role, create_index=index, modify_index=index)
    conn.execute("INSERT INTO acl_roles (id, name, value) VALUES (?, ?, ?) ON CONFLICT (id) "
                 "DO UPDATE SET name = excluded.name, value = excluded.value",
                 (stored.id, stored.name, _encode(stored).decode()))
    return stored


def delete_role(conn: sqlite3.Connection, role_id: str) -> None:
    """state_store_acl.go `deleteACLRoleByIDTxn`. Tokens linking to it keep the link, which
    reads drop (`fix_role_links`)."""
    if conn.execute("DELETE FROM acl_roles WHERE id = ?", (role_id,)).rowcount == 0:
        raise AclRefused("ACL role not found", 404)


# ---------------------------------------------------------------------- tokens

def fix_role_links(conn: sqlite3.Connection, token: AclToken) -> AclToken:
    """state_store_acl.go `fixTokenRoleLinks`: each link with its role's current name; links
    to roles that no longer exist dropped."""
    if not token.roles:
        return token
    roles = (get_role(conn, link.id) for link in token.roles)
    return msgspec.structs.replace(token, roles=[AclRoleLink(id=r.id, name=r.name)
                                                 for r in roles if r is not None])


def _stored_token(conn: sqlite3.Connection, accessor: str) -> AclToken | None:
    return _one(conn, AclToken, "SELECT value FROM acl_tokens WHERE accessor = ?", (accessor,))


def list_tokens(conn: sqlite3.Connection, prefix: str = "") -> list[AclToken]:
    """Tokens whose AccessorID starts with `prefix`; by CreateIndex then AccessorID without a
    prefix, by AccessorID with one (nomad/acl_endpoint.go `ListTokens`' iterators)."""
    order = "accessor" if prefix else "create_index, accessor"
    found = _values(conn, AclToken, "SELECT value FROM acl_tokens WHERE accessor LIKE ? "
                    f"ESCAPE '\\' ORDER BY {order}", (_like(prefix),))
    return [fix_role_links(conn, t) for t in found]


def get_token(conn: sqlite3.Connection, accessor: str) -> AclToken | None:
    token = _stored_token(conn, accessor)
    return None if token is None else fix_role_links(conn, token)


def token_by_secret(conn: sqlite3.Connection, secret: str) -> AclToken | None:
    """The token this SecretID opens, expired or not (the caller checks the time)."""
    token = _one(conn, AclToken, "SELECT value FROM acl_tokens WHERE secret = ?", (secret,))
    return None if token is None else fix_role_links(conn, token)


def _insert_token(conn: sqlite3.Connection, token: AclToken) -> None:
    clash = conn.execute("SELECT accessor FROM acl_tokens WHERE secret = ?",
                         (token.secret_id,)).fetchone()
    if clash is not None and clash[0] != token.accessor_id:
        raise refusal("token", ["SecretID is already in use"])
    conn.execute("INSERT INTO acl_tokens (accessor, secret, create_index, value) "
                 "VALUES (?, ?, ?, ?) ON CONFLICT (accessor) DO UPDATE SET "
                 "secret = excluded.secret, create_index = excluded.create_index, "
                 "value = excluded.value",
                 (token.accessor_id, token.secret_id, token.create_index,
                  _encode(token).decode()))


def _role_links(conn: sqlite3.Connection, links: list[AclRoleLink]) -> list[AclRoleLink]:
    """nomad/acl_endpoint.go `upsertTokens`: each link resolved by ID, or by name when it has
    no ID, to an existing role; stored by ID alone, deduplicated."""
    ids: dict[str, AclRoleLink] = {}
    for link in links:
        role = get_role(conn, link.id) if link.id else role_by_name(conn, link.name)
        if role is None:
            raise AclRefused(f"cannot find role {link.id or link.name}")
        ids.setdefault(role.id, AclRoleLink(id=role.id))
    return list(ids.values())


def put_token(conn: sqlite3.Connection, token: AclToken, index: int, *, now_ns: int,
              min_ttl_ns: int, max_ttl_ns: int) -> AclToken:
    """Create, upload or update a token, as nomad/acl_endpoint.go `upsertTokens` and
    state_store.go `UpsertACLTokens`. A token with an AccessorID that is not stored is an
    upload of a client token with both IDs given as UUIDs, or else refused."""
    existing = _stored_token(conn, token.accessor_id) if token.accessor_id else None
    if token.accessor_id and existing is None and not (
            is_uuid(token.accessor_id) and is_uuid(token.secret_id)
            and token.type != TOKEN_MANAGEMENT):
        raise AclRefused(f"cannot find token {token.accessor_id}")
    token = canonical_token(token, now_ns)
    problems = token_problems(token, existing, min_ttl_ns=min_ttl_ns, max_ttl_ns=max_ttl_ns)
    if problems:
        raise refusal("token", problems)
    token = msgspec.structs.replace(token, roles=_role_links(conn, token.roles),
                                    modify_index=index)
    if existing is not None:
        # The secret and the times never change (an update that left the expiration out
        # keeps it: Nomad's state store would drop it).
        token = msgspec.structs.replace(
            token, secret_id=existing.secret_id, create_time=existing.create_time,
            expiration_time=existing.expiration_time, create_index=existing.create_index)
    else:
        token = msgspec.structs.replace(token, create_index=index)
    purge_expired(conn, now_ns)
    _insert_token(conn, token)
    return fix_role_links(conn, token)


def delete_token(conn: sqlite3.Connection, accessor: str, now_ns: int) -> None:
    """nomad/acl_endpoint.go `DeleteTokens`: deleting a token that does not exist is an error.
    One-time tokens of the deleted token go with it (they could open nothing any more)."""
    if conn.execute("DELETE FROM acl_tokens WHERE accessor = ?", (accessor,)).rowcount == 0:
        raise AclRefused(f"Cannot delete nonexistent tokens: {accessor}")
    conn.execute("DELETE FROM acl_one_time_tokens WHERE accessor = ?", (accessor,))
    purge_expired(conn, now_ns)


def purge_expired(conn: sqlite3.Connection, now_ns: int) -> None:
    """Remove one-time tokens past their time, and tokens an hour past theirs (see the
    header)."""
    for value, accessor in conn.execute("SELECT value, accessor FROM acl_one_time_tokens"
                                        ).fetchall():
        if _decode(OneTimeToken, value).expires_at <= now_ns:
            conn.execute("DELETE FROM acl_one_time_tokens WHERE accessor = ?", (accessor,))
    for value, accessor in conn.execute("SELECT value, accessor FROM acl_tokens").fetchall():
        if _decode(AclToken, value).is_expired(now_ns - EXPIRED_TOKEN_GC_NS):
            conn.execute("DELETE FROM acl_tokens WHERE accessor = ?", (accessor,))


# ---------------------------------------------------------------------- bootstrap

def bootstrap_index(conn: sqlite3.Connection) -> int | None:
    """The index of the last bootstrap, None before the first (`CanBootstrapACLToken`)."""
    row = conn.execute("SELECT value FROM acl_meta WHERE key = 'bootstrap'").fetchone()
    return None if row is None else int(row[0])


def bootstrap(conn: sqlite3.Connection, index: int, *, now_ns: int, reset_index: int,
              secret: str = "") -> AclToken:
    """nomad/acl_endpoint.go `Bootstrap`: the first management token, once. After a bootstrap
    only `reset_index` equal to its index (the operator's `acl-bootstrap-reset` file, 0 when
    there is none) allows another. `secret` (the caller's `BootstrapSecret`) must be a UUID."""
    done = bootstrap_index(conn)
    if done is not None:
        if reset_index == 0:
            raise AclRefused(f"ACL bootstrap already done (reset index: {done})")
        if reset_index != done:
            raise AclRefused(f"Invalid bootstrap reset index (specified {reset_index}, "
                             f"reset index: {done})")
    if secret and not is_uuid(secret):
        raise AclRefused("invalid acl token")
    token = AclToken(accessor_id=str(uuid.uuid4()), secret_id=secret or str(uuid.uuid4()),
                     name=BOOTSTRAP_TOKEN_NAME, type=TOKEN_MANAGEMENT, global_=True,
                     create_time=now_ns, create_index=index, modify_index=index)
    purge_expired(conn, now_ns)
    _insert_token(conn, token)
    conn.execute("INSERT INTO acl_meta (key, value) VALUES ('bootstrap', ?) ON CONFLICT (key) "
                 "DO UPDATE SET value = excluded.value", (index,))
    return token


# ---------------------------------------------------------------------- one-time tokens

def create_one_time(conn: sqlite3.Connection, accessor: str, index: int, *, now_ns: int
                    ) -> OneTimeToken:
    """nomad/acl_endpoint.go `UpsertOneTimeToken`: a ten-minute secret for the token
    `accessor`, replacing one it had. 403 when that token is not stored."""
    if _stored_token(conn, accessor) is None:
        raise AclRefused("Permission denied", 403)
    purge_expired(conn, now_ns)
    ott = OneTimeToken(one_time_secret_id=str(uuid.uuid4()), accessor_id=accessor,
                       expires_at=now_ns + ONE_TIME_TTL_NS, create_index=index,
                       modify_index=index)
    conn.execute("INSERT INTO acl_one_time_tokens (accessor, secret, value) VALUES (?, ?, ?) "
                 "ON CONFLICT (accessor) DO UPDATE SET secret = excluded.secret, "
                 "value = excluded.value", (accessor, ott.one_time_secret_id,
                                            _encode(ott).decode()))
    return ott


def exchange_one_time(conn: sqlite3.Connection, secret: str, *, now_ns: int) -> AclToken:
    """nomad/acl_endpoint.go `ExchangeOneTimeToken`: the token behind a one-time secret, which
    is used up. 403 for a secret that is unknown, expired, or whose token is gone (or
    expired: it could not act either)."""
    found = _one(conn, OneTimeToken, "SELECT value FROM acl_one_time_tokens WHERE secret = ?",
                 (secret,))
    denied = AclRefused("Permission denied", 403)
    if found is None or found.expires_at <= now_ns:
        raise denied
    token = get_token(conn, found.accessor_id)
    if token is None or token.is_expired(now_ns):
        raise denied
    conn.execute("DELETE FROM acl_one_time_tokens WHERE accessor = ?", (found.accessor_id,))
    purge_expired(conn, now_ns)
    return token

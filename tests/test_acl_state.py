"""The ACL tables and Nomad's checks on ACL objects (server/acl/state.py, validate.py).

Theory. Policies by name, tokens by AccessorID (SecretID unique), roles by ID (name unique),
one-time tokens by AccessorID, and the index of the last bootstrap, as Nomad's state store
keeps them; writes refuse bad input with Nomad's texts (nomad/structs/acl.go `Validate`,
nomad/acl_endpoint.go `upsertTokens`, `UpsertRoles`, `Bootstrap`). A token may name a policy
that does not exist, a role may not; a token's role links are stored by ID and read back with
the role's current name, links to deleted roles dropped.

Layer 0: plain pytest on an in-memory SQLite connection; time is a parameter.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from yurt.runtime.server.acl import state
from yurt.runtime.server.acl.validate import (
    AclRefused,
    canonical_token,
    is_uuid,
    policy_problems,
    role_problems,
    token_problems,
)
from yurt.runtime.structs.acl import (
    AclPolicy,
    AclPolicyLink,
    AclRole,
    AclRoleLink,
    AclToken,
)

S = 1_000_000_000
MIN, HOUR = 60 * S, 3600 * S
T0 = 1_700_000_000 * S
LIMITS = {"min_ttl_ns": MIN, "max_ttl_ns": 24 * HOUR}


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(":memory:", isolation_level=None)
    for schema in state.SCHEMAS:
        db.execute(schema)
    yield db
    db.close()


def refused(fn: object, *args: object, **kwargs: object) -> AclRefused:
    with pytest.raises(AclRefused) as caught:
        fn(*args, **kwargs)  # type: ignore[operator]
    return caught.value


def client(*policies: str, **fields: object) -> AclToken:
    return AclToken(**({"name": "t", "type": "client", "policies": list(policies)}
                       | fields))  # type: ignore[arg-type]


# ---------------------------------------------------------------------- validation

def test_policy_validation_reads_as_nomads() -> None:
    assert policy_problems(AclPolicy(name="my-policy", rules="")) == []  # python-nomad's
    assert policy_problems(AclPolicy(name="ro", rules='namespace "*" { policy = "read" }')) == []
    bad = AclPolicy(name="a_b", description="x" * 257, rules='namespace "*" { policy = "x" }',
                    job_acl={"JobID": "web", "Task": "t"})
    problems = policy_problems(bad)
    assert problems[0] == "invalid name 'a_b'"
    assert problems[1].startswith("failed to parse rules: ")
    assert problems[2:] == ["description longer than 256", "namespace must be set to set job ID",
                            "group must be set to set task"]
    assert policy_problems(AclPolicy(name="x" * 129)) == [f"invalid name '{'x' * 129}'"]


def test_role_validation() -> None:
    assert role_problems(AclRole(name="ops", policies=[AclPolicyLink(name="p")])) == []
    assert role_problems(AclRole(name="", description="d" * 300)) == [
        "invalid name ''", "description longer than 256",
        "at least one policy should be specified"]


def test_token_validation_follows_nomads_rules() -> None:
    def problems(token: AclToken, existing: AclToken | None = None) -> list[str]:
        return token_problems(canonical_token(token, T0), existing, **LIMITS)

    assert problems(client("readonly")) == []
    assert problems(AclToken(type="management")) == []
    assert problems(AclToken(type="client")) == ["client token missing policies or roles"]
    assert problems(AclToken(type="management", policies=["p"])) == [
        "management token cannot be associated with policies or roles"]
    assert problems(AclToken(type="root")) == ["token type must be client or management"]
    assert problems(client("p", name="n" * 257)) == ["token name too long"]
    # As Nomad: the negative TTL has already made an expiration before the creation.
    assert problems(client("p", expiration_ttl=-S)) == [
        "token expiration TTL '-1s' should not be negative",
        "expiration time cannot be before create time",
        "expiration time cannot be less than 1m0s in the future (was -1s)"]
    assert problems(client("p", expiration_ttl=30 * S)) == [
        "expiration time cannot be less than 1m0s in the future (was 30s)"]
    assert problems(client("p", expiration_ttl=25 * HOUR)) == [
        "expiration time cannot be more than 24h0m0s in the future (was 25h0m0s)"]
    assert problems(client("p", expiration_ttl=HOUR)) == []
    before = client("p", create_time=T0, expiration_time=T0 - S, accessor_id="a")
    assert "expiration time cannot be before create time" in problems(before)
    stored = canonical_token(client("p", expiration_ttl=HOUR, global_=False), T0)
    update = client("p", accessor_id=stored.accessor_id, global_=True)
    assert problems(update, stored) == ["cannot toggle global mode",
                                        "cannot update expiration TTL"]
    moved = client("p", accessor_id="a", create_time=T0, expiration_ttl=HOUR,
                   expiration_time=T0 + 2 * HOUR)
    assert problems(moved, stored) == ["cannot update expiration time"]


def test_canonical_token_gives_ids_and_turns_a_ttl_into_an_expiration() -> None:
    made = canonical_token(client("p", expiration_ttl=HOUR), T0)
    assert is_uuid(made.accessor_id)
    assert is_uuid(made.secret_id)
    assert made.accessor_id != made.secret_id
    assert (made.create_time, made.expiration_time) == (T0, T0 + HOUR)
    kept = client("p", accessor_id="a", create_time=T0 - S)
    assert canonical_token(kept, T0) is kept
    assert is_uuid("6A2C1D3E-0000-4000-8000-00000000000F")
    assert not is_uuid("6a2c1d3e-0000-4000-8000-00000000000")
    assert not is_uuid("x" * 36)


# ---------------------------------------------------------------------- policies and roles

def test_policies_keep_their_create_index_and_deleting_a_missing_one_succeeds(
        conn: sqlite3.Connection) -> None:
    state.put_policy(conn, AclPolicy(name="b", rules=""), 5)
    first = state.put_policy(conn, AclPolicy(name="a", description="1"), 6)
    updated = state.put_policy(conn, AclPolicy(name="a", description="2"), 9)
    assert (first.create_index, first.modify_index) == (6, 6)
    assert (updated.create_index, updated.modify_index, updated.description) == (6, 9, "2")
    assert [p.name for p in state.list_policies(conn)] == ["a", "b"]
    assert [p.name for p in state.list_policies(conn, "b")] == ["b"]
    assert [p.name for p in state.get_policies(conn, ["b", "zz", "a", "b"])] == ["a", "b"]
    state.delete_policy(conn, "zz")
    state.delete_policy(conn, "a")
    assert state.get_policy(conn, "a") is None


def test_a_prefix_is_literal(conn: sqlite3.Connection) -> None:
    state.put_policy(conn, AclPolicy(name="ab"), 1)
    assert state.list_policies(conn, "_") == []
    assert state.list_policies(conn, "%") == []


def test_roles_need_existing_policies_and_unique_names(conn: sqlite3.Connection) -> None:
    assert refused(state.put_role, conn, AclRole(
        name="ops", policies=[AclPolicyLink(name="nope")]), 3).message == "cannot find policy nope"
    state.put_policy(conn, AclPolicy(name="p"), 4)
    role = state.put_role(conn, AclRole(name="ops", policies=[
        AclPolicyLink(name="p"), AclPolicyLink(name="p")]), 5)
    assert is_uuid(role.id)
    assert [link.name for link in role.policies] == ["p"]
    assert (role.create_index, role.modify_index) == (5, 5)
    assert refused(state.put_role, conn, AclRole(
        name="ops", policies=[AclPolicyLink(name="p")]), 6).message == \
        "role with name ops already exists"
    assert refused(state.put_role, conn, AclRole(
        id="missing", name="x", policies=[AclPolicyLink(name="p")]), 6).message == \
        "cannot find role missing"
    other = state.put_role(conn, AclRole(name="dev", policies=[AclPolicyLink(name="p")]), 7)
    assert refused(state.put_role, conn, AclRole(
        id=other.id, name="ops", policies=[AclPolicyLink(name="p")]), 8).message == \
        "ACL role with name ops already exists"
    # Unchanged: indexes kept. Renamed: modified.
    same = state.put_role(conn, AclRole(id=role.id, name="ops", policies=[
        AclPolicyLink(name="p")]), 9)
    assert same.modify_index == 5
    renamed = state.put_role(conn, AclRole(id=role.id, name="ops2", policies=[
        AclPolicyLink(name="p")]), 10)
    assert (renamed.create_index, renamed.modify_index) == (5, 10)
    assert state.role_by_name(conn, "ops") is None
    assert state.role_by_name(conn, "ops2") == renamed
    assert [r.name for r in state.get_roles(conn, [other.id, "nope"])] == ["dev"]
    state.delete_role(conn, other.id)
    gone = refused(state.delete_role, conn, other.id)
    assert (gone.status, gone.message) == (404, "ACL role not found")
    # Deleting a policy a role names leaves the role as it is.
    state.delete_policy(conn, "p")
    assert state.get_role(conn, role.id) == renamed


# ---------------------------------------------------------------------- tokens

def test_a_token_may_name_policies_that_do_not_exist(conn: sqlite3.Connection) -> None:
    made = state.put_token(conn, client("readonly"), 3, now_ns=T0, **LIMITS)
    assert (made.create_index, made.modify_index, made.create_time) == (3, 3, T0)
    assert state.token_by_secret(conn, made.secret_id) == made
    assert state.get_token(conn, made.accessor_id) == made
    assert state.token_by_secret(conn, made.accessor_id) is None


def test_an_update_keeps_the_secret_and_the_times(conn: sqlite3.Connection) -> None:
    made = state.put_token(conn, client("p", expiration_time=T0 + HOUR), 3, now_ns=T0, **LIMITS)
    updated = state.put_token(conn, client("q", accessor_id=made.accessor_id,
                                           secret_id="ignored", name="Updated"),
                              4, now_ns=T0 + S, **LIMITS)
    assert (updated.name, updated.policies) == ("Updated", ["q"])
    assert (updated.secret_id, updated.create_time, updated.expiration_time) == (
        made.secret_id, T0, T0 + HOUR)
    assert (updated.create_index, updated.modify_index) == (3, 4)
    assert state.token_by_secret(conn, "ignored") is None


def test_an_unknown_accessor_is_an_upload_only_of_a_client_token_with_uuids(
        conn: sqlite3.Connection) -> None:
    accessor, secret = "11111111-2222-4333-8444-555555555555", "aaaaaaaa-2222-4333-8444-5555"
    assert refused(state.put_token, conn, client("p", accessor_id=accessor, secret_id=secret),
                   1, now_ns=T0, **LIMITS).message == f"cannot find token {accessor}"
    secret = "aaaaaaaa-2222-4333-8444-555555555555"
    assert refused(state.put_token, conn, AclToken(type="management", accessor_id=accessor,
                                                   secret_id=secret),
                   1, now_ns=T0, **LIMITS).message == f"cannot find token {accessor}"
    uploaded = state.put_token(conn, client("p", accessor_id=accessor, secret_id=secret), 2,
                               now_ns=T0, **LIMITS)
    assert (uploaded.accessor_id, uploaded.secret_id, uploaded.create_index) == (
        accessor, secret, 2)
    # A second token may not take that secret.
    clash = refused(state.put_token, conn, client(
        "p", accessor_id="22222222-2222-4333-8444-555555555555", secret_id=secret),
        3, now_ns=T0, **LIMITS)
    assert clash.message.startswith("token 0 invalid: 1 error occurred:")


def test_invalid_tokens_are_refused_with_nomads_text(conn: sqlite3.Connection) -> None:
    why = refused(state.put_token, conn, AclToken(type="client"), 1, now_ns=T0, **LIMITS)
    assert why.message == ("token 0 invalid: 1 error occurred:\n"
                           "\t* client token missing policies or roles\n\n")
    assert state.list_tokens(conn) == []


def test_role_links_by_id_or_name_are_stored_by_id_and_read_with_current_names(
        conn: sqlite3.Connection) -> None:
    state.put_policy(conn, AclPolicy(name="p"), 1)
    ops = state.put_role(conn, AclRole(name="ops", policies=[AclPolicyLink(name="p")]), 2)
    dev = state.put_role(conn, AclRole(name="dev", policies=[AclPolicyLink(name="p")]), 3)
    assert refused(state.put_token, conn, AclToken(roles=[AclRoleLink(name="nope")]), 4,
                   now_ns=T0, **LIMITS).message == "cannot find role nope"
    token = state.put_token(conn, AclToken(roles=[
        AclRoleLink(name="ops"), AclRoleLink(id=ops.id), AclRoleLink(id=dev.id)]),
        5, now_ns=T0, **LIMITS)
    assert [(r.id, r.name) for r in token.roles] == [(ops.id, "ops"), (dev.id, "dev")]
    state.put_role(conn, AclRole(id=ops.id, name="ops-renamed",
                                 policies=[AclPolicyLink(name="p")]), 6)
    state.delete_role(conn, dev.id)
    read = state.get_token(conn, token.accessor_id)
    assert read is not None
    assert [(r.id, r.name) for r in read.roles] == [(ops.id, "ops-renamed")]


def test_lists_order_by_creation_or_by_accessor_with_a_prefix(
        conn: sqlite3.Connection) -> None:
    made = [state.put_token(conn, client("p", name=str(n)), 10 - n, now_ns=T0, **LIMITS)
            for n in range(3)]
    assert [t.name for t in state.list_tokens(conn)] == ["2", "1", "0"]
    first = made[0].accessor_id
    assert [t.accessor_id for t in state.list_tokens(conn, first[:8])] == [first]


def test_deleting_a_missing_token_is_an_error(conn: sqlite3.Connection) -> None:
    assert refused(state.delete_token, conn, "nope", T0).message == \
        "Cannot delete nonexistent tokens: nope"
    made = state.put_token(conn, client("p"), 1, now_ns=T0, **LIMITS)
    state.create_one_time(conn, made.accessor_id, 2, now_ns=T0)
    state.delete_token(conn, made.accessor_id, T0)
    assert state.list_tokens(conn) == []
    assert conn.execute("SELECT count(*) FROM acl_one_time_tokens").fetchone() == (0,)


def test_expired_tokens_go_an_hour_later_with_the_next_token_write(
        conn: sqlite3.Connection) -> None:
    short = state.put_token(conn, client("p", expiration_ttl=MIN), 1, now_ns=T0, **LIMITS)
    assert short.expiration_time == T0 + MIN
    state.put_token(conn, client("q"), 2, now_ns=T0 + MIN + HOUR - S, **LIMITS)
    assert state.get_token(conn, short.accessor_id) is not None  # expired, still listed
    state.put_token(conn, client("r"), 3, now_ns=T0 + MIN + HOUR, **LIMITS)
    assert state.get_token(conn, short.accessor_id) is None


# ---------------------------------------------------------------------- bootstrap

def test_bootstrap_once_then_only_with_the_reset_index(conn: sqlite3.Connection) -> None:
    assert state.bootstrap_index(conn) is None
    first = state.bootstrap(conn, 7, now_ns=T0, reset_index=0)
    assert (first.name, first.type, first.global_, first.create_index) == (
        "Bootstrap Token", "management", True, 7)
    assert is_uuid(first.secret_id)
    assert refused(state.bootstrap, conn, 8, now_ns=T0, reset_index=0).message == \
        "ACL bootstrap already done (reset index: 7)"
    assert refused(state.bootstrap, conn, 8, now_ns=T0, reset_index=3).message == \
        "Invalid bootstrap reset index (specified 3, reset index: 7)"
    secret = "2b778dd9-f5f1-6f29-b4b4-9a5fa948757a"
    again = state.bootstrap(conn, 9, now_ns=T0, reset_index=7, secret=secret)
    assert again.secret_id == secret
    assert state.bootstrap_index(conn) == 9
    # The reset file's index is spent: the next needs the new one.
    assert refused(state.bootstrap, conn, 10, now_ns=T0, reset_index=7).message == \
        "Invalid bootstrap reset index (specified 7, reset index: 9)"
    # Both tokens remain.
    assert {t.accessor_id for t in state.list_tokens(conn)} == {first.accessor_id,
                                                                again.accessor_id}


def test_a_bootstrap_secret_must_be_a_uuid(conn: sqlite3.Connection) -> None:
    assert refused(state.bootstrap, conn, 1, now_ns=T0, reset_index=0,
                   secret="not-a-uuid").message == "invalid acl token"
    assert state.bootstrap_index(conn) is None


# ---------------------------------------------------------------------- one-time tokens

def test_a_one_time_token_is_exchanged_once_within_ten_minutes(
        conn: sqlite3.Connection) -> None:
    token = state.put_token(conn, client("p"), 1, now_ns=T0, **LIMITS)
    assert refused(state.create_one_time, conn, "nope", 2, now_ns=T0).status == 403
    ott = state.create_one_time(conn, token.accessor_id, 2, now_ns=T0)
    assert ott.expires_at == T0 + 10 * MIN
    assert is_uuid(ott.one_time_secret_id)
    assert state.exchange_one_time(conn, ott.one_time_secret_id, now_ns=T0 + S) == token
    used = refused(state.exchange_one_time, conn, ott.one_time_secret_id, now_ns=T0 + S)
    assert (used.status, used.message) == (403, "Permission denied")
    # A new one replaces the token's previous one; past its ten minutes it opens nothing.
    old = state.create_one_time(conn, token.accessor_id, 3, now_ns=T0)
    new = state.create_one_time(conn, token.accessor_id, 4, now_ns=T0)
    assert refused(state.exchange_one_time, conn, old.one_time_secret_id,
                   now_ns=T0).status == 403
    assert refused(state.exchange_one_time, conn, new.one_time_secret_id,
                   now_ns=T0 + 10 * MIN).status == 403


def test_expired_one_time_tokens_go_with_the_next_one_time_write(
        conn: sqlite3.Connection) -> None:
    a = state.put_token(conn, client("p"), 1, now_ns=T0, **LIMITS)
    b = state.put_token(conn, client("p"), 2, now_ns=T0, **LIMITS)
    state.create_one_time(conn, a.accessor_id, 3, now_ns=T0)
    state.create_one_time(conn, b.accessor_id, 4, now_ns=T0 + 10 * MIN)
    assert [r[0] for r in conn.execute("SELECT accessor FROM acl_one_time_tokens")] == [
        b.accessor_id]


def test_a_one_time_token_of_a_deleted_or_expired_token_opens_nothing(
        conn: sqlite3.Connection) -> None:
    token = state.put_token(conn, client("p", expiration_ttl=MIN), 1, now_ns=T0, **LIMITS)
    ott = state.create_one_time(conn, token.accessor_id, 2, now_ns=T0)
    assert refused(state.exchange_one_time, conn, ott.one_time_secret_id,
                   now_ns=T0 + MIN).status == 403


# ---------------------------------------------------------------------- Nomad's JSON

def test_times_read_and_write_as_gos() -> None:
    from yurt.runtime.structs.acl_json import format_time, parse_time

    ns = parse_time("2017-08-23T22:47:14.695408057Z")
    assert format_time(ns) == "2017-08-23T22:47:14.695408057Z"
    assert format_time(parse_time("2017-08-23T22:47:14.5Z")) == "2017-08-23T22:47:14.5Z"
    assert format_time(parse_time("2017-08-24T00:47:14+02:00")) == "2017-08-23T22:47:14Z"
    assert parse_time("0001-01-01T00:00:00Z") == 0
    assert format_time(0) == "0001-01-01T00:00:00Z"
    for bad in ("2017-08-23", "2017-13-01T00:00:00Z", "yesterday"):
        with pytest.raises(ValueError, match="time"):
            parse_time(bad)


def test_a_token_reads_and_writes_as_nomads_json() -> None:
    from yurt.runtime.structs.acl_json import token_from_json, token_to_json

    token = token_from_json({
        "AccessorID": "a", "SecretID": "s", "Name": "n", "Type": "client",
        "Policies": ["p"], "Roles": [{"ID": "r", "Name": "ops"}], "Global": False,
        "CreateTime": "2017-08-23T22:47:14.695408057Z", "ExpirationTime": None,
        "ExpirationTTL": "1h30m", "Hash": "ignored", "CreateIndex": 7, "ModifyIndex": 8})
    assert (token.expiration_ttl, token.expiration_time) == (90 * MIN, None)
    out = token_to_json(token)
    assert out["ExpirationTTL"] == "1h30m0s"
    assert out["CreateTime"] == "2017-08-23T22:47:14.695408057Z"
    assert out["Roles"] == [{"ID": "r", "Name": "ops"}]
    assert (out["CreateIndex"], out["ModifyIndex"]) == (7, 8)
    stub = token_to_json(token, stub=True)
    assert "SecretID" not in stub
    assert "ExpirationTTL" not in stub
    bare = token_to_json(AclToken(type="management"))
    assert (bare["Policies"], bare["Roles"], bare["ExpirationTTL"]) == (None, None, "")
    # A body without Type keeps it empty, so validation names it; nanoseconds are a TTL too.
    untyped = token_from_json({"Policies": None, "ExpirationTTL": 60 * S})
    assert (untyped.type, untyped.policies, untyped.expiration_ttl) == ("", [], MIN)
    for bad in ({"ExpirationTTL": "soon"}, {"ExpirationTTL": True}, {"CreateTime": 5},
                {"Policies": "p"}):
        with pytest.raises(ValueError):  # noqa: PT011 (each names its field differently)
            token_from_json(bad)

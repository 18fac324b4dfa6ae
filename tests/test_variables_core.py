"""Nomad Variables and namespaces below the API: path rules, check-and-set, the keyring."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from yurt.runtime.server import keyring
from yurt.runtime.server import namespaces as ns_table
from yurt.runtime.server import variables as var_table
from yurt.runtime.server.keyring import KeyringError
from yurt.runtime.server.namespaces import Namespace, delete_refusal, validate
from yurt.runtime.server.variables import Conflict, items_error, path_error
from yurt.runtime.structs.variables import Variable


@pytest.mark.parametrize("path", ["a", "app/db", "nomad/jobs", "nomad/jobs/web/t",
                                  "nomad/job-templates/x", "a-b_c~d/e", "x" * 128])
def test_paths_nomad_accepts(path: str) -> None:
    assert path_error(path) is None


@pytest.mark.parametrize(("path", "says"), [
    ("", "variable requires path"),
    ("a.b", 'invalid path "a.b"'),
    ("a b", 'invalid path "a b"'),
    ("x" * 129, "invalid path"),
    ("nomad", '"nomad" is a reserved top-level directory path'),
    ("nomad/other", 'only paths at "nomad/jobs" or "nomad/job-templates"'),
    ("nomad/job-templates", '"nomad/job-templates" is a reserved directory path'),
    ("nomad/job-templates/a/b", '"nomad/job-templates" is a reserved directory path'),
])
def test_paths_nomad_refuses(path: str, says: str) -> None:
    why = path_error(path)
    assert why is not None
    assert says in why


def test_items_limits_count_the_bytes_of_keys_and_values() -> None:
    assert items_error({}) == "empty variables are invalid"
    assert items_error({"k": "v" * (65536 - 1)}) is None
    assert items_error({"k": "v" * 65536}) == "variables are limited to 64KiB in total size"
    assert items_error({"k": "é" * 32768}) is not None  # two bytes each in UTF-8


def test_namespace_validation_and_delete_refusals_read_as_nomads() -> None:
    assert validate(Namespace(name="team-a")) is None
    why = validate(Namespace(name="bad_name"))
    assert why == ('Invalid namespace "bad_name": 1 error occurred:\n\t* invalid name '
                   '"bad_name". Must match regex ^[a-zA-Z0-9-]{1,128}$\n\n')
    assert "description longer than 256" in (validate(Namespace(name="a",
                                                                description="d" * 257)) or "")
    assert delete_refusal("default", live_jobs=False, live_allocs=False, variables=False) == \
        "can not delete default namespace"
    assert delete_refusal("a", live_jobs=False, live_allocs=False, variables=False) is None
    assert delete_refusal("a", live_jobs=True, live_allocs=False, variables=True) == (
        '2 errors occurred:\n\t* namespace "a" has non-terminal jobs in regions: [global]\n'
        '\t* namespace "a" has variables associated with it in regions: [global]\n\n')


@pytest.fixture
def db(tmp_path: Path) -> tuple[sqlite3.Connection, keyring.Keyring]:
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute(var_table.SCHEMA)
    conn.execute(ns_table.SCHEMA)
    return conn, keyring.load_or_create(tmp_path)


def _var(path: str, **items: str) -> Variable:
    return Variable(namespace="default", path=path, items=items)


def test_check_and_set_follows_nomads_state_store(
        db: tuple[sqlite3.Connection, keyring.Keyring]) -> None:
    conn, ring = db
    created = var_table.put(conn, ring, _var("p", a="1"), index=5, now=100, cas=0)
    assert isinstance(created, Variable)
    assert (created.create_index, created.modify_index, created.create_time) == (5, 5, 100)
    again = var_table.put(conn, ring, _var("p", a="2"), index=6, now=200, cas=0)
    assert isinstance(again, Conflict)
    assert again.current == created  # cas=0: must not exist; the conflict is what is stored
    stale = var_table.put(conn, ring, _var("p", a="2"), index=7, now=300, cas=4)
    assert isinstance(stale, Conflict)
    updated = var_table.put(conn, ring, _var("p", a="2"), index=8, now=400, cas=5)
    assert isinstance(updated, Variable)
    assert (updated.create_index, updated.modify_index) == (5, 8)
    assert (updated.create_time, updated.modify_time) == (100, 400)
    same = var_table.put(conn, ring, _var("p", a="2"), index=9, now=500, cas=None)
    assert same == updated  # no item changed: no index changed either
    missing = var_table.put(conn, ring, _var("q", a="1"), index=10, now=600, cas=3)
    assert isinstance(missing, Conflict)
    assert missing.current == Variable(namespace="default", path="q")  # the zero value


def test_check_and_delete_follows_nomads_state_store(
        db: tuple[sqlite3.Connection, keyring.Keyring]) -> None:
    conn, ring = db
    assert var_table.delete(conn, ring, "default", "none", cas=None) is None
    assert var_table.delete(conn, ring, "default", "none", cas=0) is None
    assert isinstance(var_table.delete(conn, ring, "default", "none", cas=2), Conflict)
    var_table.put(conn, ring, _var("p", a="1"), index=5, now=1, cas=None)
    assert isinstance(var_table.delete(conn, ring, "default", "p", cas=0), Conflict)
    assert isinstance(var_table.delete(conn, ring, "default", "p", cas=4), Conflict)
    assert var_table.get(conn, ring, "default", "p") is not None
    assert var_table.delete(conn, ring, "default", "p", cas=5) is None
    assert var_table.get(conn, ring, "default", "p") is None


def test_lists_sort_by_namespace_then_path_and_match_prefixes_literally(
        db: tuple[sqlite3.Connection, keyring.Keyring]) -> None:
    conn, ring = db
    for ns, path in [("b", "x"), ("a", "z"), ("a", "y_1"), ("a", "yz")]:
        var_table.put(conn, ring, Variable(namespace=ns, path=path, items={"k": "v"}),
                      index=1, now=1, cas=None)
    assert [(m.namespace, m.path) for m in var_table.list_metadata(conn, None, "")] == [
        ("a", "y_1"), ("a", "yz"), ("a", "z"), ("b", "x")]
    # `_` is a LIKE wildcard: a literal prefix match must not treat it as one.
    assert [m.path for m in var_table.list_metadata(conn, "a", "y_")] == ["y_1"]


def test_sealed_items_are_bound_to_their_namespace_and_path(
        db: tuple[sqlite3.Connection, keyring.Keyring]) -> None:
    conn, ring = db
    var_table.put(conn, ring, _var("p", secret="hunter2"), index=1, now=1, cas=None)
    var_table.put(conn, ring, _var("q", other="x"), index=2, now=1, cas=None)
    # Moving p's ciphertext to q's row must not yield p's items under q's name.
    conn.execute("UPDATE variables SET data = (SELECT data FROM variables WHERE path = 'p') "
                 "WHERE path = 'q'")
    with pytest.raises(KeyringError):
        var_table.get(conn, ring, "default", "q")


def test_the_keyring_is_made_once_private_and_reused(tmp_path: Path) -> None:
    first = keyring.load_or_create(tmp_path / "server")
    path = tmp_path / "server" / keyring.KEYRING_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = keyring.load_or_create(tmp_path / "server")
    assert second.key_id == first.key_id
    sealed = first.seal(b"value", b"ad")
    assert second.open(sealed, b"ad") == b"value"
    assert b"value" not in sealed
    assert [p.name for p in (tmp_path / "server").iterdir()] == [keyring.KEYRING_NAME]
    assert first.key_id in repr(first)
    assert json.loads(path.read_text())["Key"] not in repr(first)
    os.chmod(path, 0o644)
    keyring.load_or_create(tmp_path / "server")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_damaged_keyring_is_an_error_naming_the_file_only(tmp_path: Path) -> None:
    (tmp_path / keyring.KEYRING_NAME).write_text("not json")
    with pytest.raises(KeyringError, match="is not a yurt keyring"):
        keyring.load_or_create(tmp_path)


def test_racing_first_starts_agree_on_one_key(tmp_path: Path) -> None:
    # Each start writes its own candidate and links it in place; `link` refuses to replace,
    # so every one of them ends up reading the same key, and no temporary file is left.
    with ThreadPoolExecutor(max_workers=8) as pool:
        rings = list(pool.map(lambda _: keyring.load_or_create(tmp_path), range(16)))
    assert len({r.key_id for r in rings}) == 1
    assert [p.name for p in tmp_path.iterdir()] == [keyring.KEYRING_NAME]

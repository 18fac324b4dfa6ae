"""What only the SQLite store does: coalescing, de-duplication, schema versions, the lock.

Layer 2: a real file, real worker threads, the real clock. Nothing here sleeps; ordering is
forced with events and by the writer's own batch structure.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

import yurt.store.sqlite as sqlite_store
from yurt.runtime.errors import StateError, StateLockedError, StateVersionError, StateWriteError
from yurt.runtime.structs import Allocation, TaskState
from yurt.store import SCHEMA_VERSION, open_state_db


async def test_state_survives_reopen(tmp_path: Path) -> None:
    async with open_state_db(tmp_path) as db:
        await db.put_allocation(Allocation(id="a1", client_status="running"))
        await db.put_task_state("a1", "web", TaskState(state="running", restarts=3))
    async with open_state_db(tmp_path) as db:
        allocs, errors = await db.get_all_allocations()
        assert [(a.id, a.client_status) for a in allocs] == [("a1", "running")]
        assert errors == {}
        _, state = await db.get_task_runner_state("a1", "web")
        assert state is not None
        assert state.restarts == 3


async def test_file_modes_and_wal(tmp_path: Path) -> None:
    state_dir = tmp_path / "new" / "state"
    async with open_state_db(state_dir):
        pass
    assert (state_dir.stat().st_mode & 0o777) == 0o700
    assert ((state_dir / "state.db").stat().st_mode & 0o777) == 0o600
    conn = sqlite3.connect(state_dir / "state.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == (
            str(SCHEMA_VERSION),)
    finally:
        conn.close()


async def test_identical_rewrite_is_skipped_without_a_transaction(tmp_path: Path) -> None:
    async with open_state_db(tmp_path) as db:
        state = TaskState(state="running")
        await db.put_task_state("a1", "web", state)
        before = db.stats.transactions
        for _ in range(100):
            await db.put_task_state("a1", "web", state)
        assert db.stats.transactions == before
        assert db.stats.skipped == 100
        await db.put_task_state("a1", "web", TaskState(state="dead"))
        assert db.stats.transactions == before + 1
        _, got = await db.get_task_runner_state("a1", "web")
        assert got == TaskState(state="dead")


async def test_dedup_off_writes_every_time(tmp_path: Path) -> None:
    async with open_state_db(tmp_path, dedup=False) as db:
        for _ in range(5):
            await db.put_task_state("a1", "web", TaskState())
        assert db.stats.skipped == 0
        assert db.stats.transactions == 5


async def test_concurrent_writers_share_transactions(tmp_path: Path) -> None:
    async with open_state_db(tmp_path) as db:
        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(db.put_task_state, f"a{i}", "web", TaskState(restarts=i))
        assert db.stats.written == 200
        # One batch forms while the previous commits: far fewer transactions than writes.
        assert db.stats.transactions < 20
        _, state = await db.get_task_runner_state("a199", "web")
        assert state == TaskState(restarts=199)


async def test_rewrite_of_committed_value_is_not_skipped_while_another_is_queued(
        tmp_path: Path) -> None:
    """Committed A, then B queued, then A again: A must win, so it cannot be deduplicated."""
    async with open_state_db(tmp_path) as db:
        a, b = TaskState(state="running"), TaskState(state="dead")
        await db.put_task_state("x", "t", a)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(db.put_task_state, "x", "t", b)
            await trio.testing.wait_all_tasks_blocked()
            await db.put_task_state("x", "t", a)
        _, got = await db.get_task_runner_state("x", "t")
        assert got == a


async def test_rewrite_after_delete_is_not_skipped(tmp_path: Path) -> None:
    async with open_state_db(tmp_path) as db:
        state = TaskState(state="running")
        await db.put_task_state("x", "t", state)
        await db.delete_allocation_bucket("x")
        await db.put_task_state("x", "t", state)
        assert await db.get_task_runner_state("x", "t") == (None, state)
        await db.delete_task_bucket("x", "t")
        await db.put_task_state("x", "t", state)
        assert await db.get_task_runner_state("x", "t") == (None, state)


async def test_failed_commit_raises_and_records_no_hash(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_state_db(tmp_path) as db:
        real_commit = db._commit
        def broken(ops: dict[tuple[str, ...], bytes | None]) -> None:
            raise sqlite3.OperationalError("disk I/O error")
        monkeypatch.setattr(db, "_commit", broken)
        with pytest.raises(StateWriteError, match="disk I/O error"):
            await db.put_task_state("x", "t", TaskState())
        monkeypatch.setattr(db, "_commit", real_commit)
        # Not recorded as committed, so the same value is written, not skipped.
        await db.put_task_state("x", "t", TaskState())
        assert db.stats.skipped == 0
        assert await db.get_task_runner_state("x", "t") == (None, TaskState())


async def test_corrupt_allocation_is_reported_not_fatal(tmp_path: Path) -> None:
    async with open_state_db(tmp_path) as db:
        await db.put_allocation(Allocation(id="good"))
        await db.put_allocation(Allocation(id="bad"))
    conn = sqlite3.connect(tmp_path / "state.db")
    with conn:
        conn.execute("UPDATE alloc SET value = '{\"ID\": 5' WHERE alloc_id = 'bad'")
    conn.close()
    async with open_state_db(tmp_path) as db:
        allocs, errors = await db.get_all_allocations()
    assert [a.id for a in allocs] == ["good"]
    assert list(errors) == ["bad"]
    assert "failed to decode allocation" in errors["bad"]


async def test_second_open_of_same_dir_fails_at_once(tmp_path: Path) -> None:
    async with open_state_db(tmp_path):
        with trio.fail_after(5), pytest.raises(StateLockedError, match="in use by another"):
            async with open_state_db(tmp_path):
                pass  # pragma: no cover - must not be reached
    async with open_state_db(tmp_path):  # released on close
        pass


async def test_writes_after_close_are_refused(tmp_path: Path) -> None:
    async with open_state_db(tmp_path) as db:
        pass
    with pytest.raises(StateError, match="closed"):
        await db.put_task_state("x", "t", TaskState())


async def test_queued_writes_are_flushed_when_the_body_raises(tmp_path: Path) -> None:
    class Boom(Exception):
        pass

    async def fail_with_writes_queued() -> None:
        async with open_state_db(tmp_path) as db:
            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(db.put_task_state, f"a{i}", "t", TaskState(restarts=i))
                await trio.testing.wait_all_tasks_blocked()
                # The writers give up waiting; their writes are queued all the same.
                nursery.cancel_scope.cancel()
            raise Boom

    with pytest.raises(Boom):  # unwrapped: no ExceptionGroup escapes open_state_db
        await fail_with_writes_queued()
    async with open_state_db(tmp_path) as db:
        _, state = await db.get_task_runner_state("a49", "t")
        assert state == TaskState(restarts=49)


def _set_version(path: Path, version: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'version'", (version,))
    conn.close()


async def test_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    async with open_state_db(tmp_path) as db:
        await db.put_allocation(Allocation(id="a1"))
    _set_version(tmp_path / "state.db", str(SCHEMA_VERSION + 1))
    with pytest.raises(StateVersionError, match=f'expected "{SCHEMA_VERSION}" but found '
                                                f'"{SCHEMA_VERSION + 1}"'):
        async with open_state_db(tmp_path):
            pass  # pragma: no cover
    assert not (tmp_path / "state.db.backup").exists()


async def test_not_a_yurt_database_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "state.db")
    with conn:
        conn.execute("CREATE TABLE something (x)")
    conn.close()
    with pytest.raises(StateVersionError, match="not a yurt state database"):
        async with open_state_db(tmp_path):
            pass  # pragma: no cover


async def test_garbage_file_is_a_state_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StateError, match="cannot open state database"):
        async with open_state_db(tmp_path):
            pass  # pragma: no cover


async def test_upgrade_backs_up_then_migrates(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_state_db(tmp_path) as db:
        await db.put_allocation(Allocation(id="a1"))
    old = SCHEMA_VERSION - 1
    _set_version(tmp_path / "state.db", str(old))
    seen_backup: list[bool] = []

    def migrate(conn: sqlite3.Connection) -> None:
        seen_backup.append((tmp_path / "state.db.backup").exists())
        conn.execute("INSERT INTO meta (key, value) VALUES ('migrated', 'yes')")

    monkeypatch.setitem(sqlite_store.MIGRATIONS, old, migrate)
    async with open_state_db(tmp_path) as db:
        allocs, _ = await db.get_all_allocations()
        assert [a.id for a in allocs] == ["a1"]
    assert seen_backup == [True]
    conn = sqlite3.connect(tmp_path / "state.db")
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    conn.close()
    assert meta["version"] == str(SCHEMA_VERSION)
    assert meta["migrated"] == "yes"
    assert "upgraded" in meta
    backup = sqlite3.connect(tmp_path / "state.db.backup")
    assert backup.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == (
        str(old),)
    backup.close()

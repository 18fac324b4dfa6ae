"""Faults at the state DB's write boundary: cancelled commits, a full disk, a deleted file.

Layer 2: a real SQLite file, real worker threads, the real clock under absolute deadlines.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

import yurt.store.sqlite as sqlite_store
from tests.disk_support import fill
from yurt.runtime.errors import StateError, StateWriteError
from yurt.store import open_state_db


async def test_a_commit_cancelled_before_it_ran_is_not_reported_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The close deadline cancels the writer while its batch waits for the connection: the
    shielded caller must not be told its write is durable unless it is on disk."""
    monkeypatch.setattr(sqlite_store, "CLOSE_TIMEOUT", 0.2)
    outcome: list[object] = []

    async def put(db: sqlite_store.SQLiteStateDB) -> None:
        with trio.CancelScope(shield=True):
            try:
                await db.put_node_meta({"k": "v"})
            except StateWriteError as e:
                outcome.append(e)
            else:
                outcome.append("durable")

    cancelled = trio.Event()
    real_commit = sqlite_store.SQLiteStateDB._commit_pending

    async def spy(self: sqlite_store.SQLiteStateDB, **kwargs: bool) -> object:
        try:
            return await real_commit(self, **kwargs)
        except trio.Cancelled:
            cancelled.set()
            raise

    monkeypatch.setattr(sqlite_store.SQLiteStateDB, "_commit_pending", spy)

    async def hold_connection_until_commit_cancelled(
            db: sqlite_store.SQLiteStateDB, task_status: trio.TaskStatus[None]) -> None:
        async with db._limiter:
            task_status.started()
            await cancelled.wait()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery, open_state_db(tmp_path) as db:
            await nursery.start(hold_connection_until_commit_cancelled, db)
            nursery.start_soon(put, db)
            await trio.testing.wait_all_tasks_blocked()
            assert db._inflight  # the writer took the batch and waits for the connection
        async with open_state_db(tmp_path) as db:
            stored = await db.get_node_meta()
    assert len(outcome) == 1
    assert (outcome[0] == "durable") == (stored == {"k": "v"}), (outcome, stored)






async def test_full_disk_write_is_retried_and_reported_until_space_returns(
        small_fs: Path) -> None:
    big = {"k": "x" * 65536}
    with trio.fail_after(20):
        async with open_state_db(small_fs / "state") as db:
            await db.put_node_meta({"k": "first"})
            filler = await trio.to_thread.run_sync(fill, small_fs)
            await db.put_node_meta(big)  # released, not raised: the agent goes on
            assert db.degraded is not None
            assert "full" in db.degraded
            assert db.stats.retries >= 1
            filler.unlink()
            await db.wait_writable()  # the writer's backoff retries on its own
            assert db.degraded is None
        async with open_state_db(small_fs / "state") as db:
            assert await db.get_node_meta() == big


async def test_deleted_state_db_is_detected_and_writes_are_refused_softly(
        tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_state_db(tmp_path) as db:
            await db.put_node_meta({"k": "v"})
            assert db.gone is None
            (tmp_path / "state.db").unlink()
            await db.put_node_meta({"k": "w"})  # no exception: running tasks stay supervised
            assert db.gone is not None
            assert "deleted" in db.gone
            await db.put_node_meta({"k": "z"})
            assert db.stats.dropped == 2
            assert "state.db.recovered" in db.gone
        # What the agent knew when the file went is kept for the next start, which refuses
        # to start empty (and orphan every task) while that copy waits.
        with pytest.raises(StateError, match=r"state\.db\.recovered"):
            async with open_state_db(tmp_path):
                pass  # pragma: no cover - must not be reached
        (tmp_path / "state.db.recovered").rename(tmp_path / "state.db")
        async with open_state_db(tmp_path) as db:
            assert await db.get_node_meta() == {"k": "v"}

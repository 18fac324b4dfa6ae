"""`SQLiteStateDB`: client state in one SQLite file, written by one coalescing writer task.

Theory of operation.

*One writer, one connection.* Every write goes into `_pending` (an ordered map: last write per
key wins) and wakes the writer task, which takes everything pending, commits it in **one**
transaction in a worker thread, and then wakes every caller whose write was in that batch.
While a batch commits, new writes pile up for the next one. So 1 writer or 1,000 concurrent
task runners pay one thread hop and one fsync per batch, not per write (a thread hop costs
150-580 µs on a small VM). `put_*` returns only after the commit:
when it returns the value is durable. A put whose caller is cancelled may still be committed.
A batch whose commit is cancelled before it ran is queued again, never reported as written.

*Faults.* A full disk must not stop supervision: a commit that fails with SQLITE_FULL is kept
queued and retried with backoff (0.1 s doubling to 5 s; new writes join it, last write per key
still wins, so the queue stays bounded by the number of keys), `degraded` says why, one warning
is logged, and the callers are released so task runners go on (the one case where a returned
put is not yet durable). A state file deleted or replaced under the agent (an inode check
before each commit) sets `gone`: writes are dropped and counted from then on, and the agent
refuses new work with that message instead of running blind. On a disk already full at
start, the file opens with exclusive locking (see `sqlite_file.py`) so the agent can load its
state and re-attach; its writes then take the full-disk path above.

*De-duplication.* Task runners rewrite the same state often (Nomad's boltdd exists for this).
Before anything is queued, the value's BLAKE2b hash is compared with the hash of the last
*committed* value for that key; equal means return at once, no thread hop, no transaction.
Hashes are recorded only after the commit succeeds (Nomad records them before, so a rolled-back
transaction leaves a stale hash), and a key with a write pending or in flight is never skipped:
the queued value may differ from the committed one. Hashes live in memory only, so the first
write of each key after a restart always reaches the disk.

*Deletes.* Bucket deletes (an allocation, a task) are queued in the same ordered map, after
dropping the pending writes they cover, and forget the covered hashes when they commit.

Durability: WAL with `synchronous=FULL`: a committed batch survives a process kill and a power
loss; batching keeps that affordable.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, final

import trio

from yurt.runtime.errors import StateError, StateWriteError
from yurt.store.base import (
    RESTORE_ALLOC_KINDS,
    RESTORE_TASK_KINDS,
    Key,
    KeyValueStateDB,
    snapshot_from_rows,
)
from yurt.store.protocol import StateSnapshot
from yurt.store.sqlite_file import (
    DB_NAME,
    MIGRATIONS,
    RECOVERED_NAME,
    SCHEMA_VERSION,
    TABLES,
    open_file,
    out_of_space,
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteStateDB", "StateGoneError", "open_state_db"]

#: How long closing may take to flush what is still queued before giving up.
CLOSE_TIMEOUT: Final = 30.0

#: How long closing keeps retrying when the disk is full (what is not written is lost).
DEGRADED_CLOSE_TIMEOUT: Final = 1.0

#: Backoff between attempts to commit while the disk is full.
RETRY_MIN: Final = 0.1
RETRY_MAX: Final = 5.0


log = logging.getLogger("yurt.store")


class StateGoneError(StateWriteError):
    """The state database file was deleted or replaced under the running agent."""


_UPSERT: Final = {
    table: f"INSERT INTO {table} ({', '.join(pk)}, value) VALUES "
           f"({', '.join('?' * (len(pk) + 1))}) "
           f"ON CONFLICT ({', '.join(pk)}) DO UPDATE SET value = excluded.value"
    for table, pk in TABLES.items()
}
_SELECT: Final = {
    table: f"SELECT value FROM {table} WHERE " + " AND ".join(f"{c} = ?" for c in pk)
    for table, pk in TABLES.items()
}


_SELECT_RESTORE: Final = (
    "SELECT 'alloc', alloc_id, '', kind, value FROM alloc WHERE kind IN ({}) "
    "UNION ALL SELECT 'task', alloc_id, task, kind, value FROM task WHERE kind IN ({}) "
    "ORDER BY 2".format(", ".join(f"'{k}'" for k in RESTORE_ALLOC_KINDS),
                        ", ".join(f"'{k}'" for k in RESTORE_TASK_KINDS)))


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


#: A row key, or a bucket delete keyed so it can sit in the same ordered map as the writes:
#: ("delete-alloc", alloc_id) | ("delete-task", alloc_id, task).
_OpKey = tuple[str, ...]


@dataclass
class _Batch:
    """Writes committed together; `done` is set when the commit finished, either way.

    A batch that could not even start (its commit was cancelled while waiting for the
    connection) is put back in the queue: `moved_to` is then the batch its writes joined, and
    its callers wait for that one instead of being told a write happened."""

    done: trio.Event = field(default_factory=trio.Event)
    error: BaseException | None = None
    moved_to: _Batch | None = None


@dataclass
class WriterStats:
    """Counters for benchmarks and tests: what the writer did, not what was asked."""

    offered: int = 0
    skipped: int = 0
    written: int = 0
    transactions: int = 0
    #: Commits that failed for want of space and were retried later.
    retries: int = 0
    #: Writes refused because the database file is gone.
    dropped: int = 0


def _scope(key: _OpKey) -> str | None:
    """The allocation a key belongs to (None for node-level keys)."""
    return key[1] if key[0] in ("alloc", "task", "delete-alloc", "delete-task") else None


@final
class SQLiteStateDB(KeyValueStateDB):
    """The SQLite store. Create it with `open_state_db`; it is usable only inside that block."""

    def __init__(self, conn: sqlite3.Connection, path: Path, *, dedup: bool,
                 identity: tuple[int, int] = (0, 0)) -> None:
        self._conn = conn
        self.path = path
        #: (st_dev, st_ino) of the file opened, to notice it being deleted or replaced.
        self._identity = identity
        #: Why writes cannot reach the disk for now (full), retried; None when healthy.
        self.degraded: str | None = None
        #: Why nothing can be recorded any more (the file was deleted); None when healthy.
        self.gone: str | None = None
        self._backoff = RETRY_MIN
        self._writable = trio.Event()
        self._writable.set()
        self.dedup = dedup
        self.stats = WriterStats()
        # One connection, one user at a time: the writer's commits and the readers' selects.
        self._limiter = trio.CapacityLimiter(1)
        self._pending: dict[_OpKey, bytes | None] = {}
        self._inflight: dict[_OpKey, bytes | None] = {}
        self._batch = _Batch()
        self._wakeup = trio.Event()
        self._closing = False
        self._closed = False
        self._writer_alive = False
        # alloc_id (None for node keys) -> key -> hash of the committed value.
        self._committed: dict[str | None, dict[Key, bytes]] = {}

    @property
    def name(self) -> str:
        return f"sqlite:{self.path}"

    # ---------------------------------------------------------------- writes

    def _busy(self, key: Key) -> bool:
        """Whether a queued or in-flight op touches `key` (then its hash may be stale)."""
        alloc = _scope(key)
        for ops in (self._pending, self._inflight):
            if key in ops:
                return True
            if alloc is not None and ("delete-alloc", alloc) in ops:
                return True
            if key[0] == "task" and ("delete-task", key[1], key[2]) in ops:
                return True
        return False

    async def _enqueue(self, key: _OpKey, data: bytes | None) -> None:
        if self._closing:
            raise StateError(f"state database {self.path} is closed")
        if self.gone is not None:  # nowhere durable to write: drop, count, keep supervising
            self.stats.dropped += 1
            await trio.lowlevel.checkpoint()
            return
        self._pending[key] = data
        batch = self._batch
        if self._writer_alive and self.degraded is not None:
            # The disk is full: the write joins the writer's next retry, and the caller
            # does not wait out the backoff (see `_commit_pending`).
            await trio.lowlevel.checkpoint()
            return
        if self._writer_alive:
            self._wakeup.set()
        else:  # the writer task is gone (cancelled): commit here, this caller's own batch
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + CLOSE_TIMEOUT
                await self._commit_pending(retry=False)
            self._fail_pending("the state writer stopped before the write was committed")
        while True:
            await batch.done.wait()
            if batch.moved_to is None:
                break
            batch = batch.moved_to
        if batch.error is not None:
            raise StateWriteError(f"writing state to {self.path} failed: {batch.error}"
                                  ) from batch.error

    async def _put(self, key: Key, data: bytes) -> None:
        self.stats.offered += 1
        if self.dedup and not self._busy(key):
            committed = self._committed.get(_scope(key), {}).get(key)
            if committed is not None and committed == _digest(data):
                self.stats.skipped += 1
                # A cancel point but not a schedule point: a skipped write is a cache hit, and
                # a full checkpoint (a scheduler pass) would cost more than the rest of it.
                await trio.lowlevel.checkpoint_if_cancelled()
                return
        await self._enqueue(key, data)

    async def _delete_allocation(self, alloc_id: str) -> None:
        for key in [k for k in self._pending if _scope(k) == alloc_id]:
            del self._pending[key]
        await self._enqueue(("delete-alloc", alloc_id), None)

    async def _delete_task(self, alloc_id: str, task: str) -> None:
        for key in [k for k in self._pending
                    if k[0] == "task" and k[1] == alloc_id and k[2] == task]:
            del self._pending[key]
        await self._enqueue(("delete-task", alloc_id, task), None)

    def _check_file(self) -> None:
        """Raise `StateGoneError` if the path no longer names the file this store opened.

        SQLite keeps writing into an unlinked file without a word, so without this check a
        deleted state.db goes unnoticed until the next start finds an empty one and orphans
        every task. One `stat` per batch, in the worker thread: cheap next to the fsync."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != self._identity:
            raise StateGoneError(
                f"state database {self.path} was deleted or replaced while the agent ran: "
                "nothing more can be recorded, so new work is refused; running tasks are "
                "still supervised (stop the agent, restore the file or start afresh)")

    def _commit(self, ops: dict[_OpKey, bytes | None]) -> None:
        """Runs in a worker thread, under the limiter: one transaction for the whole batch."""
        self._check_file()
        conn = self._conn
        with conn:  # BEGIN … COMMIT, or ROLLBACK on error
            for key, data in ops.items():
                if key[0] == "delete-alloc":
                    conn.execute("DELETE FROM alloc WHERE alloc_id = ?", (key[1],))
                    conn.execute("DELETE FROM task WHERE alloc_id = ?", (key[1],))
                elif key[0] == "delete-task":
                    conn.execute("DELETE FROM task WHERE alloc_id = ? AND task = ?", key[1:])
                else:
                    assert data is not None
                    conn.execute(_UPSERT[key[0]], (*key[1:], data.decode()))

    def _record(self, ops: dict[_OpKey, bytes | None]) -> None:
        """After a successful commit: remember hashes of what is now on disk."""
        for key, data in ops.items():
            scope = _scope(key)
            if key[0] == "delete-alloc":
                self._committed.pop(scope, None)
            elif key[0] == "delete-task":
                hashes = self._committed.get(scope, {})
                for k in [k for k in hashes if k[0] == "task" and k[2] == key[2]]:
                    del hashes[k]
            elif data is not None:
                self._committed.setdefault(scope, {})[key] = _digest(data)

    async def run_writer(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                         ) -> None:
        """The writer task: commit whatever is pending, batch after batch, until closed and
        drained. Started by `open_state_db`; errors go to the callers of the failed batch,
        except a full disk, which is retried (see `_commit_pending`)."""
        task_status.started()
        self._writer_alive = True
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        return
                    await self._wakeup.wait()
                    self._wakeup = trio.Event()
                    continue
                await self._commit_with_backoff()
                if self._closing and self.degraded is not None:
                    return  # the bounded drain below makes the last attempts
        finally:
            # Cancelled from outside (the caller's scope is going away) or closing: what is
            # queued is committed anyway, shielded and bounded, and later writes are
            # committed by their callers (`_enqueue`), so no write ever waits for nobody.
            self._writer_alive = False
            # A full disk is unlikely to clear during shutdown: a few tries, not a long wait.
            bound = CLOSE_TIMEOUT if self.degraded is None else DEGRADED_CLOSE_TIMEOUT
            with trio.move_on_after(bound, shield=True):
                while self._pending:
                    await self._commit_with_backoff()
            self._fail_pending("the state database closed before the write was committed")

    async def verify(self) -> str | None:
        """Check now (not only at the next commit) that the file is still there; returns
        `gone`. For callers about to accept work that must be recorded."""
        if self.gone is None:
            try:
                await trio.to_thread.run_sync(self._check_file)
            except StateGoneError as e:
                await self._mark_gone(e)
        return self.gone

    def _save_copy(self) -> Path:
        """Write what the open connection still sees (the deleted file lives on while it is
        open) to `state.db.recovered`, atomically. Runs in a worker thread, under the
        limiter."""
        target = self.path.with_name(RECOVERED_NAME)
        tmp = target.with_name(target.name + ".tmp")
        os.close(os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600))
        copy = sqlite3.connect(tmp)
        try:
            self._conn.backup(copy)
        finally:
            copy.close()
        os.replace(tmp, target)
        return target

    async def _mark_gone(self, error: StateGoneError) -> None:
        """Record that the file is gone, once, and save a copy for the next start: without
        it that start would find no state and orphan every running task."""
        if self.gone is not None:
            return
        self.gone = str(error)
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + CLOSE_TIMEOUT
            try:
                copy = await trio.to_thread.run_sync(self._save_copy, limiter=self._limiter)
            except (OSError, sqlite3.Error) as e:
                self.gone += f"; no copy of the state could be saved: {e}"
            else:
                self.gone += (f"; the state as of now is saved in {copy}: move it back to "
                              f"{self.path.name} before the next start to re-attach the tasks")
        log.error("%s", self.gone)

    async def wait_writable(self) -> None:
        """Return once writes reach the disk again (at once when they do)."""
        await self._writable.wait()

    async def _commit_with_backoff(self) -> None:
        """One commit; after a full-disk failure, wait before the next (new writes join it)."""
        if await self._commit_pending(retry=True):
            self._backoff = RETRY_MIN
        else:
            await trio.sleep(self._backoff)
            self._backoff = min(self._backoff * 2, RETRY_MAX)

    def _fail_pending(self, reason: str) -> None:
        """Tell the callers of whatever is still queued that it was not written."""
        if self._pending:
            self._pending = {}
            self._batch.error = StateWriteError(reason)
            self._batch.done.set()
            self._batch = _Batch()

    def _requeue(self, ops: dict[_OpKey, bytes | None]) -> None:
        """Put an uncommitted batch back in front of the queue. A key written again since
        keeps its newer value and place, so a later delete still follows an earlier write."""
        merged = {k: v for k, v in ops.items() if k not in self._pending}
        merged.update(self._pending)
        self._pending = merged

    async def _commit_pending(self, *, retry: bool) -> bool:
        """Commit everything queued as one transaction; wake its callers either way.

        Returns False when the disk is full and `retry` is set: the writes are queued again
        for the writer's next attempt, `degraded` says why, and the callers are released
        without an error so that supervision goes on (their writes reach the disk with the
        next successful commit, or are lost if the agent dies before it: the one case where
        a returned put is not yet durable). A commit cancelled before its worker thread ran
        wrote nothing: its writes are queued again and its callers wait for them there.
        """
        ops, batch = self._pending, self._batch
        self._pending, self._batch, self._inflight = {}, _Batch(), ops
        committed = True
        try:
            await trio.to_thread.run_sync(self._commit, ops, limiter=self._limiter)
        except StateGoneError as e:
            self.stats.dropped += len(ops)
            await self._mark_gone(e)
        except Exception as e:
            if retry and out_of_space(e):
                self._requeue(ops)
                self.stats.retries += 1
                if self.degraded is None:
                    log.warning("state database %s: %s; retrying with backoff, state changes "
                                "are kept in memory until it succeeds", self.path, e)
                self.degraded = f"writing {self.path} failed: {e}; retrying"
                if self._writable.is_set():
                    self._writable = trio.Event()
                committed = False
            else:  # reported to every caller of this batch
                batch.error = e
        except BaseException:
            self._requeue(ops)
            batch.moved_to = self._batch
            raise
        else:
            self._record(ops)
            self.stats.transactions += 1
            self.stats.written += sum(1 for k in ops if not k[0].startswith("delete"))
            if self.degraded is not None:
                log.warning("state database %s: writes succeed again", self.path)
                self.degraded = None
                self._writable.set()
        finally:
            self._inflight = {}
            batch.done.set()
        return committed

    # ---------------------------------------------------------------- reads

    async def _read(self, sql: str, params: tuple[str, ...]) -> list[tuple[str, ...]]:
        if self._closed:
            raise StateError(f"state database {self.path} is closed")

        def run() -> list[tuple[str, ...]]:
            return self._conn.execute(sql, params).fetchall()

        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    async def _get(self, key: Key) -> bytes | None:
        rows = await self._read(_SELECT[key[0]], key[1:])
        return rows[0][0].encode() if rows else None

    def _select_restore(self) -> list[tuple[Key, bytes]]:
        # One statement is one read transaction: allocations and task rows come from the same
        # snapshot even while the writer commits in between (WAL readers never block).
        rows = self._conn.execute(_SELECT_RESTORE).fetchall()
        return [((table, alloc_id, task, kind) if table == "task" else
                 (table, alloc_id, kind), value.encode())
                for table, alloc_id, task, kind, value in rows]

    async def get_all_state(self) -> StateSnapshot:
        """One thread hop: read and decode there, so a large restore does not hold the event
        loop while it decodes (the loop still gets the GIL between switch intervals)."""
        if self._closed:
            raise StateError(f"state database {self.path} is closed")

        def run() -> StateSnapshot:
            return snapshot_from_rows(self._select_restore())

        return await trio.to_thread.run_sync(run, limiter=self._limiter)

    async def _scan_allocations(self) -> list[tuple[str, bytes]]:
        rows = await self._read("SELECT alloc_id, value FROM alloc WHERE kind = ? "
                                "ORDER BY alloc_id", ("alloc",))
        return [(alloc_id, value.encode()) for alloc_id, value in rows]


# --------------------------------------------------------------------------- opening


@asynccontextmanager
async def open_state_db(state_dir: str | os.PathLike[str], *, dedup: bool = True
                        ) -> AsyncIterator[SQLiteStateDB]:
    """Open (or create) the state database in `state_dir` and run its writer.

    Args:
        state_dir: directory for `state.db` and `state.lock`; created (0700) if missing.
        dedup: skip writes whose value equals the last committed one (off only to measure).

    Yields:
        The open store. On exit, queued writes are flushed (bounded by `CLOSE_TIMEOUT`).

    Raises:
        StateLockedError: another agent has the directory open.
        StateVersionError: the file has a schema version this yurt cannot use.
        StateError: the file cannot be opened as a database.
    """
    path = Path(state_dir)
    conn, lock_fd, identity = await trio.to_thread.run_sync(open_file, path)
    db = SQLiteStateDB(conn, path / DB_NAME, dedup=dedup, identity=identity)
    try:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(db.run_writer)
                try:
                    yield db
                finally:
                    # Flush what is queued: the writer drains `_pending` and returns. Shielded,
                    # so a cancelled caller still gets its state on disk; bounded, so a stuck
                    # disk cannot hang shutdown forever.
                    db._closing = True
                    db._wakeup.set()
                    nursery.cancel_scope.shield = True
                    nursery.cancel_scope.deadline = trio.current_time() + CLOSE_TIMEOUT
        except BaseExceptionGroup as group:
            # Only the body can raise here (the writer reports errors to callers), so the
            # group holds one exception: hand it back unwrapped.
            if len(group.exceptions) == 1:
                raise group.exceptions[0]  # noqa: B904 - the group stays as its context
            raise
    finally:
        db._closed = True
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(conn.close, limiter=db._limiter)
        os.close(lock_fd)

"""The embedded server's state: jobs and allocations in `<data-dir>/server/server.db`.

Separate from the client's state database on purpose, as Nomad's server and client state are:
the server copy of an allocation (desired state) and the client's view (task states) are
different records with different writers. Writes are rare (a job registered, stopped,
updated; a batch of client updates) and each is one transaction in a worker thread; a read
happens once, at agent start.

Job specs carry environment variables (often secrets), so the directory is 0700 and the file
0600, also when an older yurt created them more open (SQLite gives its -wal and -shm files the
mode of the database file).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import final

import msgspec
import sqlite_utils
import trio

from yurt.runtime.structs import Allocation, Job

_encoder = msgspec.json.Encoder()


@final
class ServerStore:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._limiter = trio.CapacityLimiter(1)

    @classmethod
    async def open(cls, directory: Path) -> ServerStore:
        def connect() -> sqlite3.Connection:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
            path = directory / "server.db"
            # Created before SQLite opens it, so it is never readable by others, not even
            # for a moment.
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            os.chmod(path, 0o600)
            conn = sqlite3.connect(path, check_same_thread=False)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            db = sqlite_utils.Database(conn)
            with conn:
                db.table("jobs").create({"id": str, "value": str}, pk="id", if_not_exists=True)
                db.table("allocs").create({"id": str, "job_id": str, "value": str}, pk="id",
                                          if_not_exists=True)
                db.table("meta").create({"key": str, "value": int}, pk="key",
                                        if_not_exists=True)
            return conn

        return cls(await trio.to_thread.run_sync(connect))

    async def load(self) -> tuple[list[Job], list[Allocation], int]:
        def read() -> tuple[list[Job], list[Allocation], int]:
            jobs = [msgspec.json.decode(v, type=Job)
                    for (v,) in self._conn.execute("SELECT value FROM jobs")]
            allocs = [msgspec.json.decode(v, type=Allocation)
                      for (v,) in self._conn.execute("SELECT value FROM allocs")]
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'index'").fetchone()
            return jobs, allocs, int(row[0]) if row else 0

        return await trio.to_thread.run_sync(read, limiter=self._limiter)

    async def save(self, index: int, jobs: list[Job], allocs: list[Allocation]) -> None:
        job_rows = [(j.id, _encoder.encode(j).decode()) for j in jobs]
        alloc_rows = [(a.id, a.job_id, _encoder.encode(a).decode()) for a in allocs]

        def write() -> None:
            with self._conn:
                self._conn.executemany(
                    "INSERT INTO jobs (id, value) VALUES (?, ?) ON CONFLICT (id) DO UPDATE "
                    "SET value = excluded.value", job_rows)
                self._conn.executemany(
                    "INSERT INTO allocs (id, job_id, value) VALUES (?, ?, ?) ON CONFLICT (id) "
                    "DO UPDATE SET value = excluded.value", alloc_rows)
                self._conn.execute("INSERT INTO meta (key, value) VALUES ('index', ?) ON "
                                   "CONFLICT (key) DO UPDATE SET value = excluded.value",
                                   (index,))

        await trio.to_thread.run_sync(write, limiter=self._limiter)

    async def delete(self, job_id: str, alloc_ids: list[str]) -> None:
        def write() -> None:
            with self._conn:
                self._conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
                self._conn.executemany("DELETE FROM allocs WHERE id = ?",
                                       [(a,) for a in alloc_ids])

        await trio.to_thread.run_sync(write, limiter=self._limiter)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._conn.close, limiter=self._limiter)

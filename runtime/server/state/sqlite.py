"""The embedded server's state: jobs, allocations and evaluations in `<data-dir>/server/server.db`.

Separate from the client's state database on purpose, as Nomad's server and client state are:
the server copy of an allocation (desired state) and the client's view (task states) are
different records with different writers. Writes are rare (a job registered, stopped,
updated; a batch of client updates) and each is one transaction in a worker thread; a read
happens once, at agent start.

Job specs carry environment variables (often secrets), so the directory is 0700 and the file
0600, also when an older yurt created them more open (SQLite gives its -wal and -shm files the
mode of the database file).

A full disk must not stop the agent. Opening falls back to SQLite's exclusive locking mode
when the WAL's shared-memory file cannot be created (the agent's own lock already keeps every
other writer out), so the state loads and the agent can re-attach. A write that fails for want
of space is kept in memory, coalesced by row (last value per job, allocation and the index
wins, so the backlog is bounded by the number of rows), logged once, and retried in front of
the next write and at close.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path
from typing import Final, Protocol, final

import msgspec
import sqlite_utils
import trio

from yurt.runtime.structs import Allocation, Evaluation, Job
from yurt.runtime.structs.submission import JobSubmission
from yurt.runtime.structs.update import Deployment
from yurt.store.sqlite_file import connect_wal, out_of_space

log = logging.getLogger("yurt.server.store")

_encoder = msgspec.json.Encoder()
#: How long closing may spend on a last attempt to write what a full disk held back.
CLOSE_TIMEOUT: Final = 5.0


class ServerStateStore(Protocol):
    """What `LocalServer` keeps its state in: this module's SQLite store (one node) or
    runtime/server/state/etcd.py's `ClusterStore` (a cluster, in etcd)."""

    degraded: str | None

    async def load(self) -> tuple[list[Job], list[Allocation], int]: ...
    async def load_evals(self) -> list[Evaluation]: ...
    async def load_versions(self) -> list[Job]: ...
    async def load_deployments(self) -> list[Deployment]: ...
    async def load_submission(self, job_id: str, version: int) -> JobSubmission | None: ...
    async def load_services(self) -> list[bytes]: ...
    async def save_services(self, rows: dict[str, tuple[str, bytes] | None]) -> None: ...
    async def save(self, index: int, jobs: list[Job], allocs: list[Allocation],
                   evals: list[Evaluation] | None = None, versions: list[Job] | None = None,
                   forget_versions: list[tuple[str, int]] | None = None,
                   deployments: list[Deployment] | None = None,
                   submissions: list[JobSubmission] | None = None) -> None: ...
    async def delete(self, job_id: str, alloc_ids: list[str], index: int | None = None,
                     deployment_ids: list[str] | None = None) -> None: ...
    async def delete_evals(self, eval_ids: list[str], index: int,
                           alloc_ids: list[str] | None = None,
                           deployment_ids: list[str] | None = None) -> None: ...
    async def aclose(self) -> None: ...


def _version_key(job_id: str, version: int) -> str:
    return f"{job_id}\x00{version}"


@final
class ServerStore:
    def __init__(self, conn: sqlite3.Connection, path: Path | None = None) -> None:
        self._conn = conn
        self.path = path
        self._limiter = trio.CapacityLimiter(1)
        # Writes not yet on disk (a full disk): row id -> value, None for a delete.
        self._jobs: dict[str, str | None] = {}
        self._allocs: dict[str, tuple[str, str] | None] = {}
        self._evals: dict[str, tuple[str, str] | None] = {}
        self._versions: dict[str, tuple[str, str] | None] = {}
        self._deployments: dict[str, tuple[str, str] | None] = {}
        #: A submission's row is its version's key: dropped with the version.
        self._submissions: dict[str, tuple[str, str] | None] = {}
        self._index: int | None = None
        #: Why writes are not reaching the disk right now; None when they are.
        self.degraded: str | None = None

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
            conn = connect_wal(path)
            db = sqlite_utils.Database(conn)
            tables = set(db.table_names())
            if not {"jobs", "allocs", "evals", "job_versions", "deployments", "meta",
                    "services", "job_submissions"} <= tables:
                with conn:
                    db.table("jobs").create({"id": str, "value": str}, pk="id",
                                            if_not_exists=True)
                    db.table("allocs").create({"id": str, "job_id": str, "value": str},
                                              pk="id", if_not_exists=True)
                    db.table("evals").create({"id": str, "job_id": str, "value": str},
                                             pk="id", if_not_exists=True)
                    db.table("job_versions").create(
                        {"id": str, "job_id": str, "value": str}, pk="id", if_not_exists=True)
                    # A job version's submission (structs/submission.py), keyed as the
                    # version is.
                    db.table("job_submissions").create(
                        {"id": str, "job_id": str, "value": str}, pk="id", if_not_exists=True)
                    db.table("deployments").create(
                        {"id": str, "job_id": str, "value": str}, pk="id", if_not_exists=True)
                    db.table("meta").create({"key": str, "value": int}, pk="key",
                                            if_not_exists=True)
                    # The service catalogue (server/services.py).
                    db.table("services").create({"id": str, "alloc_id": str, "value": str},
                                                pk="id", if_not_exists=True)
            return conn

        return cls(await trio.to_thread.run_sync(connect), directory / "server.db")

    async def load(self) -> tuple[list[Job], list[Allocation], int]:
        def read() -> tuple[list[Job], list[Allocation], int]:
            jobs = [msgspec.json.decode(v, type=Job)
                    for (v,) in self._conn.execute("SELECT value FROM jobs")]
            allocs = [msgspec.json.decode(v, type=Allocation)
                      for (v,) in self._conn.execute("SELECT value FROM allocs")]
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'index'").fetchone()
            return jobs, allocs, int(row[0]) if row else 0

        return await trio.to_thread.run_sync(read, limiter=self._limiter)

    async def load_evals(self) -> list[Evaluation]:
        def read() -> list[Evaluation]:
            return [msgspec.json.decode(v, type=Evaluation)
                    for (v,) in self._conn.execute("SELECT value FROM evals")]

        return await trio.to_thread.run_sync(read, limiter=self._limiter)

    async def load_versions(self) -> list[Job]:
        def read() -> list[Job]:
            return [msgspec.json.decode(v, type=Job)
                    for (v,) in self._conn.execute("SELECT value FROM job_versions")]

        return await trio.to_thread.run_sync(read, limiter=self._limiter)

    async def load_deployments(self) -> list[Deployment]:
        def read() -> list[Deployment]:
            return [msgspec.json.decode(v, type=Deployment)
                    for (v,) in self._conn.execute("SELECT value FROM deployments")]

        return await trio.to_thread.run_sync(read, limiter=self._limiter)

    async def load_submission(self, job_id: str, version: int) -> JobSubmission | None:
        """The submission stored with the job's `version`, if any (read when asked: sources
        are large and rarely read, so they are not kept in memory)."""
        key = _version_key(job_id, version)
        if key in self._submissions:  # not on disk yet (a full disk)
            pending = self._submissions[key]
            await trio.lowlevel.checkpoint()
            return None if pending is None else msgspec.json.decode(pending[1],
                                                                    type=JobSubmission)

        def read() -> JobSubmission | None:
            row = self._conn.execute("SELECT value FROM job_submissions WHERE id = ?",
                                     (key,)).fetchone()
            return None if row is None else msgspec.json.decode(row[0], type=JobSubmission)

        return await trio.to_thread.run_sync(read, limiter=self._limiter)

    async def load_services(self) -> list[bytes]:
        """The service catalogue's rows (server/services.py decodes them)."""
        def read() -> list[bytes]:
            return [v.encode() for (v,) in self._conn.execute("SELECT value FROM services")]

        return await trio.to_thread.run_sync(read, limiter=self._limiter)

    async def save_services(self, rows: dict[str, tuple[str, bytes] | None]) -> None:
        """Service registrations written (id -> (alloc id, JSON)) or deleted (id -> None), in
        one transaction. The index is not written here: the catalogue's changes take theirs
        through `LocalServer.change`, which persists it."""
        def write() -> None:
            with self._conn:
                self._conn.executemany(
                    "INSERT INTO services (id, alloc_id, value) VALUES (?, ?, ?) ON CONFLICT "
                    "(id) DO UPDATE SET value = excluded.value",
                    [(k, v[0], v[1].decode()) for k, v in rows.items() if v is not None])
                self._conn.executemany("DELETE FROM services WHERE id = ?",
                                       [(k,) for k, v in rows.items() if v is None])

        await trio.to_thread.run_sync(write, limiter=self._limiter)

    async def save(self, index: int, jobs: list[Job], allocs: list[Allocation],
                   evals: list[Evaluation] | None = None, versions: list[Job] | None = None,
                   forget_versions: list[tuple[str, int]] | None = None,
                   deployments: list[Deployment] | None = None,
                   submissions: list[JobSubmission] | None = None) -> None:
        """One change: rows written (jobs, allocations, evaluations, job versions kept for
        the history and their submissions, deployments) and job versions dropped from it
        (with their submissions), with the index, in one transaction."""
        for d in deployments or ():
            self._deployments[d.id] = (d.job_id, _encoder.encode(d).decode())
        for v in versions or ():
            self._versions[_version_key(v.id, v.version)] = (v.id, _encoder.encode(v).decode())
        for sub in submissions or ():
            self._submissions[_version_key(sub.job_id, sub.version)] = (
                sub.job_id, _encoder.encode(sub).decode())
        for job_id, version in forget_versions or ():
            self._versions[_version_key(job_id, version)] = None
            self._submissions[_version_key(job_id, version)] = None
        for j in jobs:
            self._jobs[j.id] = _encoder.encode(j).decode()
        for a in allocs:
            self._allocs[a.id] = (a.job_id, _encoder.encode(a).decode())
        for e in evals or ():
            self._evals[e.id] = (e.job_id, _encoder.encode(e).decode())
        self._index = index
        await self._flush()

    async def delete(self, job_id: str, alloc_ids: list[str], index: int | None = None,
                     deployment_ids: list[str] | None = None) -> None:
        self._jobs[job_id] = None
        for deployment_id in deployment_ids or ():
            self._deployments[deployment_id] = None
        for alloc_id in alloc_ids:
            self._allocs[alloc_id] = None
        if index is not None:
            self._index = index
        await self._flush()

    async def delete_evals(self, eval_ids: list[str], index: int,
                           alloc_ids: list[str] | None = None,
                           deployment_ids: list[str] | None = None) -> None:
        """Forget evaluations, and the allocations and deployments collected with them, in
        one transaction."""
        for deployment_id in deployment_ids or ():
            self._deployments[deployment_id] = None
        for eval_id in eval_ids:
            self._evals[eval_id] = None
        for alloc_id in alloc_ids or []:
            self._allocs[alloc_id] = None
        self._index = index
        await self._flush()

    def _write(self, jobs: dict[str, str | None], allocs: dict[str, tuple[str, str] | None],
               evals: dict[str, tuple[str, str] | None],
               versions: dict[str, tuple[str, str] | None], index: int | None,
               deployments: dict[str, tuple[str, str] | None],
               submissions: dict[str, tuple[str, str] | None]) -> None:
        with self._conn:
            self._conn.executemany(
                "INSERT INTO job_submissions (id, job_id, value) VALUES (?, ?, ?) ON CONFLICT "
                "(id) DO UPDATE SET value = excluded.value",
                [(k, *v) for k, v in submissions.items() if v is not None])
            self._conn.executemany("DELETE FROM job_submissions WHERE id = ?",
                                   [(k,) for k, v in submissions.items() if v is None])
            self._conn.executemany(
                "INSERT INTO deployments (id, job_id, value) VALUES (?, ?, ?) ON CONFLICT "
                "(id) DO UPDATE SET value = excluded.value",
                [(k, *v) for k, v in deployments.items() if v is not None])
            self._conn.executemany("DELETE FROM deployments WHERE id = ?",
                                   [(k,) for k, v in deployments.items() if v is None])
            self._conn.executemany(
                "INSERT INTO job_versions (id, job_id, value) VALUES (?, ?, ?) ON CONFLICT "
                "(id) DO UPDATE SET value = excluded.value",
                [(k, *v) for k, v in versions.items() if v is not None])
            self._conn.executemany("DELETE FROM job_versions WHERE id = ?",
                                   [(k,) for k, v in versions.items() if v is None])
            self._conn.executemany(
                "INSERT INTO evals (id, job_id, value) VALUES (?, ?, ?) ON CONFLICT (id) "
                "DO UPDATE SET value = excluded.value",
                [(k, *v) for k, v in evals.items() if v is not None])
            self._conn.executemany("DELETE FROM evals WHERE id = ?",
                                   [(k,) for k, v in evals.items() if v is None])
            self._conn.executemany(
                "INSERT INTO jobs (id, value) VALUES (?, ?) ON CONFLICT (id) DO UPDATE "
                "SET value = excluded.value", [(k, v) for k, v in jobs.items() if v is not None])
            self._conn.executemany("DELETE FROM jobs WHERE id = ?",
                                   [(k,) for k, v in jobs.items() if v is None])
            self._conn.executemany(
                "INSERT INTO allocs (id, job_id, value) VALUES (?, ?, ?) ON CONFLICT (id) "
                "DO UPDATE SET value = excluded.value",
                [(k, *v) for k, v in allocs.items() if v is not None])
            self._conn.executemany("DELETE FROM allocs WHERE id = ?",
                                   [(k,) for k, v in allocs.items() if v is None])
            if index is not None:
                self._conn.execute("INSERT INTO meta (key, value) VALUES ('index', ?) ON "
                                   "CONFLICT (key) DO UPDATE SET value = excluded.value",
                                   (index,))

    async def _flush(self) -> None:
        """Write everything not yet on disk in one transaction; on a full disk keep it."""
        jobs, allocs, evals, index = self._jobs, self._allocs, self._evals, self._index
        versions, deployments = self._versions, self._deployments
        submissions = self._submissions
        self._jobs, self._allocs, self._evals, self._index = {}, {}, {}, None
        self._versions, self._deployments, self._submissions = {}, {}, {}
        try:
            await trio.to_thread.run_sync(self._write, jobs, allocs, evals, versions, index,
                                          deployments, submissions, limiter=self._limiter)
        except BaseException as e:
            # Not written: back in front of whatever was queued meanwhile (newer wins).
            self._jobs = {**jobs, **self._jobs}
            self._allocs = {**allocs, **self._allocs}
            self._evals = {**evals, **self._evals}
            self._versions = {**versions, **self._versions}
            self._deployments = {**deployments, **self._deployments}
            self._submissions = {**submissions, **self._submissions}
            self._index = self._index if self._index is not None else index
            if isinstance(e, Exception) and out_of_space(e):
                if self.degraded is None:
                    log.warning("server state %s: %s; changes are kept in memory and "
                                "retried with the next write", self.path, e)
                self.degraded = f"writing server state failed: {e}; retrying"
                return
            raise
        if self.degraded is not None:
            log.warning("server state: writes succeed again")
            self.degraded = None

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            try:
                if (self._jobs or self._allocs or self._evals or self._versions
                        or self._deployments or self._submissions
                        or self._index is not None):
                    with trio.move_on_after(CLOSE_TIMEOUT):
                        await self._flush()
            finally:
                await trio.to_thread.run_sync(self._conn.close, limiter=self._limiter)

"""Opening the client state file: the lock, the connection, the schema.

*Schema.* A `meta` table holds the schema version. A new file gets the current version; a known
older version is backed up to `state.db.backup` and then migrated in one transaction; any other
version, or a file that is not yurt's, is refused with a `StateVersionError` before anything is
written.

*Exclusivity.* `state.lock` in the state directory is `flock`ed for as long as the store is
open (it also records the holder's pid for the error message), so a second agent on the same
data dir fails at once instead of corrupting state.

*A full disk at start.* WAL mode needs a `-shm` file beside the database; when the disk is
full it cannot be created and opening fails with an I/O error. The file is then opened with
exclusive locking, which keeps the WAL index in this process's memory: the state loads, the
agent re-attaches its tasks, and its writes take the writer's full-disk path (`sqlite.py`).
`state.lock` already keeps every other agent out, so the only loss is other readers (an
operator's `sqlite3`) until the next start.

*After a deletion.* When the running agent found its file deleted it saved what it still
held as `state.db.recovered`; a start that finds that copy and no `state.db` refuses with a
`StateError` naming both, rather than start empty and orphan every task.

Permissions: the directory is 0700 and the file 0600 (created so before SQLite opens it, and
narrowed if an older yurt left them wider): the client state holds task environments.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import sqlite_utils

from yurt.runtime.errors import StateError, StateLockedError, StateVersionError

log = logging.getLogger("yurt.store")

#: The schema this yurt writes. Bump it with a migration in `MIGRATIONS`.
SCHEMA_VERSION: Final = 1

#: `MIGRATIONS[v]` upgrades a connection's schema from version v to v + 1, inside the
#: upgrade transaction. Empty while there has only ever been one schema.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {}

DB_NAME: Final = "state.db"
LOCK_NAME: Final = "state.lock"
#: Where the writer saves what a state file deleted under it still held (`sqlite.py`).
RECOVERED_NAME: Final = DB_NAME + ".recovered"

_SQLITE_FULL: Final = 13
_SQLITE_IOERR: Final = 10

TABLES: Final = {
    "alloc": ("alloc_id", "kind"),
    "task": ("alloc_id", "task", "kind"),
    "node": ("kind",),
}


def out_of_space(e: Exception) -> bool:
    """A write failure that freeing space will cure (so it is worth retrying)."""
    if isinstance(e, sqlite3.OperationalError):
        return (getattr(e, "sqlite_errorcode", 0) & 0xFF) == _SQLITE_FULL
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def _acquire_lock(state_dir: Path) -> int:
    fd = os.open(state_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StateLockedError(
            f"state directory {state_dir} is in use by another yurt agent (pid {holder}); "
            "stop that agent first, or give this one another --data-dir") from None
    # The pid only helps the error message above; a full disk must not stop the start.
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _schema_version(db: sqlite_utils.Database) -> int | None:
    if "meta" not in db.table_names():
        return None
    row = db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    if row is None or not str(row[0]).isdigit():
        raise StateVersionError(f"state database {db.conn} has no valid schema version")
    return int(row[0])


def _create_schema(db: sqlite_utils.Database) -> None:
    with db.conn:
        db.table("meta").create({"key": str, "value": str}, pk="key")
        for table, pk in TABLES.items():
            db.table(table).create({**dict.fromkeys(pk, str), "value": str}, pk=pk)
        db.table("meta").insert_all([
            {"key": "version", "value": str(SCHEMA_VERSION)},
            {"key": "created", "value": datetime.now(UTC).isoformat()},
        ])


def _upgrade(conn: sqlite3.Connection, path: Path, found: int) -> None:
    backup_path = path.with_name(path.name + ".backup")
    backup = sqlite3.connect(backup_path)
    try:
        conn.backup(backup)
    finally:
        backup.close()
    with conn:
        for version in range(found, SCHEMA_VERSION):
            MIGRATIONS[version](conn)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'version'", (str(SCHEMA_VERSION),))
        conn.execute("INSERT INTO meta (key, value) VALUES ('upgraded', ?) ON CONFLICT (key) "
                     "DO UPDATE SET value = excluded.value", (datetime.now(UTC).isoformat(),))


def _connect_mode(path: Path, *, exclusive: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level="DEFERRED")
    try:
        if exclusive:
            conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
    except BaseException:
        conn.close()
        raise
    return conn


def connect_wal(path: Path) -> sqlite3.Connection:
    """WAL mode; when its shared-memory file cannot be created (a full disk: an I/O error or
    SQLITE_FULL), exclusive locking instead, which keeps the WAL index in this process's
    memory. `state.lock` already keeps every other agent out, so nothing is lost but other
    readers (an operator's `sqlite3`) until the next start. The server store opens its file
    the same way."""
    try:
        return _connect_mode(path, exclusive=False)
    except sqlite3.OperationalError as e:
        if (getattr(e, "sqlite_errorcode", 0) & 0xFF) not in (_SQLITE_FULL, _SQLITE_IOERR):
            raise
        log.warning("%s: %s; opening with exclusive locking (is the disk full?)", path, e)
    return _connect_mode(path, exclusive=True)


def open_file(state_dir: Path) -> tuple[sqlite3.Connection, int, tuple[int, int]]:
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(state_dir, 0o700)
    lock_fd = _acquire_lock(state_dir)
    path = state_dir / DB_NAME
    try:
        recovered = path.with_name(RECOVERED_NAME)
        if not path.exists() and recovered.exists():
            # A fresh, empty state would orphan every task the lost one knew about.
            raise StateError(
                f"{path} is missing but {recovered} holds the state saved when it was "
                f"deleted: move it to {path} to re-attach the tasks it ran, or delete it to "
                "start afresh (those tasks are then left running unsupervised)")
        # Created 0600 before SQLite opens it, and narrowed if an older yurt left it wider:
        # the client state holds task environments.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        os.chmod(path, 0o600)
        conn = connect_wal(path)
        try:
            db = sqlite_utils.Database(conn)
            found = _schema_version(db)
            if found is None:
                if db.table_names():
                    raise StateVersionError(f"{path} is not a yurt state database "
                                            f"(tables: {', '.join(db.table_names())})")
                _create_schema(db)
            elif found != SCHEMA_VERSION:
                if not all(v in MIGRATIONS for v in range(found, SCHEMA_VERSION)) or (
                        found > SCHEMA_VERSION):
                    raise StateVersionError(
                        f'incompatible state version in {path}: expected "{SCHEMA_VERSION}" '
                        f'but found "{found}" (written by a newer yurt?)')
                _upgrade(conn, path, found)
            st = os.stat(path)
        except BaseException:
            conn.close()
            raise
    except sqlite3.DatabaseError as e:
        os.close(lock_fd)
        raise StateError(f"cannot open state database {path}: {e}") from e
    except BaseException:
        os.close(lock_fd)
        raise
    return conn, lock_fd, (st.st_dev, st.st_ino)

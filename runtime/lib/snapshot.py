"""The embedded server's snapshot archive: what `GET /v1/operator/snapshot` answers and
`yurt operator snapshot inspect|restore` read.

The shape follows Nomad's helper/snapshot archive (a gzipped tar of `meta.json`, the state and
`SHA256SUMS`), with yurt's state in it instead of a raft FSM dump:

- `meta.json`: Nomad's raft `SnapshotMeta` fields (`ID` = `<term>-<index>-<unix ms>`, `Size`,
  `Index`, `Term` (always 1: one agent never holds an election), `Version` (this format's, 1))
  and `Format` = "yurt-server-snapshot", checked on read;
- the server directory's files (`FILES`): `server.db` and `objects.db` copied with SQLite's
  online backup API (each a consistent database; the caller holds the server's change lock
  so the two are of one index), the scheduler configuration, node state and dynamic host
  volumes (server/hostvolumes.py; their directories are the node's, not carried), and the
  root key `keyring` that seals the variables in objects.db (left out with `redact`: then the
  variables cannot be read after a restore on another data dir). The workload identity signing key
  (`workload-key`) and the bootstrap token file stay the data dir's own: not carried;
- `SHA256SUMS`: `<sha256>  <name>` for every other member, checked before anything is used.

Invariants: a snapshot that does not verify (a missing or extra member, a checksum, an
unknown format) is refused whole with `SnapshotError`, before anything is written; `restore`
never deletes the state it replaces: the files it replaces move to
`<server dir>/pre-restore-<unix ms>/` first (with the SQLite `-wal`/`-shm` beside them, which
would otherwise be replayed into the new file); the restored index counter is raised above the
replaced one, so indexes never go backwards for a client or a blocking query. A snapshot with
the keyring is a secret: the caller writes it 0600.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sqlite3
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

FORMAT: Final = "yurt-server-snapshot"
VERSION: Final = 1
#: The server directory's files a snapshot carries, databases first.
DATABASES: Final = ("server.db", "objects.db")
FILES: Final = (*DATABASES, "keyring", "scheduler-config.json", "node-state.json",
                "host-volumes.json")
_SUMS: Final = "SHA256SUMS"
_META: Final = "meta.json"
#: The largest member read back: far above any single agent's state.
_MAX_MEMBER: Final = 1 << 30


class SnapshotError(Exception):
    """The archive is not a yurt server snapshot, or does not verify."""


@dataclass(frozen=True)
class Snapshot:
    meta: dict[str, Any]
    files: dict[str, bytes]


def _backup(source: Path) -> bytes:
    """A consistent copy of the SQLite database at `source` (the online backup API)."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "copy.db"
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
        try:
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
        return target.read_bytes()


def create(server_dir: Path, index: int, *, redact: bool = False) -> bytes:
    """The snapshot archive of the server directory at `index` (blocking: run it in a
    thread, under the server's change lock)."""
    files: dict[str, bytes] = {}
    for name in FILES:
        if redact and name == "keyring":
            continue
        path = server_dir / name
        if name in DATABASES:
            files[name] = _backup(path)
            continue
        with contextlib.suppress(FileNotFoundError):
            files[name] = path.read_bytes()
    now_ms = int(time.time() * 1000)
    meta = {"ID": f"1-{index}-{now_ms}", "Size": sum(len(b) for b in files.values()),
            "Index": index, "Term": 1, "Version": VERSION, "Format": FORMAT,
            "Redacted": redact}
    return _archive(meta, files, now_ms // 1000)


def redact(snapshot: Snapshot) -> bytes:
    """The snapshot's archive again without the root key (Nomad's helper/raftutil
    `RedactSnapshot`, for `operator snapshot redact`): the same state, ID and index, `Size`
    and `Redacted` updated; a redacted snapshot stays one."""
    files = {name: data for name, data in snapshot.files.items() if name != "keyring"}
    meta = {**snapshot.meta, "Size": sum(len(b) for b in files.values()), "Redacted": True}
    return _archive(meta, files, int(time.time()))


def _archive(meta: dict[str, Any], files: dict[str, bytes], mtime: int) -> bytes:
    """The gzipped tar of `meta.json`, `files` and their `SHA256SUMS`."""
    members = {_META: json.dumps(meta, indent=2).encode(), **files}
    sums = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n"
                   for name, data in members.items())
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in {**members, _SUMS: sums.encode()}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, mtime
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def read(path: Path) -> Snapshot:
    """The verified snapshot in the file at `path`.

    Raises:
        SnapshotError: not a snapshot, or a member missing, extra or altered.
        OSError: the file cannot be read.
    """
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            for info in tar:
                if not info.isfile() or info.size > _MAX_MEMBER or "/" in info.name:
                    raise SnapshotError(f"unexpected member {info.name!r}")
                handle = tar.extractfile(info)
                assert handle is not None  # a regular file always has one
                members[info.name] = handle.read()
    except (tarfile.TarError, EOFError, OSError) as e:
        if isinstance(e, OSError) and not isinstance(e, EOFError) and e.errno is not None:
            raise
        raise SnapshotError(f"not a snapshot archive (a gzipped tar): {e}") from None
    sums = members.pop(_SUMS, None)
    if sums is None:
        raise SnapshotError(f"no {_SUMS} in the archive")
    listed: dict[str, str] = {}
    for line in sums.decode(errors="replace").splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    if set(listed) != set(members):
        raise SnapshotError(f"the members {sorted(members)} do not match {_SUMS}'s "
                            f"{sorted(listed)}")
    for name, data in members.items():
        if hashlib.sha256(data).hexdigest() != listed[name]:
            raise SnapshotError(f"{name}: checksum mismatch (the file is damaged)")
    try:
        meta = json.loads(members.pop(_META))
    except (KeyError, ValueError) as e:
        raise SnapshotError(f"no readable {_META}: {e}") from None
    if not isinstance(meta, dict) or meta.get("Format") != FORMAT:
        raise SnapshotError(f"not a {FORMAT} (Format {meta.get('Format')!r})"
                            if isinstance(meta, dict) else f"{_META} is not an object")
    if meta.get("Version") != VERSION:
        raise SnapshotError(f"snapshot version {meta.get('Version')!r}: this yurt reads "
                            f"version {VERSION}")
    if not set(DATABASES) <= set(members) or not set(members) <= set(FILES):
        raise SnapshotError(f"the archive holds {sorted(members)}, expected {list(FILES)}")
    return Snapshot(meta, members)


#: Table → the name `inspect` shows it by (Nomad's snapshot types).
_TYPES: Final = {
    "jobs": "JobSnapshot", "job_versions": "JobVersionSnapshot", "allocs": "AllocSnapshot",
    "evals": "EvalSnapshot", "deployments": "DeploymentSnapshot",
    "job_submissions": "JobSubmissionSnapshot", "services": "ServiceRegistrationSnapshot",
    "variables": "VariablesSnapshot", "namespaces": "NamespaceSnapshot",
    "node_pools": "NodePoolSnapshot", "acl_policies": "ACLPolicySnapshot",
    "acl_tokens": "ACLTokenSnapshot", "acl_roles": "ACLRoleSnapshot",
}


def stats(snapshot: Snapshot) -> list[tuple[str, int, int]]:
    """(type, count, bytes) per table with rows, largest first (Nomad's `generateStats`)."""
    found: list[tuple[str, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in DATABASES:
            path = Path(tmp) / name
            path.write_bytes(snapshot.files[name])
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                tables = [r[0] for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")]
                for table in tables:
                    if table not in _TYPES:
                        continue
                    columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
                    size = " + ".join(f'COALESCE(LENGTH("{c}"), 0)' for c in columns)
                    count, total = conn.execute(
                        f'SELECT COUNT(*), COALESCE(SUM({size}), 0) FROM "{table}"').fetchone()
                    if count:
                        found.append((_TYPES[table], int(count), int(total)))
            finally:
                conn.close()
    return sorted(found, key=lambda s: (-s[2], s[0]))


#: Table → its key in `state_map` (Nomad's helper/raftutil/fsm.go `StateAsMap` names, and
#: the API's for yurt's tables Nomad keeps elsewhere). Variables are left out, as Nomad
#: leaves them out: sealed, they say nothing; the one-time tokens are short-lived secrets.
STATE_KEYS: Final = {
    "jobs": "Jobs", "job_versions": "JobVersions", "allocs": "Allocs", "evals": "Evals",
    "deployments": "Deployments", "job_submissions": "JobSubmissions",
    "services": "ServiceRegistrations", "namespaces": "Namespaces",
    "node_pools": "NodePools", "acl_policies": "ACLPolicies", "acl_tokens": "ACLTokens",
    "acl_roles": "ACLRoles",
}


def state_map(snapshot: Snapshot) -> dict[str, list[Any]]:
    """The snapshot's state as Nomad's `operator snapshot state` prints it: each kind of
    object a list of its API JSON (in its table's key order), the node (yurt's one node:
    its registration state), the index counter as `Indexes`, and the archive's meta as
    `SnapshotMeta` (a list of one, as Nomad's). Root keys appear by their presence only:
    `RootKeys` lists `{"Redacted": …}` and never key material."""
    out: dict[str, list[Any]] = {key: [] for key in STATE_KEYS.values()}
    with tempfile.TemporaryDirectory() as tmp:
        for name in DATABASES:
            path = Path(tmp) / name
            path.write_bytes(snapshot.files[name])
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                tables = {r[0] for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                for table, key in STATE_KEYS.items():
                    if table in tables:
                        out[key] = [json.loads(row[0]) for row in conn.execute(
                            f'SELECT value FROM "{table}" ORDER BY rowid')]
                if "meta" in tables:
                    out["Indexes"] = [{"Key": str(k), "Value": v} for k, v in
                                      conn.execute("SELECT key, value FROM meta")]
            finally:
                conn.close()
    node = snapshot.files.get("node-state.json")
    out["Nodes"] = [json.loads(node)] if node else []
    volumes = snapshot.files.get("host-volumes.json")
    out["HostVolumes"] = json.loads(volumes).get("volumes", []) if volumes else []
    out["RootKeys"] = [] if "keyring" not in snapshot.files else [{"Redacted": False}]
    out["SnapshotMeta"] = [snapshot.meta]
    return dict(sorted(out.items()))


def _index_of(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'index'").fetchone()
        return int(row[0]) if row else 0
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def restore(server_dir: Path, snapshot: Snapshot) -> Path:
    """Replace the server directory's state with the snapshot's, with no agent running on it
    (the caller holds the agent's lock). Returns where the replaced files went.

    Raises:
        OSError: a file could not be written or moved (the replaced files are then still
            in the returned directory or in place; nothing is deleted).
    """
    server_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=server_dir))
    for name, data in snapshot.files.items():
        fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    # Indexes never go backwards: the restored counter starts above the replaced one.
    replaced_index = _index_of(server_dir / "server.db")
    index = max(replaced_index, int(snapshot.meta.get("Index") or 0)) + 1
    conn = sqlite3.connect(staging / "server.db")
    try:
        with conn:
            conn.execute("INSERT INTO meta (key, value) VALUES ('index', ?) ON CONFLICT (key) "
                         "DO UPDATE SET value = excluded.value", (index,))
        conn.execute("PRAGMA journal_mode = DELETE")  # one file, no WAL left beside it
    finally:
        conn.close()
    kept = server_dir / f"pre-restore-{int(time.time() * 1000)}"
    kept.mkdir(mode=0o700)
    for name in FILES:
        for suffix in (("", "-wal", "-shm") if name in DATABASES else ("",)):
            with contextlib.suppress(FileNotFoundError):
                os.rename(server_dir / (name + suffix), kept / (name + suffix))
    for name in snapshot.files:
        os.rename(staging / name, server_dir / name)
    os.rmdir(staging)
    fd = os.open(server_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return kept

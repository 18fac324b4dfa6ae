"""`ClusterStore`: the server state of a yurt cluster, in etcd (any `KV`).

It has `ServerStore`'s interface (runtime/server/state/sqlite.py: load*, save*, delete*, aclose,
`degraded`), so `LocalServer` runs over either, plus what only a cluster has: nodes and their
secrets, a consistent `snapshot()`, and `watch()`/`decode()` to follow the other servers'
writes.

Key layout, under the configured prefix (default "/yurt/"); every value is the JSON that
`ServerStore` stores (msgspec, Nomad field names) unless said otherwise:

    index                              the Raft-like index counter, decimal ASCII
    jobs/<job id>                      Job (the current version)
    allocs/<alloc id>                  Allocation (server view) WITHOUT its job, plus a
                                       "JobBody" field naming the job's row below
    alloc-jobs/<job id>/<digest>       the Job an allocation runs, once per distinct body
                                       (digest: of its JSON), shared by every allocation
                                       that runs it
    evals/<eval id>                    Evaluation
    versions/<job id>/<version:020d>   Job, one per version kept for the history
    submissions/<job id>/<version:020d>
                                       JobSubmission of that version, if it had one;
                                       dropped with it, read only when asked (neither
                                       the snapshot nor the watch decodes them)
    deployments/<deployment id>        Deployment
    services/<registration id>         the service catalogue's row, as server/services.py
                                       encodes it (the alloc id column of SQLite is not kept:
                                       nothing reads it back)
    nodes/<node id>                    Node
    node-secrets/<node id>             the hash of the node's SecretID, raw text; apart from
                                       the Node so no API path that prints a Node can leak it

Job ids may contain "/" (dispatched and periodic children): a key's kind is the text before
the first "/" after the prefix, and a version key splits at its last "/".

Invariant, the reason for the counter: every write is ONE etcd transaction that compares the
counter key's mod_revision with `index_revision` (the revision of the counter this store last
wrote or observed) and puts the counter with its rows. So a server whose view is stale cannot
overwrite a newer state: its write fails with `StoreConflict` and changes nothing, in etcd or
in this object; it must catch up (`snapshot()`, or `decode()` of the watch) and decide again.
The same mechanism serialises the servers' writes without any lock held across a network
call; within one store a `trio.Lock` keeps this process's own writes from racing each other.
A server following the watch moves `index_revision` only as it applies a change to the view
its writes are computed from (`observe_change`, under the lock that covers read, decide and
write: LocalServer's `_lock`); moving it on arrival would let a write computed without the
change pass the compare and overwrite it.

Normalised allocations (as Nomad's plan results are): a plan places thousands of allocations
of ONE job, and each embeds the whole job (several KiB): written inline, a 10,000-allocation
plan is over 100 MB, past any etcd request limit, and every server decodes 10,000 copies. So
an allocation's row names its job's body, written once (`alloc-jobs/`), and decoding puts the
job back, the same decoded object for every allocation that shares the body. A body is written
with the first allocation that names it in a transaction (again when not seen here: rewriting
the same bytes is harmless) and deleted with its job (`delete`); bodies of collected
allocations of a job that stays are kept until then (a job's bodies number its placed
versions, like its kept versions).

Rejected: one compare per row (mod_revision of each key written): cheaper conflicts but a
write could still be based on a stale read of OTHER rows (a plan placed on a node another
server just filled). The counter makes the whole state the unit of consistency, which is what
the scheduler assumes.

Sizes: one plan can write hundreds of allocations in one transaction. etcd's defaults (128
operations, 1.5 MiB) are too small; yurt runs etcd with `--max-txn-ops` and
`--max-request-bytes` raised (runtime/server/cluster/etcd/process.py). A write over those limits
fails
with `StoreTooLarge`, naming the flags, before anything is sent; an etcd started with lower
limits answers with its own error, translated to the same exception.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar, final

import msgspec
import trio

from yurt.runtime.server.cluster.etcd.client import Compare, EtcdError, KeyValue, Op, WatchEvent
from yurt.runtime.server.cluster.etcd.kv import KV
from yurt.runtime.server.cluster.etcd.process import MAX_REQUEST_BYTES, MAX_TXN_OPS
from yurt.runtime.structs import Allocation, Evaluation, Job, Node
from yurt.runtime.structs.submission import JobSubmission
from yurt.runtime.structs.update import Deployment

log = logging.getLogger("yurt.server.etcdstore")

DEFAULT_PREFIX: Final = b"/yurt/"
#: The row kind of allocations' job bodies (see the header).
ALLOC_JOBS: Final = "alloc-jobs"
#: Framing counted per operation when sizing a transaction (etcd limits its protobuf form).
OP_OVERHEAD: Final = 16
_encoder = msgspec.json.Encoder()

K = TypeVar("K")
V = TypeVar("V")


class StoreConflict(Exception):
    """Another writer moved the counter since this store last saw it: nothing was written.

    `revision` is etcd's revision when the write was refused; catch up to at least it."""

    def __init__(self, revision: int) -> None:
        super().__init__(f"the cluster state changed (etcd revision {revision}); "
                         "read it again before writing")
        self.revision = revision


class StoreTooLarge(Exception):
    """One write is larger than etcd accepts in a transaction."""


class _JobRef(msgspec.Struct):
    """The one field an allocation row adds to the allocation's JSON."""

    job_body: str = msgspec.field(default="", name="JobBody")


_ref_decoder = msgspec.json.Decoder(_JobRef)
_alloc_decoder = msgspec.json.Decoder(Allocation)
_job_decoder = msgspec.json.Decoder(Job)


@dataclass(frozen=True)
class ClusterSnapshot:
    """The whole cluster state at one etcd revision."""

    revision: int
    index: int
    jobs: list[Job]
    allocs: list[Allocation]
    evals: list[Evaluation]
    versions: list[Job]
    deployments: list[Deployment]
    nodes: list[Node]
    #: The service catalogue's rows: registration id -> its JSON (server/services.py).
    services: dict[str, bytes]


@dataclass
class Rows(Generic[K, V]):
    """One kind's rows in one change: written (key -> value) and deleted keys."""

    put: dict[K, V] = field(default_factory=dict)
    deleted: list[K] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.put or self.deleted)


@dataclass
class ClusterChange:
    """What one etcd revision changed, decoded. Versions are keyed (job id, version)."""

    revision: int
    jobs: Rows[str, Job] = field(default_factory=Rows)
    allocs: Rows[str, Allocation] = field(default_factory=Rows)
    evals: Rows[str, Evaluation] = field(default_factory=Rows)
    versions: Rows[tuple[str, int], Job] = field(default_factory=Rows)
    deployments: Rows[str, Deployment] = field(default_factory=Rows)
    nodes: Rows[str, Node] = field(default_factory=Rows)
    services: Rows[str, bytes] = field(default_factory=Rows)
    #: The counter's new value, when this revision wrote it.
    index: int | None = None


def _version_tail(job_id: str, version: int) -> str:
    # Zero-padded so a prefix read lists a job's versions in order.
    return f"{job_id}/{version:020d}"


@final
class ClusterStore:
    """The server state in etcd (see the module's header for layout and invariants).

    The `KV` belongs to the caller: `aclose()` does not close it."""

    def __init__(self, kv: KV, prefix: bytes = DEFAULT_PREFIX, *,
                 max_txn_ops: int = MAX_TXN_OPS,
                 max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
        if not prefix.endswith(b"/"):
            raise ValueError(f"the key prefix must end with '/': {prefix!r}")
        self._kv = kv
        self.prefix = prefix
        self._counter = prefix + b"index"
        self.max_txn_ops = max_txn_ops
        self.max_request_bytes = max_request_bytes
        #: The counter's value as of `index_revision`.
        self.index = 0
        #: mod_revision of the counter key that this store last wrote or observed (0: the key
        #: did not exist); every write requires etcd's to be the same.
        self.index_revision = 0
        #: The revision of this store's last successful write (0: none yet). A view kept
        #: from the watch holds it once it applied that revision.
        self.written_revision = 0
        #: Always None: a write either reaches etcd or raises (nothing is held back).
        self.degraded: str | None = None
        self._write_lock = trio.Lock()
        # The last snapshot, answering the load_* calls that follow load() at one revision;
        # dropped at the first write or decoded change.
        self._loaded: ClusterSnapshot | None = None
        # Node secret hashes as of the last snapshot and decoded changes.
        self._secrets: dict[str, str] = {}
        #: Allocations' job bodies (the `alloc-jobs/` tail → the Job), as last read or
        #: decoded: every allocation of one body decodes to the same Job object.
        self._bodies: dict[str, Job] = {}

    # -------------------------------------------------------------------------------- keys

    def _key(self, kind: str, tail: str) -> bytes:
        return self.prefix + kind.encode() + b"/" + tail.encode()

    # ------------------------------------------------------------------------------- reads

    async def snapshot(self) -> ClusterSnapshot:
        """Everything, read in one request at one revision; the counter's mod_revision
        becomes `index_revision`, so the next write is based on this state."""
        kvs, revision = await self._kv.get_prefix(self.prefix)
        jobs: list[Job] = []
        allocs: list[Allocation] = []
        evals: list[Evaluation] = []
        versions: list[Job] = []
        deployments: list[Deployment] = []
        nodes: list[Node] = []
        services: dict[str, bytes] = {}
        secrets: dict[str, str] = {}
        index, index_revision = 0, 0
        alloc_rows: list[bytes] = []
        self._bodies = {}
        for kv in kvs:
            if kv.key == self._counter:
                index, index_revision = int(kv.value), kv.mod_revision
                continue
            kind, _, tail = kv.key[len(self.prefix):].decode().partition("/")
            if kind == "jobs":
                jobs.append(msgspec.json.decode(kv.value, type=Job))
            elif kind == "allocs":
                alloc_rows.append(kv.value)  # once every body is read
            elif kind == ALLOC_JOBS:
                self._bodies[tail] = _job_decoder.decode(kv.value)
            elif kind == "evals":
                evals.append(msgspec.json.decode(kv.value, type=Evaluation))
            elif kind == "versions":
                versions.append(msgspec.json.decode(kv.value, type=Job))
            elif kind == "deployments":
                deployments.append(msgspec.json.decode(kv.value, type=Deployment))
            elif kind == "nodes":
                nodes.append(msgspec.json.decode(kv.value, type=Node))
            elif kind == "services":
                services[tail] = kv.value
            elif kind == "node-secrets":
                secrets[tail] = kv.value.decode()
        allocs = [self._decode_alloc(row) for row in alloc_rows]
        snapshot = ClusterSnapshot(revision=revision, index=index, jobs=jobs, allocs=allocs,
                                   evals=evals, versions=versions, deployments=deployments,
                                   nodes=nodes, services=services)
        self.index, self.index_revision = index, index_revision
        self._secrets = secrets
        self._loaded = snapshot
        return snapshot

    async def _current(self) -> ClusterSnapshot:
        return self._loaded if self._loaded is not None else await self.snapshot()

    async def load(self) -> tuple[list[Job], list[Allocation], int]:
        """Jobs, allocations and the index, from a fresh snapshot; the load_* calls that
        follow (before any write) answer from the same snapshot, so start-up sees one
        revision."""
        snapshot = await self.snapshot()
        return snapshot.jobs, snapshot.allocs, snapshot.index

    async def load_evals(self) -> list[Evaluation]:
        return (await self._current()).evals

    async def load_versions(self) -> list[Job]:
        return (await self._current()).versions

    async def load_deployments(self) -> list[Deployment]:
        return (await self._current()).deployments

    async def load_submission(self, job_id: str, version: int) -> JobSubmission | None:
        """The submission stored with the job's `version`, read from etcd when asked."""
        kv, _ = await self._kv.get(self._key("submissions", _version_tail(job_id, version)))
        return None if kv is None else msgspec.json.decode(kv.value, type=JobSubmission)

    async def load_services(self) -> list[bytes]:
        """The service catalogue's rows (server/services.py decodes them)."""
        return list((await self._current()).services.values())

    async def load_nodes(self) -> list[Node]:
        return (await self._current()).nodes

    async def node_secret(self, node_id: str) -> str | None:
        """The stored hash of a node's SecretID (None: not registered). Answered from what
        this store has seen; a node it has not seen yet (registered through another server
        a moment ago) is read from etcd."""
        known = self._secrets.get(node_id)
        if known is not None:
            return known
        kv, _ = await self._kv.get(self._key("node-secrets", node_id))
        if kv is None:
            return None
        self._secrets[node_id] = kv.value.decode()
        return self._secrets[node_id]

    # ------------------------------------------------------------------------------ writes

    async def save(self, index: int, jobs: list[Job], allocs: list[Allocation],
                   evals: list[Evaluation] | None = None, versions: list[Job] | None = None,
                   forget_versions: list[tuple[str, int]] | None = None,
                   deployments: list[Deployment] | None = None,
                   submissions: list[JobSubmission] | None = None,
                   nodes: list[Node] | None = None) -> None:
        """One change: rows written (jobs, allocations, evaluations, job versions kept for
        the history and their submissions, deployments, nodes) and job versions dropped from
        it (with their submissions), with the index, in one transaction (`StoreConflict` if
        the state moved on since this store saw it)."""
        rows: dict[bytes, bytes | None] = {}
        for n in nodes or ():
            rows[self._key("nodes", n.id)] = _encoder.encode(n)
        # The order ServerStore applies them in, so a row named twice ends the same way.
        for d in deployments or ():
            rows[self._key("deployments", d.id)] = _encoder.encode(d)
        for v in versions or ():
            rows[self._key("versions", _version_tail(v.id, v.version))] = _encoder.encode(v)
        for sub in submissions or ():
            rows[self._key("submissions", _version_tail(sub.job_id, sub.version))] = (
                _encoder.encode(sub))
        for job_id, version in forget_versions or ():
            rows[self._key("versions", _version_tail(job_id, version))] = None
            rows[self._key("submissions", _version_tail(job_id, version))] = None
        for j in jobs:
            rows[self._key("jobs", j.id)] = _encoder.encode(j)
        bodies: dict[str, Job] = {}
        tails: dict[int, str] = {}  # id(job) → its body's tail: a plan's jobs encoded once
        for a in allocs:
            rows[self._key("allocs", a.id)] = self._encode_alloc(a, rows, bodies, tails)
        for e in evals or ():
            rows[self._key("evals", e.id)] = _encoder.encode(e)
        await self._write(rows, index)
        self._bodies.update(bodies)

    async def delete(self, job_id: str, alloc_ids: list[str], index: int | None = None,
                     deployment_ids: list[str] | None = None) -> None:
        rows: dict[bytes, bytes | None] = {self._key("jobs", job_id): None}
        body_prefix = f"{job_id}/"
        for tail in [t for t in self._bodies if t.startswith(body_prefix)
                     and "/" not in t[len(body_prefix):]]:
            rows[self._key(ALLOC_JOBS, tail)] = None
        for deployment_id in deployment_ids or ():
            rows[self._key("deployments", deployment_id)] = None
        for alloc_id in alloc_ids:
            rows[self._key("allocs", alloc_id)] = None
        await self._write(rows, index)

    async def delete_evals(self, eval_ids: list[str], index: int,
                           alloc_ids: list[str] | None = None,
                           deployment_ids: list[str] | None = None) -> None:
        """Forget evaluations, and the allocations and deployments collected with them, in
        one transaction."""
        rows: dict[bytes, bytes | None] = {}
        for deployment_id in deployment_ids or ():
            rows[self._key("deployments", deployment_id)] = None
        for eval_id in eval_ids:
            rows[self._key("evals", eval_id)] = None
        for alloc_id in alloc_ids or ():
            rows[self._key("allocs", alloc_id)] = None
        await self._write(rows, index)

    async def save_services(self, rows: dict[str, tuple[str, bytes] | None]) -> None:
        """Service registrations written (id -> (alloc id, JSON)) or deleted (id -> None), in
        one transaction, with the counter unchanged (the catalogue's changes take their index
        through `LocalServer.change`)."""
        await self._write({self._key("services", k): (v[1] if v is not None else None)
                           for k, v in rows.items()}, None)

    async def save_nodes(self, index: int, nodes: list[Node]) -> None:
        await self._write({self._key("nodes", n.id): _encoder.encode(n) for n in nodes}, index)

    async def save_rows(self, index: int, rows: dict[bytes, bytes | None]) -> None:
        """Rows of other kinds (full keys under the prefix: a namespace, a variable) written
        (value) or deleted (None) with the index, in one transaction."""
        for key in rows:
            if not key.startswith(self.prefix):
                raise ValueError(f"key {key!r} is outside the store's prefix")
        await self._write(dict(rows), index)

    async def save_node_secret(self, node_id: str, secret_hash: str) -> None:
        """Store the hash of a node's SecretID (never the secret, never in the Node)."""
        await self._write({self._key("node-secrets", node_id): secret_hash.encode()}, None)
        self._secrets[node_id] = secret_hash

    def _encode_alloc(self, alloc: Allocation, rows: dict[bytes, bytes | None],
                      bodies: dict[str, Job], tails: dict[int, str]) -> bytes:
        """The allocation's row: its JSON without the job, naming the job's body, which
        joins `rows` (and `bodies`) unless this store knows it is in etcd already. `tails`:
        the bodies of this write's job objects (a plan's allocations share one).

        Knowing it is enough: every write moves the counter, so a write based on a view in
        which the body existed fails (`StoreConflict`) if anything deleted it since."""
        job = alloc.job
        if job is None:
            return _encoder.encode(alloc)
        tail = tails.get(id(job))
        if tail is None:
            body = _encoder.encode(job)
            tail = tails[id(job)] = (
                f"{job.id}/{hashlib.blake2b(body, digest_size=16).hexdigest()}")
            if tail not in self._bodies and tail not in bodies:
                rows[self._key(ALLOC_JOBS, tail)] = body
                bodies[tail] = job
        stripped = _encoder.encode(msgspec.structs.replace(alloc, job=None))
        return b'{"JobBody":' + _encoder.encode(tail) + b"," + stripped[1:]

    def _decode_alloc(self, row: bytes) -> Allocation:
        alloc = _alloc_decoder.decode(row)
        ref = _ref_decoder.decode(row).job_body
        if ref:
            job = self._bodies.get(ref)
            if job is None:  # never written so by yurt: say so, keep the rest of the state
                log.error("allocation %s names a job body that is not in etcd: %s",
                          alloc.id, ref)
            alloc.job = job
        return alloc

    async def _write(self, rows: dict[bytes, bytes | None], index: int | None) -> None:
        """Rows and the counter in one transaction, if the counter is where this store last
        saw it. On success `index`/`index_revision` follow; on failure nothing changes."""
        async with self._write_lock:
            new_index = index if index is not None else self.index
            ops = [Op.put(self._counter, str(new_index).encode())]
            ops += [Op.put(k, v) if v is not None else Op.delete(k) for k, v in rows.items()]
            self._check_size(rows)
            try:
                result = await self._kv.txn(
                    [Compare.mod_revision(self._counter, "=", self.index_revision)], ops)
            except EtcdError as e:
                if "too many operations" in str(e) or "too large" in str(e):
                    raise StoreTooLarge(
                        f"etcd refused a write of {len(ops)} operations: {e}; start etcd with "
                        "higher --max-txn-ops / --max-request-bytes (yurt's own: "
                        f"--max-txn-ops {MAX_TXN_OPS} --max-request-bytes "
                        f"{MAX_REQUEST_BYTES})") from e
                raise
            if not result.succeeded:
                raise StoreConflict(result.revision)
            self.written_revision = result.revision
            # The watch may have delivered a later write of another server while this
            # answer was on its way (`observe`): the counter is then already past ours.
            if result.revision > self.index_revision:
                self.index, self.index_revision = new_index, result.revision
            self._loaded = None

    def _check_size(self, rows: dict[bytes, bytes | None]) -> None:
        count = len(rows) + 1
        size = sum(len(k) + len(v or b"") + OP_OVERHEAD for k, v in rows.items())
        size += len(self._counter) + 20 + 2 * OP_OVERHEAD  # the counter and its compare
        if count > self.max_txn_ops or size > self.max_request_bytes:
            raise StoreTooLarge(
                f"one write of {count} operations and about {size} bytes exceeds etcd's "
                f"limits ({self.max_txn_ops} operations, {self.max_request_bytes} bytes): "
                "start etcd with higher --max-txn-ops / --max-request-bytes")

    # ---------------------------------------------------------------------- following etcd

    def observe(self, index: int, revision: int) -> None:
        """The counter was seen at `index`, written at `revision` (from the watch): base the
        next write on it. Never moves back, so a lagging watch cannot undo a newer write of
        this store's own."""
        if revision > self.index_revision:
            self.index, self.index_revision = index, revision

    def observe_change(self, change: ClusterChange) -> None:
        """`observe` the counter of a change from `watch()`, once it is applied to the view
        the writes are computed from (under the same lock as those writes)."""
        if change.index is not None:
            self.observe(change.index, change.revision)

    def decode(self, revision: int, events: list[WatchEvent], *, observe: bool = True
               ) -> ClusterChange:
        """One revision's watch events, typed per kind; the counter, when among them, is
        `observe`d unless `observe` is false (see `watch`)."""
        change = ClusterChange(revision=revision)
        self._loaded = None
        # Job bodies first: an allocation of this revision may name one written with it.
        body_prefix = self.prefix + ALLOC_JOBS.encode() + b"/"
        for event in events:
            if event.kv.key.startswith(body_prefix):
                tail = event.kv.key[len(body_prefix):].decode()
                if event.type == "PUT":
                    self._bodies[tail] = _job_decoder.decode(event.kv.value)
                else:
                    self._bodies.pop(tail, None)
        for event in events:
            kv = event.kv
            if kv.key == self._counter:
                if event.type == "PUT":
                    change.index = int(kv.value)
                    if observe:
                        self.observe(change.index, kv.mod_revision)
                continue
            kind, _, tail = kv.key[len(self.prefix):].decode().partition("/")
            self._decode_row(change, kind, tail, event.type, kv)
        return change

    def _decode_row(self, change: ClusterChange, kind: str, tail: str, type_: str,
                    kv: KeyValue) -> None:
        put = type_ == "PUT"
        if kind == "jobs":
            _apply(change.jobs, tail, put, kv.value, Job)
        elif kind == "allocs":
            if put:
                change.allocs.put[tail] = self._decode_alloc(kv.value)
            else:
                change.allocs.deleted.append(tail)
        elif kind == ALLOC_JOBS:
            pass  # decoded first, above
        elif kind == "evals":
            _apply(change.evals, tail, put, kv.value, Evaluation)
        elif kind == "deployments":
            _apply(change.deployments, tail, put, kv.value, Deployment)
        elif kind == "nodes":
            _apply(change.nodes, tail, put, kv.value, Node)
        elif kind == "versions":
            job_id, _, version = tail.rpartition("/")
            _apply(change.versions, (job_id, int(version)), put, kv.value, Job)
        elif kind == "services":
            if put:
                change.services.put[tail] = kv.value
            else:
                change.services.deleted.append(tail)
        elif kind == "node-secrets":
            if put:
                self._secrets[tail] = kv.value.decode()
            else:
                self._secrets.pop(tail, None)
        # Other kinds: written by a newer yurt; not ours to interpret.

    async def watch(self, from_revision: int) -> AsyncIterator[ClusterChange]:
        """Every change from `from_revision` on (usually a snapshot's revision + 1), decoded,
        in revision order, until cancelled.

        The changes are NOT observed here: the caller calls `observe_change` as it applies
        each one, under the lock its writes hold from reading the view to `save`. Observing
        on arrival would let a write computed from a view without the change pass the
        compare-and-swap, and overwrite the change: a lost update."""
        stream = self._kv.watch(self.prefix, from_revision)
        try:
            async for revision, events in stream:
                yield self.decode(revision, events, observe=False)
        finally:
            # Closing this generator closes the KV's stream now, not at garbage collection.
            if isinstance(stream, AsyncGenerator):
                await stream.aclose()

    async def aclose(self) -> None:
        # Nothing is held back (see `degraded`), and the KV is the caller's to close.
        await trio.lowlevel.checkpoint()


def _apply(rows: Rows[K, V], key: K, put: bool, value: bytes, type_: type[V]) -> None:
    if put:
        rows.put[key] = msgspec.json.decode(value, type=type_)
    else:
        rows.deleted.append(key)

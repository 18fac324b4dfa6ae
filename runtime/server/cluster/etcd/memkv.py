"""`MemoryKV`: an etcd in process memory, with `EtcdClient`'s interface (the `KV` protocol).

Why: the cluster's server logic (its store, its watch, leadership by lease) must be testable
under `autojump_clock`, where nothing may touch a socket. So this is not a mock that replays
canned answers but a small model of etcd's MVCC semantics, proven equal to the real thing by
tests that run the same assertions against both (tests/test_memkv.py):

- one revision counter for the whole key space, starting at 1 like a fresh etcd; a write
  (put, delete that removed something, transaction that changed something) takes the next
  revision, and every key it touches gets that revision as `mod_revision`. A write that
  changes nothing (deleting a missing key, a read-only transaction) leaves the revision alone;
- keys keep `create_revision` and `version` across puts and lose them with a delete;
- transactions compare MOD, CREATE, VERSION or VALUE (a VALUE compare on a missing key is
  false, as in etcd), run one branch's operations in order (a get sees earlier puts of the same
  branch), reject duplicate keys in a branch and branches longer than `max_txn_ops`, and
  requests larger than `max_request_bytes` (with etcd's own messages);
- leases expire on the Trio clock. Expiry is lazy: every call first revokes the leases whose
  deadline passed, and a watcher with nothing to deliver sleeps until the earliest deadline at
  most. So under `autojump_clock` the clock jumps straight to an expiry and the DELETE events
  appear then, deterministically, with no background task to own. A lease's keys are deleted
  in one revision, as etcd's revoke does;
- `watch` yields (revision, events) with one entry per revision, exactly as `EtcdClient.watch`
  groups etcd's events. History is kept until `compact(revision)` (a test's stand-in for
  etcd's compaction); a watch starting before it raises `EtcdCompacted`, as the client does.

Several clients share one key space: `MemoryKV()` creates a fresh one, `kv.client()` hands out
another handle on the same space with its own `requests` counter (what a second server
process would hold). Each call is one Trio checkpoint and then runs atomically, as one round
trip to etcd would: concurrent tasks interleave only between calls.
"""

from __future__ import annotations

import base64
import itertools
import math
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

import trio

from yurt.runtime.server.cluster.etcd.client import (
    Compare,
    EtcdClient,
    EtcdCompacted,
    EtcdError,
    KeyValue,
    Op,
    TxnResult,
    WatchEvent,
    prefix_end,
)
from yurt.runtime.server.cluster.etcd.process import MAX_REQUEST_BYTES, MAX_TXN_OPS

if TYPE_CHECKING:
    from yurt.runtime.server.cluster.etcd.kv import KV

#: What etcd answers, word for word, so callers matching on messages see the same text.
TOO_MANY_OPS: Final = "etcdserver: too many operations in txn request"
TOO_LARGE: Final = "etcdserver: request is too large"
DUPLICATE_KEY: Final = "etcdserver: duplicate key given in txn request"
LEASE_NOT_FOUND: Final = "etcdserver: requested lease not found"
#: Bytes of framing counted per operation when sizing a request (protobuf tags and lengths).
OP_OVERHEAD: Final = 16


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


@dataclass
class _Lease:
    ttl: int
    deadline: float
    keys: set[bytes] = field(default_factory=set)


@dataclass
class _Space:
    """The shared key space: what one etcd cluster holds."""

    revision: int = 1
    data: dict[bytes, KeyValue] = field(default_factory=dict)
    #: history[i] is revision i + 2 (every revision past 1 is one write); compacted entries
    #: are emptied, not removed, so the indexing holds.
    history: list[list[WatchEvent]] = field(default_factory=list)
    #: Revisions before this one are forgotten (etcd's compact revision; 0: none).
    compacted: int = 0
    leases: dict[int, _Lease] = field(default_factory=dict)
    lease_ids: Iterator[int] = field(default_factory=lambda: itertools.count(0x7A5E0001))
    #: Set (and replaced) at every new revision; watchers wait on it.
    changed: trio.Event | None = None

    def commit(self, events: list[WatchEvent]) -> None:
        self.history.append(events)
        self.notify()

    def notify(self) -> None:
        if self.changed is not None:
            self.changed.set()
            self.changed = None

    def wakeup(self) -> trio.Event:
        if self.changed is None:
            self.changed = trio.Event()
        return self.changed

    def earliest_expiry(self) -> float:
        return min((lease.deadline for lease in self.leases.values()), default=math.inf)

    def expire(self, now: float) -> None:
        """Revoke every lease whose deadline passed, oldest deadline first."""
        due = sorted((lease.deadline, lease_id) for lease_id, lease in self.leases.items()
                     if lease.deadline <= now)
        for _, lease_id in due:
            self.revoke(lease_id)

    def revoke(self, lease_id: int) -> None:
        lease = self.leases.pop(lease_id, None)
        if lease is None:
            return
        events = []
        revision = self.revision + 1
        for key in sorted(lease.keys):
            if key in self.data:
                del self.data[key]
                events.append(_deleted(key, revision))
        if events:
            self.revision = revision
            self.commit(events)

    def range(self, key: bytes, end: bytes | None) -> list[KeyValue]:
        if end is None:
            kv = self.data.get(key)
            return [kv] if kv is not None else []
        return [self.data[k] for k in sorted(self.data) if _within(k, key, end)]


def _within(k: bytes, start: bytes, end: bytes) -> bool:
    # etcd's range_end "\x00" means "every key from start on".
    return k >= start and (end == b"\x00" or k < end)


def _deleted(key: bytes, revision: int) -> WatchEvent:
    # What etcd's watch reports for a delete: the key and the deleting revision, nothing else.
    return WatchEvent("DELETE", KeyValue(key=key, value=b"", create_revision=0,
                                         mod_revision=revision, version=0, lease=0))


def _range_of(body: dict[str, Any]) -> tuple[bytes, bytes | None]:
    end = body.get("range_end")
    return _unb64(body["key"]), (_unb64(end) if end is not None else None)


class _Writer:
    """The changes of one write request, all at one revision."""

    def __init__(self, space: _Space) -> None:
        self.space = space
        self.revision = space.revision + 1
        self.events: list[WatchEvent] = []

    def put(self, key: bytes, value: bytes, lease: int) -> None:
        space = self.space
        if lease and lease not in space.leases:
            raise EtcdError(LEASE_NOT_FOUND)
        old = space.data.get(key)
        if old is not None and old.lease and old.lease in space.leases:
            space.leases[old.lease].keys.discard(key)
        if lease:
            space.leases[lease].keys.add(key)
        kv = KeyValue(key=key, value=value,
                      create_revision=old.create_revision if old else self.revision,
                      mod_revision=self.revision, version=old.version + 1 if old else 1,
                      lease=lease)
        space.data[key] = kv
        self.events.append(WatchEvent("PUT", kv))

    def delete(self, key: bytes, end: bytes | None) -> None:
        space = self.space
        for kv in space.range(key, end):
            del space.data[kv.key]
            if kv.lease and kv.lease in space.leases:
                space.leases[kv.lease].keys.discard(kv.key)
            self.events.append(_deleted(kv.key, self.revision))

    def commit(self) -> int:
        if self.events:
            self.space.revision = self.revision
            self.space.commit(self.events)
        return self.space.revision


def _compare(space: _Space, body: dict[str, Any]) -> bool:
    kv = space.data.get(_unb64(body["key"]))
    target = body.get("target", "VERSION")
    ours: bytes | int
    theirs: bytes | int
    if target == "VALUE":
        if kv is None:
            return False  # etcd: a value compare on a missing key always fails
        ours, theirs = kv.value, _unb64(body.get("value", ""))
    elif target == "MOD":
        ours, theirs = kv.mod_revision if kv else 0, int(body.get("mod_revision", 0))
    elif target == "CREATE":
        ours, theirs = kv.create_revision if kv else 0, int(body.get("create_revision", 0))
    elif target == "VERSION":
        ours, theirs = kv.version if kv else 0, int(body.get("version", 0))
    else:
        raise EtcdError(f"unsupported compare target {target!r}")
    result = body.get("result", "EQUAL")
    if result == "EQUAL":
        return ours == theirs
    if result == "NOT_EQUAL":
        return ours != theirs
    if result == "GREATER":
        return ours > theirs  # type: ignore[operator]
    if result == "LESS":
        return ours < theirs  # type: ignore[operator]
    raise EtcdError(f"unsupported compare result {result!r}")


def _check_branch(ops: list[Op], max_ops: int) -> None:
    if len(ops) > max_ops:
        raise EtcdError(TOO_MANY_OPS)
    puts: set[bytes] = set()
    deletes: list[tuple[bytes, bytes | None]] = []
    for op in ops:
        if "request_put" in op.body:
            key = _unb64(op.body["request_put"]["key"])
            if key in puts:
                raise EtcdError(DUPLICATE_KEY)
            puts.add(key)
        elif "request_delete_range" in op.body:
            deletes.append(_range_of(op.body["request_delete_range"]))
    for start, end in deletes:
        if any(k == start if end is None else _within(k, start, end) for k in puts):
            raise EtcdError(DUPLICATE_KEY)


def _request_size(compare: list[Compare], ops: list[Op]) -> int:
    """Roughly what the request weighs on etcd's wire (its protobuf form): keys and values
    plus a little framing per item. Base64 in the JSON body is not what etcd limits."""
    size = 0
    items: list[Compare | Op] = [*compare, *ops]
    for item in items:
        body = item.body
        for inner in (body, *(v for v in body.values() if isinstance(v, dict))):
            for name in ("key", "value", "range_end"):
                if isinstance(inner.get(name), str):
                    size += len(inner[name]) * 3 // 4
        size += OP_OVERHEAD
    return size


@final
class MemoryKV:
    """A client handle on an in-memory etcd key space (see the module's header)."""

    def __init__(self, *, max_txn_ops: int = MAX_TXN_OPS,
                 max_request_bytes: int = MAX_REQUEST_BYTES,
                 _space: _Space | None = None) -> None:
        self._space = _space if _space is not None else _Space()
        self.max_txn_ops = max_txn_ops
        self.max_request_bytes = max_request_bytes
        #: Calls made through this handle (a watch counts once).
        self.requests = 0

    def client(self) -> MemoryKV:
        """Another handle on the same key space, with its own request count."""
        return MemoryKV(max_txn_ops=self.max_txn_ops, max_request_bytes=self.max_request_bytes,
                        _space=self._space)

    @property
    def revision(self) -> int:
        """The key space's current revision (for tests)."""
        return self._space.revision

    async def _enter(self) -> _Space:
        """One request's start: a checkpoint (a round trip would be one), then the leases
        that lapsed meanwhile are revoked, so the caller sees the state at this instant."""
        await trio.lowlevel.checkpoint()
        self.requests += 1
        self._space.expire(trio.current_time())
        return self._space

    async def get(self, key: bytes) -> tuple[KeyValue | None, int]:
        space = await self._enter()
        return space.data.get(key), space.revision

    async def get_prefix(self, prefix: bytes) -> tuple[list[KeyValue], int]:
        space = await self._enter()
        return space.range(prefix, prefix_end(prefix)), space.revision

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        space = await self._enter()
        writer = _Writer(space)
        writer.put(key, value, lease)
        return writer.commit()

    async def delete(self, key: bytes) -> int:
        space = await self._enter()
        writer = _Writer(space)
        writer.delete(key, None)
        return writer.commit()

    async def txn(self, compare: list[Compare], success: list[Op],
                  failure: list[Op] | None = None) -> TxnResult:
        failure = failure or []
        space = await self._enter()
        if len(compare) > self.max_txn_ops:
            raise EtcdError(TOO_MANY_OPS)
        _check_branch(success, self.max_txn_ops)
        _check_branch(failure, self.max_txn_ops)
        if _request_size(compare, [*success, *failure]) > self.max_request_bytes:
            raise EtcdError(TOO_LARGE)
        succeeded = all(_compare(space, c.body) for c in compare)
        writer = _Writer(space)
        responses: list[list[KeyValue]] = []
        # Validate every lease first: etcd applies a transaction whole or not at all.
        for op in success if succeeded else failure:
            lease = int(op.body.get("request_put", {}).get("lease", 0))
            if lease and lease not in space.leases:
                raise EtcdError(LEASE_NOT_FOUND)
        for op in success if succeeded else failure:
            if "request_put" in op.body:
                body = op.body["request_put"]
                writer.put(_unb64(body["key"]), _unb64(body.get("value", "")),
                           int(body.get("lease", 0)))
                responses.append([])
            elif "request_delete_range" in op.body:
                writer.delete(*_range_of(op.body["request_delete_range"]))
                responses.append([])
            elif "request_range" in op.body:
                responses.append(space.range(*_range_of(op.body["request_range"])))
            else:
                raise EtcdError(f"unsupported transaction operation {sorted(op.body)}")
        return TxnResult(succeeded=succeeded, revision=writer.commit(), responses=responses)

    async def lease_grant(self, ttl: int) -> int:
        space = await self._enter()
        lease_id = next(space.lease_ids)
        space.leases[lease_id] = _Lease(ttl=ttl, deadline=trio.current_time() + ttl)
        # A watcher sleeping until the earliest expiry must learn of this one.
        space.notify()
        return lease_id

    async def lease_keepalive(self, lease: int) -> int:
        space = await self._enter()
        held = space.leases.get(lease)
        if held is None:
            return 0
        held.deadline = trio.current_time() + held.ttl
        return held.ttl

    async def lease_revoke(self, lease: int) -> None:
        space = await self._enter()
        space.revoke(lease)

    async def watch(self, prefix: bytes, start_revision: int
                    ) -> AsyncGenerator[tuple[int, list[WatchEvent]], None]:
        """Every change under `prefix` from `start_revision` on (0: from now), as
        (revision, events), until cancelled."""
        space = await self._enter()
        end = prefix_end(prefix)
        next_revision = start_revision if start_revision > 0 else space.revision + 1
        if next_revision < space.compacted:
            raise EtcdCompacted(space.compacted)
        while True:
            wakeup = space.wakeup()
            space.expire(trio.current_time())
            while next_revision <= space.revision:
                revision = next_revision
                next_revision += 1
                if revision < 2:
                    continue
                events = [e for e in space.history[revision - 2]
                          if _within(e.kv.key, prefix, end)]
                if events:
                    yield revision, events
            # Sleep until the next write or the next lease expiry, whichever comes first.
            with trio.move_on_at(space.earliest_expiry()):
                await wakeup.wait()

    async def compact(self, revision: int) -> None:
        """Forget the history before `revision`, as etcd's compaction does."""
        space = await self._enter()
        if revision > space.revision:
            raise EtcdError("etcdserver: mvcc: required revision is a future revision")
        for r in range(max(space.compacted, 2), revision):
            space.history[r - 2] = []
        space.compacted = max(space.compacted, revision)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


if TYPE_CHECKING:
    # Both implementations satisfy the protocol (checked by mypy, not at run time).
    def _conforms(memory: MemoryKV, etcd: EtcdClient) -> list[KV]:
        return [memory, etcd]

"""Leader election among `yurt server`s: one key bound to a lease, and the leader-only work
run in a cancel scope that ends the moment leadership does.

Theory of operation. Every server runs `LeaderElection.run` forever. A campaign reads the
election key: held by someone, the server follows (it knows the leader's address, for
forwarding) and waits for the key to change; absent, it grants a lease of `ttl` seconds and
creates the key bound to it, only if still absent (etcd: a transaction comparing the key's
create revision with 0). The creator leads. While leading it keeps the lease alive every
`ttl / 3` and watches the key; it stops leading when

- a keepalive answers that the lease is gone,
- the key changes or vanishes (an operator deleted it, a compaction of history we missed),
- or, the case that makes this safe, its own deadline passes: the lease is known to live until
  `the moment the last successful keepalive was sent + the TTL it returned`, and the leader
  steps down `safety` seconds before that, whether or not it has heard anything. A leader cut
  off from the backend (a partition, a hung request, a stopped VM that resumes) thus stops
  believing it leads before the backend can hand the key to another server, as long as the
  two clocks advance at rates within `safety / ttl` of each other.

Stepping down cancels every `leading()` scope at once, releases the lease (a bounded,
shielded revoke: a graceful handover is then immediate rather than a TTL later) and
campaigns again. Backend errors are retried every `retry` seconds; they never end `run`.

Invariants:
- `is_leader` is True only between a successful create and the step-down, and never after
  the deadline above; `leading()` scopes are entered only while it is True and all cancelled,
  synchronously, when it turns False;
- a term (`term`) counts how often this server became leader, so leader-only work can tell a
  new term from the one it started in.

Not solved here, on purpose: two leaders' *writes* can still interleave around a handover if
the old leader's write was already in flight when it stepped down. Writes that must not
cross a handover belong in a transaction that compares the election key (the etcd store's
business, with the key and lease this module exposes).

Rejected: etcd's v3election gRPC API (not on the JSON gateway every yurt server already
speaks, and its queue of candidates buys nothing for a handful of servers); sessions that
re-use one lease across terms (a new lease per term keeps "my lease" and "my term" the same
thing, so a stale keepalive can never extend a new term).

Backends: `LeaseBackend` is the small protocol; `EtcdLeaseBackend` (etcd's v3 JSON gateway
through runtime/server/cluster/etcd/client.py, or the in-memory etcd) implements it, and the tests'
fake
(tests/leader_support.py: leases on the trio clock, candidates that freeze or fail) too.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol, final

import trio

from yurt.runtime.server.cluster.etcd.client import Compare, EtcdCompacted, EtcdError, Op
from yurt.runtime.server.cluster.etcd.kv import KV

log = logging.getLogger("yurt.cluster.leader")


class LeaseBackendError(Exception):
    """The backend could not answer (transport, gateway, a lease that vanished under a
    write). The election retries; it never ends `LeaderElection.run`."""


class LeaseBackend(Protocol):
    """Leases and lease-bound keys: the part of etcd an election needs."""

    async def grant(self, ttl: int) -> int:
        """A new lease of `ttl` seconds; its ID."""
        ...

    async def keepalive(self, lease: int) -> int:
        """Renew `lease`; the TTL it now has, 0 when it is gone (expired or revoked)."""
        ...

    async def revoke(self, lease: int) -> None:
        """End `lease` now, deleting the keys bound to it."""
        ...

    async def create_if_absent(self, key: str, value: str, lease: int) -> bool:
        """Create `key` = `value` bound to `lease` if the key does not exist; whether it did."""
        ...

    async def get(self, key: str) -> str | None:
        ...

    async def wait_changed(self, key: str, value: str | None) -> str | None:
        """Return the key's value once it is no longer `value` (at once if it already is
        not); None when the key is absent."""
        ...


# --------------------------------------------------------------------------- the election


@final
class LeaderElection:
    """One server's candidacy in the election called `name`.

    Args:
        backend: where the election key and leases live.
        name: the election; servers in the same election share it (key `election/<name>`).
        address: this server's address, the key's value while it leads (followers forward
            to it).
        ttl: the lease TTL, whole seconds (etcd's unit). A dead leader is replaced within
            about `ttl + ttl / 3`.
        safety: how long before the lease's known expiry the leader steps down; default
            `ttl / 10`.
        retry: the pause after a backend error; default `ttl / 6`.
    """

    def __init__(self, backend: LeaseBackend, name: str, address: str, ttl: int = 5, *,
                 safety: float | None = None, retry: float | None = None) -> None:
        if ttl < 1:
            raise ValueError(f"election TTL must be at least 1 s, not {ttl}")
        self.backend = backend
        self.name = name
        self.key = f"election/{name}"
        self.address = address
        self.ttl = ttl
        self.period = ttl / 3
        self.safety = ttl / 10 if safety is None else safety
        self.retry = ttl / 6 if retry is None else retry
        self.term = 0
        self._is_leader = False
        self._leader: str | None = None
        self._changed = trio.Event()
        self._scopes: set[trio.CancelScope] = set()
        self._started: trio.TaskStatus[None] | None = None

    # ------------------------------------------------------------------ what callers read

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    def leader_address(self) -> str | None:
        """The current leader's address (ours while we lead), None while unknown."""
        return self._leader

    async def wait_changed(self) -> None:
        """Return at the next change of `is_leader` or `leader_address()`."""
        await self._changed.wait()

    async def wait_leader(self) -> None:
        """Return once this server leads (at once if it does)."""
        while not self._is_leader:
            await self._changed.wait()

    @asynccontextmanager
    async def leading(self) -> AsyncIterator[trio.CancelScope]:
        """Wait until this server leads, then run the body in a cancel scope that is
        cancelled the moment leadership is lost (`scope.cancelled_caught` tells afterwards).

        Use it in a loop, one term per pass::

            while True:
                async with election.leading():
                    await process_evaluations()
        """
        await self.wait_leader()
        # No checkpoint between the check above and registering the scope: a step-down
        # cannot fall in between and miss it.
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                yield scope
            finally:
                self._scopes.discard(scope)

    # ------------------------------------------------------------------ the campaign

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Campaign forever. Started (`nursery.start`) once the first round knows who leads
        (or has failed once: the backend may stay down for long, the caller need not wait
        for it). Cancelling it steps down and revokes the lease."""
        self._started = task_status
        try:
            while True:
                try:
                    await self._campaign()
                except LeaseBackendError as exc:
                    log.warning("election %s: %s; trying again in %.1f s", self.name, exc,
                                self.retry)
                    self._set(False, None)
                    self._mark_started()
                    await trio.sleep(self.retry)
        finally:
            self._step_down("stopped")
            self._set(False, None)

    def _mark_started(self) -> None:
        if self._started is not None:
            started, self._started = self._started, None
            started.started()

    async def _campaign(self) -> None:
        """One round: follow until the key changes, or win and lead until the term ends."""
        current = await self.backend.get(self.key)
        if current is not None:
            self._set(False, current)
            self._mark_started()
            await self.backend.wait_changed(self.key, current)
            return
        sent = trio.current_time()
        lease = await self.backend.grant(self.ttl)
        try:
            if await self.backend.create_if_absent(self.key, self.address, lease):
                await self._lead(lease, sent + self.ttl - self.safety)
        finally:
            await self._release(lease)

    async def _lead(self, lease: int, valid_until: float) -> None:
        self.term += 1
        log.info("election %s: %s leads (term %d)", self.name, self.address, self.term)
        self._set(True, self.address)
        self._mark_started()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_alive, lease, valid_until, nursery.cancel_scope)
                nursery.start_soon(self._watch_key, nursery.cancel_scope)
        finally:
            self._step_down("term ended")

    async def _keep_alive(self, lease: int, valid_until: float,
                          term: trio.CancelScope) -> None:
        reason = "the lease could not be renewed before it expires"
        with trio.move_on_at(valid_until) as guard:
            next_at = trio.current_time() + self.period
            while True:
                await trio.sleep_until(next_at)
                sent = trio.current_time()
                try:
                    remaining = await self.backend.keepalive(lease)
                except LeaseBackendError as exc:
                    # Transient until the guard says otherwise: the lease is still ours
                    # until `valid_until`.
                    log.warning("election %s: keepalive failed: %s", self.name, exc)
                    next_at = trio.current_time() + self.retry
                    continue
                if remaining <= 0:
                    reason = "the lease is gone"
                    break
                # Measured from when the request left: the backend started its count later.
                guard.deadline = sent + remaining - self.safety
                next_at = sent + self.period
        self._step_down(reason)
        term.cancel()

    async def _watch_key(self, term: trio.CancelScope) -> None:
        while True:
            try:
                value = await self.backend.wait_changed(self.key, self.address)
            except LeaseBackendError as exc:
                log.warning("election %s: watching the key failed: %s", self.name, exc)
                await trio.sleep(self.retry)
                continue
            self._step_down("the election key was deleted" if value is None
                            else f"the election key now names {value}")
            term.cancel()
            return

    def _step_down(self, reason: str) -> None:
        if not self._is_leader:
            return
        log.warning("election %s: %s steps down: %s", self.name, self.address, reason)
        self._set(False, None)
        for scope in self._scopes:
            scope.cancel()

    async def _release(self, lease: int) -> None:
        # Bounded and shielded: a stopping server still hands over at once when it can, and
        # never hangs on a backend that does not answer.
        with trio.CancelScope(shield=True, deadline=trio.current_time() + self.period):
            try:
                await self.backend.revoke(lease)
            except LeaseBackendError as exc:
                log.info("election %s: revoking lease %x: %s", self.name, lease, exc)

    def _set(self, leader: bool, address: str | None) -> None:
        if leader == self._is_leader and address == self._leader:
            return
        self._is_leader = leader
        self._leader = address
        self._changed.set()
        self._changed = trio.Event()


# --------------------------------------------------------------------------- etcd


@final
class EtcdLeaseBackend:
    """`LeaseBackend` over etcd's v3 JSON gateway (`EtcdClient`), keys under `prefix`.

    `create_if_absent` is one transaction: if the key's create revision is 0 (absent), put
    it bound to the lease. `wait_changed` reads the key and watches it from the next
    revision, so no change between the read and the watch is missed. `EtcdError` becomes
    `LeaseBackendError` here, the one boundary.
    """

    def __init__(self, client: KV, prefix: bytes = b"/yurt/") -> None:
        self.client = client
        self.prefix = prefix

    def _key(self, key: str) -> bytes:
        return self.prefix + key.encode()

    async def _guard(self, call: Any) -> Any:
        try:
            return await call
        except EtcdError as exc:
            raise LeaseBackendError(str(exc)) from exc

    async def grant(self, ttl: int) -> int:
        lease: int = await self._guard(self.client.lease_grant(ttl))
        return lease

    async def keepalive(self, lease: int) -> int:
        remaining: int = await self._guard(self.client.lease_keepalive(lease))
        return remaining

    async def revoke(self, lease: int) -> None:
        await self._guard(self.client.lease_revoke(lease))

    async def create_if_absent(self, key: str, value: str, lease: int) -> bool:
        full = self._key(key)
        result = await self._guard(self.client.txn(
            [Compare.create_revision(full, "=", 0)],
            [Op.put(full, value.encode(), lease=lease)]))
        return bool(result.succeeded)

    async def get(self, key: str) -> str | None:
        kv, _ = await self._guard(self.client.get(self._key(key)))
        return None if kv is None else bytes(kv.value).decode()

    async def wait_changed(self, key: str, value: str | None) -> str | None:
        full = self._key(key)
        while True:
            kv, revision = await self._guard(self.client.get(full))
            current = None if kv is None else bytes(kv.value).decode()
            if current != value:
                return current
            try:
                return await self._next_change(full, value, revision)
            except EtcdCompacted:
                continue  # history gone under a quiet watch: read the key again

    async def _next_change(self, full: bytes, value: str | None, revision: int
                           ) -> str | None:
        stream = self.client.watch(full, revision + 1)
        try:
            while True:
                try:
                    _, events = await anext(stream)
                except (EtcdCompacted, StopAsyncIteration):
                    raise
                except EtcdError as exc:
                    raise LeaseBackendError(str(exc)) from exc
                for event in events:
                    # A prefix watch: `election/a` also sees `election/ab`.
                    if event.kv.key != full:
                        continue
                    current = None if event.type == "DELETE" else event.kv.value.decode()
                    if current != value:
                        return current
        except StopAsyncIteration as exc:
            raise LeaseBackendError("the etcd watch ended") from exc
        finally:
            with trio.CancelScope(shield=True, deadline=trio.current_time() + 1.0):
                await stream.aclose()

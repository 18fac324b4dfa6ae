"""`RemoteServer`: the `Server` contract over the node RPC, for `yurt agent --servers`.

The client side (runtime/agent/agent.py, runtime/client/client.py, runtime/client/allocsync.py)
sees a server only as
`changed`, `allocs_for_node()` and `update_allocs(batch)`. Here those are answered by servers
in other processes, reached over HTTP (the node RPC of `yurt server`), the way Nomad's client
reaches its servers (Nomad's `client/client.go`):

- **Identity.** The node ID (`<data-dir>/node-id`, fingerprint.py) and a SecretID generated
  once and kept beside it, mode 0600 (`load_or_create_secret`): a restarted agent is the same
  node, and only it can speak for the node (every call but register carries the secret).
- **Register, then heartbeat** (`_run_heartbeat`): a heartbeat every TTL, the TTL taken
  from each reply, as Nomad's client (`registerAndHeartbeat`: `time.After(heartbeatTTL)`);
  the server waits TTL + its grace before calling the node down, so the grace covers a slow
  answer or a failover; a 404 (the server forgot the node) registers again, and so does a 403 or
  404 on an allocation pull (the server forgot the node, or its secret). A node change (a
  driver's health, a device: `node_updated`) registers the node again, as Nomad's client
  does, at once rather than on the next beat.
- **Pull allocations** (`_run_watch`, Nomad's `watchAllocations`): a blocking
  `GetClientAllocs` answers the AllocModifyIndex of each allocation the node should hold;
  only those whose index moved past the copy held here are fetched in full (`GetAllocs`).
  An allocation missing from the answer is gone from the cache (the client stops it). An
  answer at or below the index already seen changes nothing (a blocking query's timeout, or
  a lagging server: Nomad #18267).
- **Updates** (`update_allocs`): one POST per batch the `AllocSyncer` hands over. When no
  server answers it raises; the syncer puts the batch back (unless a newer update arrived)
  and sends again 5-10 s later, so no update is lost while the servers are away.

Failover: calls go to the current server; a transport error, a timeout, a 5xx or an answer
that is not the node RPC's (another service on that address) moves to the next URL at once,
and only a full round of failures waits, with a capped, jittered exponential backoff
(`backoff_delay`, pure; heartbeat retries never wait past half the TTL, and past the TTL
only 1-2 s, or the servers would mark the node down while it retries). An answer with a
4xx is the server's verdict, not its absence: it is not retried elsewhere. Replies name the
servers of the cluster; the list becomes those, with the `--servers` seeds kept behind them
as a last resort (a server that left and came back under a load balancer's name is still
reachable).

While no server answers, the cache stays as it was: allocations keep running, nothing is
stopped because a server is unreachable (Nomad's client does the same; the servers decide
when a silent node's allocations are lost). Everything pending is sent once one answers.

Timeouts are trio deadlines around each request (the HTTP client itself has none): a blocking
query gets its `wait` plus a margin, every other call `request_timeout`.

Transport: each call is one `NodeTransport` request (method, URL, body → status, body). The
agent's is `HttpTransport`, over an HTTP client of its own; the node simulator shares one
among all its nodes (one connection pool, not a thousand), and the whole-cluster simulation
passes one that calls the servers in process over a simulated network.

Rejected: one long-lived streaming connection per node (the servers' RPC is plain request /
answer, and a blocking query per pull is what Nomad does); stopping allocations after a
timeout without servers (that is the servers' decision, `max_client_disconnect`).
"""

from __future__ import annotations

import logging
import math
import os
import random
import secrets
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, final

import httpx2
import msgspec
import trio

from yurt.runtime.structs import NODE_STATUS_READY, Allocation, Job, Node
from yurt.runtime.structs.noderpc import HEARTBEAT_GRACE, NODE_SECRET_HEADER

log = logging.getLogger("yurt.cluster.remote")
_T = TypeVar("_T")

TOKEN_HEADER: Final = "X-Nomad-Token"
SECRET_FILE: Final = "node-secret"
#: How long a blocking allocation query waits on the server (Nomad's default query wait).
DEFAULT_WAIT: Final = 300.0
#: The first pull's wait. Nomad answers a query for index 0 at once; a server that blocks it
#: anyway (a node with no allocations has index 0 too) must not hold back the first pull,
#: before which nothing restored is reconciled and no update is sent.
FIRST_PULL_WAIT: Final = 1.0
#: What a blocking query may take beyond its `wait` before it counts as a failure.
WAIT_MARGIN: Final = 10.0
DEFAULT_REQUEST_TIMEOUT: Final = 10.0
#: Until a server says otherwise (Nomad's minimum TTL).
DEFAULT_TTL: Final = 10.0
BACKOFF_BASE: Final = 0.5
BACKOFF_CAP: Final = 30.0


#: A job version: namespace, ID, version and the index it was written at.
JobKey = tuple[str, str, int, int]


def job_key(job: Job) -> JobKey:
    return job.namespace, job.id, job.version, job.job_modify_index


class NodeRPCError(Exception):
    """A server answered, with an error status (its verdict, not its absence)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class NoServerError(Exception):
    """No server answered (every URL tried once)."""


class _Reply(msgspec.Struct):
    """What register and heartbeat answer."""

    heartbeat_ttl: int = msgspec.field(default=0, name="HeartbeatTTL")  # nanoseconds
    index: int = msgspec.field(default=0, name="Index")
    servers: list[str] = msgspec.field(default_factory=list, name="Servers")


class _ClientAllocs(msgspec.Struct):
    allocs: dict[str, int] = msgspec.field(default_factory=dict, name="Allocs")
    index: int = msgspec.field(default=0, name="Index")


class _Indexed(msgspec.Struct):
    index: int = msgspec.field(default=0, name="Index")


class _Allocs(msgspec.Struct):
    allocs: list[Allocation] = msgspec.field(default_factory=list, name="Allocs")
    index: int = msgspec.field(default=0, name="Index")


class NodeTransport(Protocol):
    """One request to a server: its status and body.

    Raises:
        OSError, httpx2.HTTPError: the server could not be reached (the caller fails over).
    """

    async def __call__(self, method: str, url: str, *, content: bytes | None,
                       params: dict[str, str] | None, headers: dict[str, str]
                       ) -> tuple[int, bytes]: ...


@final
class HttpTransport:
    """`NodeTransport` over HTTP; closes the client only if it made it."""

    def __init__(self, http: httpx2.AsyncClient | None = None) -> None:
        self._owned = http is None
        self.http = http or httpx2.AsyncClient(timeout=None, follow_redirects=False,
                                               trust_env=False)

    async def __call__(self, method: str, url: str, *, content: bytes | None,
                       params: dict[str, str] | None, headers: dict[str, str]
                       ) -> tuple[int, bytes]:
        response = await self.http.request(method, url, content=content, params=params,
                                           headers=headers)
        return response.status_code, response.content

    async def aclose(self) -> None:
        if self._owned:
            await self.http.aclose()


def backoff_delay(failed_rounds: int, draw: float, *, base: float = BACKOFF_BASE,
                  cap: float = BACKOFF_CAP) -> float:
    """Seconds to wait after `failed_rounds` (≥ 1) rounds in which no server answered.

    Doubles from `base` up to `cap`, then keeps between half and all of it (`draw` in [0, 1)):
    a cluster's clients that lost their servers at once do not come back at once.
    """
    full = min(cap, base * math.pow(2, min(failed_rounds - 1, 30)))
    return full * (0.5 + draw / 2)


def load_or_create_secret(data_dir: Path) -> str:
    """The node's SecretID: read from `<data_dir>/node-secret`, else made and kept there.

    The file is created 0600 before the secret is written (never world-readable, not even
    for an instant) and renamed into place, so a crash leaves the old state or the new, not
    an empty secret. A file found readable by others is narrowed to 0600.
    """
    path = data_dir / SECRET_FILE
    try:
        secret = path.read_text().strip()
    except FileNotFoundError:
        secret = ""
    if secret:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return secret
    data_dir.mkdir(parents=True, exist_ok=True)
    secret = str(uuid.UUID(bytes=secrets.token_bytes(16), version=4))
    tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}")
    tmp.unlink(missing_ok=True)  # left by a crash: never written through (O_EXCL below)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (secret + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return secret


@final
class RemoteServer:
    """The servers of a cluster, as the client side's `Server`. Start `run` in a nursery.

    Args:
        node: the node this agent is (registered as it is when registering).
        servers: the `--servers` URLs, tried in order.
        secret: the node's SecretID (`load_or_create_secret`).
        token: sent as `X-Nomad-Token` with a registration (a cluster with a token admits
            only nodes that know it); every later call is authenticated by the secret.
        wait: how long a blocking allocation query waits on the server.
        request_timeout: the deadline of every other call.
        backoff_base, backoff_cap: the backoff after a round of failures (`backoff_delay`).
        transport: how requests reach a server (default: `HttpTransport` of its own,
            closed with this object; a transport given is the caller's to close).
    """

    def __init__(self, node: Node, servers: Sequence[str], secret: str, *, token: str = "",
                 wait: float = DEFAULT_WAIT, request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
                 backoff_base: float = BACKOFF_BASE, backoff_cap: float = BACKOFF_CAP,
                 rng: random.Random | None = None,
                 transport: NodeTransport | None = None,
                 jobs: dict[JobKey, Job] | None = None) -> None:
        if not servers:
            raise ValueError("no server URL given")
        #: One decoded Job per job version, shared by every allocation that runs it (each
        #: fetched allocation arrives with its own copy of its job, several KiB each). Given
        #: by the caller, shared with other nodes and never pruned (the node simulator's);
        #: else this node's own, pruned to the versions its allocations run.
        self._jobs: dict[JobKey, Job] = jobs if jobs is not None else {}
        self._own_jobs = jobs is None
        self.node = node
        self._seeds = [_url(s) for s in servers]
        self.servers: list[str] = list(dict.fromkeys(self._seeds))
        self._current = 0
        self._secret = secret
        self._token = token
        self._wait = wait
        self._request_timeout = request_timeout
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._rng = rng or random.Random()
        self._own_http: HttpTransport | None = None
        if transport is None:
            transport = self._own_http = HttpTransport()
        self._transport = transport
        #: Server copies of this node's allocations, as last pulled.
        self.allocs: dict[str, Allocation] = {}
        #: The allocation index of the last pull (the API's X-Nomad-Index in client mode).
        self.visible_index = 0
        self._changed = trio.Event()
        #: Set once allocations were pulled from a server: before, the cache means nothing
        #: (an empty one would stop every restored allocation).
        self.pulled = trio.Event()
        #: Set once registered, and again after every re-registration.
        self.registered = trio.Event()
        self._node_dirty = trio.Event()
        self._reregister = trio.Event()
        self.heartbeat_ttl = DEFAULT_TTL
        #: When (trio clock) a server last answered a registration or heartbeat.
        self._answered_at: float | None = None
        # Counts for tests and operators.
        self.registrations = 0
        self.heartbeats = 0
        self.alloc_fetches = 0  # GetAllocs calls
        self.update_posts = 0  # successful UpdateAlloc calls
        self.heartbeat_failures = 0  # registrations and heartbeats no server took
        self.pull_failures = 0  # allocation pulls that failed
        #: Answered heartbeats that came later than the last TTL told plus the servers'
        #: default grace: by then the servers had (most likely) marked the node down.
        self.heartbeat_misses = 0

    @property
    def last_contact(self) -> float | None:
        """When (trio clock) a server last answered a registration or heartbeat; None
        before any did (client/heartbeatstop.py reads it)."""
        return self._answered_at

    # ------------------------------------------------------------------ Server contract

    @property
    def changed(self) -> trio.Event:
        return self._changed

    def allocs_for_node(self) -> list[Allocation]:
        return [a for a in self.allocs.values() if a.node_id == self.node.id]

    async def update_allocs(self, batch: list[Allocation]) -> None:
        """Send the client's views in one call (Node.UpdateAlloc).

        Raises:
            NoServerError: no server answered; the caller keeps the batch for later.
            NodeRPCError: a server refused the batch.
        """
        await self._call_any("POST", f"/v1/internal/node/{self.node.id}/allocs/update",
                             _Indexed, {"Allocs": batch}, per_server=self._request_timeout)
        self.update_posts += 1

    def node_updated(self) -> None:
        """The node changed: register it again (with its new drivers, devices) soon."""
        self._node_dirty.set()

    @property
    def current_server(self) -> str:
        return self.servers[self._current]

    # ------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Register, heartbeat and pull allocations until cancelled. `task_status.started`
        at once: a client without servers still runs what it restored."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._run_heartbeat)
                nursery.start_soon(self._run_watch)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await self.aclose()

    async def aclose(self) -> None:
        if self._own_http is not None:
            await self._own_http.aclose()

    async def _run_heartbeat(self) -> None:
        failures = 0
        must_register = True  # until a registration succeeds: a failed one is tried again
        while True:
            if self._node_dirty.is_set() or self._reregister.is_set():
                self._node_dirty = trio.Event()
                self._reregister = trio.Event()
                must_register = True
            registering = must_register
            what = "registration" if registering else "heartbeat"
            if registering:
                path = "/v1/internal/node/register"
                body: dict[str, Any] = {"Node": self.node, "SecretID": self._secret}
            else:
                path = f"/v1/internal/node/{self.node.id}/heartbeat"
                body = {"Status": NODE_STATUS_READY}
            try:
                reply = await self._call_any("PUT", path, _Reply, body,
                                             per_server=self._request_timeout,
                                             authenticated=not registering)
            except NodeRPCError as e:
                failures += 1
                self.heartbeat_failures += 1
                must_register = True
                if e.status == 404 and not registering:
                    log.info("the server does not know this node; registering again")
                    continue
                log.error("the server refused the %s: %s", what, e)
                await trio.sleep(self._retry_delay(failures))
                continue
            except NoServerError as e:
                failures += 1
                self.heartbeat_failures += 1
                delay = self._retry_delay(failures)
                log.warning("no server answered the %s; trying again in %.1fs: %s", what,
                            delay, e)
                await trio.sleep(delay)
                continue
            failures = 0
            now = trio.current_time()
            if (self._answered_at is not None
                    and now - self._answered_at > self.heartbeat_ttl + HEARTBEAT_GRACE):
                self.heartbeat_misses += 1
            self._answered_at = now
            self._learn_servers(reply.servers)
            if reply.heartbeat_ttl > 0:
                self.heartbeat_ttl = reply.heartbeat_ttl / 1e9
            if registering:
                self.registrations += 1
                must_register = False
                if self.registrations == 1:
                    log.info("node registered with %s", self.current_server)
                self.registered.set()
            else:
                self.heartbeats += 1
            # Every TTL, as Nomad's client: the server's timer is TTL + grace, and the grace
            # leaves room for a retry or a failover. (Half the TTL doubled the heartbeats a
            # server takes, which at 1,000 nodes was more than it kept up with.)
            with trio.move_on_after(self.heartbeat_ttl):
                await _either(self._node_dirty, self._reregister)

    def _retry_delay(self, failures: int) -> float:
        """The backoff, but never past half the TTL, and once the TTL since the last
        answered heartbeat has run out, 1-2 s (Nomad's `getHeartbeatRetryIntv`): only the
        server's grace is left before it calls the node down."""
        if (self._answered_at is not None
                and trio.current_time() >= self._answered_at + self.heartbeat_ttl):
            return min(self._delay(failures), 1.0 + self._rng.random())
        return min(self._delay(failures), self.heartbeat_ttl / 2)

    async def _run_watch(self) -> None:
        await self.registered.wait()
        index = 0
        failures = 0
        while True:
            try:
                changed = await self._pull(index)
            except (NoServerError, NodeRPCError, _StaleAllocs) as e:
                failures += 1
                self.pull_failures += 1
                if isinstance(e, NodeRPCError) and e.status in (403, 404):
                    self._reregister.set()  # the server forgot the node, or its secret
                delay = self._delay(failures)
                log.warning("pulling allocations failed; trying again in %.1fs: %s", delay, e)
                await trio.sleep(delay)
                continue
            failures = 0
            if changed is not None:
                index = changed

    async def _pull(self, index: int) -> int | None:
        """One blocking GetClientAllocs and the GetAllocs it calls for; the new index, or
        None when nothing moved past `index`."""
        wait = self._wait if self.pulled.is_set() else min(self._wait, FIRST_PULL_WAIT)
        listing = await self._call_any(
            "GET", f"/v1/internal/node/{self.node.id}/allocs", _ClientAllocs,
            params={"index": str(index), "wait": f"{int(wait * 1000)}ms"},
            per_server=wait + WAIT_MARGIN)
        if listing.index <= index and self.pulled.is_set():
            return None  # the wait ran out, or a lagging server (Nomad #18267)
        pull = [alloc_id for alloc_id, modify in listing.allocs.items()
                if (held := self.allocs.get(alloc_id)) is None
                or modify > held.alloc_modify_index]
        fetched: dict[str, Allocation] = {}
        if pull:
            self.alloc_fetches += 1
            answer = await self._call_any("POST", "/v1/internal/allocs", _Allocs,
                                          {"AllocIDs": pull, "NodeID": self.node.id},
                                          per_server=self._request_timeout)
            fetched = {a.id: a for a in answer.allocs}
            missing = [i for i in pull if i not in fetched]
            if missing:  # another server, behind the first: try again, nothing half-applied
                raise _StaleAllocs(f"{len(missing)} allocation(s) not returned yet")
            for alloc in answer.allocs:
                if alloc.job is not None:
                    alloc.job = self._jobs.setdefault(job_key(alloc.job), alloc.job)
        self.allocs = {alloc_id: fetched.get(alloc_id) or self.allocs[alloc_id]
                       for alloc_id in listing.allocs}
        if self._own_jobs and fetched:
            running = {job_key(a.job) for a in self.allocs.values() if a.job is not None}
            for key in [k for k in self._jobs if k not in running]:
                del self._jobs[key]
        self.visible_index = max(self.visible_index, listing.index)
        self.pulled.set()
        self._changed.set()
        self._changed = trio.Event()
        return listing.index

    # ------------------------------------------------------------------ transport

    def _delay(self, failures: int) -> float:
        return backoff_delay(failures, self._rng.random(), base=self._backoff_base,
                             cap=self._backoff_cap)

    def _learn_servers(self, servers: list[str]) -> None:
        """The servers a reply names first, the seeds behind them; the one that answered
        stays current."""
        if not servers:
            return
        current = self.current_server
        learned = list(dict.fromkeys([*(_url(s) for s in servers), *self._seeds]))
        self.servers = learned
        self._current = learned.index(current) if current in learned else 0

    async def _call_any(self, method: str, path: str, answer: type[_T], body: Any = None, *,
                        params: dict[str, str] | None = None, per_server: float,
                        authenticated: bool = True) -> _T:
        """The answer, decoded as `answer`, of the first server that answers, from the
        current one on. `per_server` bounds each server's try (so it is no cancel scope
        around the whole call: a dead server must leave time for the next).

        Raises:
            NoServerError: every server failed (transport error, timeout, 5xx, or an answer
                that is not the node RPC's: a proxy's error page, another service).
            NodeRPCError: a server answered with a 4xx.
        """
        content = msgspec.json.encode(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if content is not None else {}
        if authenticated:
            headers[NODE_SECRET_HEADER] = self._secret
        elif self._token:
            headers[TOKEN_HEADER] = self._token
        errors: list[str] = []
        for _ in range(len(self.servers)):
            url = self.current_server
            try:
                with trio.fail_after(per_server):
                    status, reply = await self._transport(
                        method, url + path, content=content, params=params, headers=headers)
            except (httpx2.HTTPError, trio.TooSlowError, OSError) as e:
                errors.append(f"{url}: {_describe(e)}")
                self._rotate()
                continue
            if status >= 500:
                errors.append(f"{url}: {status} {_message(reply)}")
                self._rotate()
                continue
            if status >= 400:
                raise NodeRPCError(status, _message(reply))
            try:
                return msgspec.json.decode(reply, type=answer)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                errors.append(f"{url}: not a node RPC answer: {e}")
                self._rotate()
        raise NoServerError("; ".join(errors))

    def rotation(self) -> list[str]:
        """Every server, the current one first: the order a failover tries them in."""
        return self.servers[self._current:] + self.servers[:self._current]

    def server_failed(self, url: str) -> None:
        """`url` did not answer: if it is the current server, the next one is."""
        if self.current_server == url:
            self._rotate()

    def _rotate(self) -> None:
        self._current = (self._current + 1) % len(self.servers)


class _StaleAllocs(Exception):
    """GetAllocs answered without every allocation asked for (a server behind another)."""


async def _either(*events: trio.Event) -> None:
    """Return once any of `events` is set."""
    async with trio.open_nursery() as nursery:
        def waiter(event: trio.Event) -> Callable[[], Any]:
            async def wait() -> None:
                await event.wait()
                nursery.cancel_scope.cancel()
            return wait
        for event in events:
            nursery.start_soon(waiter(event))


def _url(server: str) -> str:
    server = server.strip().rstrip("/")
    return server if "://" in server else f"http://{server}"


def _describe(error: BaseException) -> str:
    if isinstance(error, trio.TooSlowError):
        return "no answer in time"
    return str(error) or type(error).__name__


def _message(body: bytes) -> str:
    """A server's error text: `{"error": ...}`, or the body itself, cut short."""
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body[:200].decode(errors="replace").strip()
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
        return str(decoded["error"])
    return body[:200].decode(errors="replace").strip()

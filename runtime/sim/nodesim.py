"""`NodeSimulator`: N `SimNode`s in one Trio process, as load for real `yurt server`s.

What `yurt nodesim` runs (after hashicorp-forge/nomad-nodesim): every node is the real client
code (sim/node.py: registration with its own SecretID, heartbeats, blocking allocation pulls,
the real alloc sync) with the simulated allocation runner, against servers in other processes.
What it measures is what those servers received and what the nodes saw:

- **calls by kind** (register, heartbeat, allocation pull, allocation fetch, update post),
  counted by `CountingTransport` around the one shared `HttpTransport` as sent, and those
  refused, unreachable or unanswered (given up at the node's 10 s deadline: an overloaded
  server), with the request and answer body bytes (headers are not counted: they are the
  HTTP client's, not the protocol's);
- **allocation updates carried** (the syncers' `sent`: acknowledged) against the sends;
- **placement → running**: from the allocation's `CreateTime` (the leader's clock, when the
  scheduler placed it) to the simulated runner reporting it running on this machine's clock
  (same host in every measurement here, so one clock);
- **heartbeat failures**, pull failures and re-registrations (`RemoteServer`'s counters);
- **allocations by final client status**, as the nodes last saw them;
- **memory per node**: the RSS gained from before the nodes existed to once all registered,
  divided by N (the HTTP client's connections, one held per node by its blocking pull, count).
  Measured at 1,000 nodes: 62-68 KiB per node (the target is 100 KiB).

Identity is derived, not drawn: node i of seed S has the ID, SecretID and RNG of
`blake2b("yurt-nodesim", S, i)`, so a rerun with the same seed is the same nodes (the servers
take their registrations as the same nodes coming back) and their allocations run the same way.

Registration is paced two ways, never all in one millisecond: node i starts no earlier than
`i / register_rate` seconds after the first (200/s by default), and at most `register_window`
(16) registrations are in flight: a node starts only once an earlier one is registered. The
window makes the pace the servers' own: a registration is several etcd commits, and a rate
above what the servers take (measured: ~20-70/s on the 2-core build machine, heartbeats
competing) queues them until the 10 s request deadline, every node retries, and nothing gets
through. Each node's heartbeats then follow from its own registration time (and the TTL each reply
tells, which the servers stagger), so the beats stay spread over the TTL as well.

All nodes share ONE `httpx2.AsyncClient`: one connection pool, unbounded (a node's blocking
pull holds a connection for up to its wait; a heartbeat or update post beside it needs another;
a bounded pool below 3N would queue heartbeats behind pulls and miss TTLs). The soft
RLIMIT_NOFILE is raised to the hard limit for those sockets.

`NaiveSyncer` is the comparison for scripts/bench_nodesim: every client update sent as it
happens, one call per update, in order, nothing coalesced, nothing dropped (the traffic
Nomad's batched, prioritised sync exists to avoid: #9451). Selected with `--sync naive`.

Rejected: one HTTP client per node (a thousand pools, ~1000 × its fixed cost in memory);
a process per node (what the simulator exists to avoid); measuring the servers from here (the
benchmark reads their /proc and etcd's /metrics itself: a load generator that also observes
would measure itself).
"""

from __future__ import annotations

import gc
import hashlib
import logging
import math
import random
import resource
import sys
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, final

import httpx2
import trio

from yurt.runtime import __version__
from yurt.runtime.client.allocsync import RETRY_AFTER, RETRY_STAGGER, stripped
from yurt.runtime.client.fingerprint import computed_class
from yurt.runtime.client.remote import HttpTransport, JobKey, NodeTransport
from yurt.runtime.client.taskrunner.events import datetime_of
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.lib.nofile import raise_nofile_limit
from yurt.runtime.sim.node import SimNode, Syncer, SyncerFactory
from yurt.runtime.sim.nodesim_profile import NodeProfile, Profile
from yurt.runtime.structs import (
    AcknowledgedState,
    Allocation,
    DriverInfo,
    Job,
    Node,
    NodeCpuResources,
    NodeDeviceInstance,
    NodeDeviceResource,
    NodeDiskResources,
    NodeMemoryResources,
    NodeResources,
)

log = logging.getLogger("yurt.nodesim")

DRIVERS: Final = ("raw_exec", "mock_driver")
DEFAULT_REGISTER_RATE: Final = 200.0  # nodes per second
#: Registrations in flight at most: past it, a node starts only once another registered.
DEFAULT_REGISTER_WINDOW: Final = 16
DISK_MB: Final = 100 * 1024
#: The kinds of call a node makes, in the order they are reported.
CALL_KINDS: Final = ("register", "heartbeat", "alloc_pull", "alloc_fetch", "update")


# ---------------------------------------------------------------------- the made-up nodes

def _derived(seed: int, index: int, what: str) -> bytes:
    return hashlib.blake2b(f"yurt-nodesim/{seed}/{index}/{what}".encode(),
                           digest_size=16).digest()


def node_identity(seed: int, index: int) -> tuple[str, str]:
    """(ID, SecretID) of node `index` of `seed`: the same on every run."""
    return (str(uuid.UUID(bytes=_derived(seed, index, "id"), version=4)),
            str(uuid.UUID(bytes=_derived(seed, index, "secret"), version=4)))


def make_node(seed: int, index: int, profile: NodeProfile, *, name_prefix: str = "sim-"
              ) -> Node:
    """Node `index` as it registers: the profile's resources, both drivers healthy, and the
    attributes placement reads (`${attr.*}` targets of common constraints, the address ports
    are bound on)."""
    node_id, _ = node_identity(seed, index)
    name = f"{name_prefix}{index}"
    cores = max(1, profile.cpu // 1000)
    attributes = {
        "kernel.name": "linux", "kernel.arch": "x86_64", "cpu.arch": "amd64",
        "os.name": "nodesim", "os.version": "1", "cpu.numcores": str(cores),
        "cpu.frequency": str(profile.cpu // cores), "cpu.totalcompute": str(profile.cpu),
        "cpu.usablecompute": str(profile.cpu),
        "memory.totalbytes": str(profile.memory_mb * 1024 * 1024),
        "unique.hostname": name, "unique.network.ip-address": "127.0.0.1",
        "unique.storage.volume": "/nodesim",
        "unique.storage.bytestotal": str(DISK_MB * 1024 * 1024),
        "unique.storage.bytesfree": str(DISK_MB * 1024 * 1024),
        "nomad.version": __version__, "nomad.revision": "",
        **{f"driver.{d}": "true" for d in DRIVERS},
    }
    now = datetime_of(time.time_ns())
    devices = [NodeDeviceResource(
        vendor=d.vendor, type=d.type, name=d.name, attributes=dict(d.attributes),
        instances=[NodeDeviceInstance(id=f"{name}-{d.vendor}-{d.type}-{d.name}-{k}")
                   for k in range(d.count)]) for d in profile.devices]
    node = Node(
        id=node_id, name=name, datacenter=profile.datacenter, node_class=profile.node_class,
        status="ready", attributes=attributes, meta=dict(profile.meta),
        drivers={d: DriverInfo(detected=True, healthy=True, health_description="Healthy",
                               update_time=now) for d in DRIVERS},
        status_updated_at=int(time.time()),
        node_resources=NodeResources(
            cpu=NodeCpuResources(cpu_shares=profile.cpu, total_cpu_cores=cores),
            memory=NodeMemoryResources(memory_mb=profile.memory_mb),
            disk=NodeDiskResources(disk_mb=DISK_MB), devices=devices))
    node.computed_class = computed_class(node)
    return node


# ---------------------------------------------------------------------- counting the calls

def call_kind(method: str, url: str) -> str:
    """Which node RPC a request is (`CALL_KINDS`), from its method and path."""
    path = url.split("://", 1)[-1].partition("/")[2].partition("?")[0]
    if path.endswith("/register"):
        return "register"
    if path.endswith("/heartbeat"):
        return "heartbeat"
    if path.endswith("/allocs/update"):
        return "update"
    if method == "GET" and path.endswith("/allocs"):
        return "alloc_pull"
    if path.endswith("internal/allocs"):
        return "alloc_fetch"
    return "other"


@final
class CountingTransport:
    """A `NodeTransport` that counts what goes through it, per kind: calls sent, answered
    (any status), refused (answered with an error status), unreachable (no answer: the
    transport raised), unanswered (given up at the caller's deadline: an overloaded server;
    it may still have done the work), cut short by a stop (cancelled before its deadline:
    the calls in flight when the simulator stopped), and body bytes each way."""

    def __init__(self, inner: NodeTransport) -> None:
        self._inner = inner
        kinds = (*CALL_KINDS, "other")
        self.calls: dict[str, int] = dict.fromkeys(kinds, 0)
        self.answered: dict[str, int] = dict.fromkeys(kinds, 0)
        self.refused: dict[str, int] = dict.fromkeys(kinds, 0)
        self.unreachable: dict[str, int] = dict.fromkeys(kinds, 0)
        self.timed_out: dict[str, int] = dict.fromkeys(kinds, 0)
        self.stopped: dict[str, int] = dict.fromkeys(kinds, 0)
        self.bytes_sent = 0
        self.bytes_received = 0

    async def __call__(self, method: str, url: str, *, content: bytes | None,
                       params: dict[str, str] | None, headers: dict[str, str]
                       ) -> tuple[int, bytes]:
        kind = call_kind(method, url)
        self.calls[kind] += 1
        self.bytes_sent += len(content or b"")
        deadline = trio.current_effective_deadline()
        try:
            status, body = await self._inner(method, url, content=content, params=params,
                                              headers=headers)
        except trio.Cancelled:
            # The caller's deadline, or a stop of the whole simulator before it (a call
            # made once the stop began starts with no time left: -inf).
            if deadline != -math.inf and trio.current_time() >= deadline:
                self.timed_out[kind] += 1
            else:
                self.stopped[kind] += 1
            raise
        except Exception:
            self.unreachable[kind] += 1
            raise
        self.answered[kind] += 1
        if status >= 400:
            self.refused[kind] += 1
        self.bytes_received += len(body)
        return status, body

    def unanswered(self) -> dict[str, int]:
        return dict(self.timed_out)


# ---------------------------------------------------------------------- the naive sync

@final
class NaiveSyncer:
    """Every update sent as it comes, one call each, in order (see the module header).

    A failed send keeps the update at the head and tries again after Nomad's retry wait, so
    the comparison loses nothing either."""

    def __init__(self, send: Callable[[list[Allocation]], Awaitable[None]], *,
                 rng: random.Random) -> None:
        self._send = send
        self._rng = rng
        self._queue: deque[Allocation] = deque()
        self._added = trio.Event()
        self.servers_contacted = trio.Event()
        #: Always empty: the naive client remembers nothing of what the servers have.
        self.acked: dict[str, AcknowledgedState] = {}
        self.calls = 0
        self.sent = 0

    def add(self, alloc: Allocation) -> None:
        self._queue.append(stripped(alloc))
        self._added.set()

    def forget(self, alloc_id: str) -> None:
        self.acked.pop(alloc_id, None)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        task_status.started()
        await self.servers_contacted.wait()
        while True:
            while not self._queue:
                self._added = trio.Event()
                await self._added.wait()
            update = self._queue[0]
            self.calls += 1
            try:
                await self._send([update])
            except Exception as e:  # the server's fault: later, as the real syncer does
                log.warning("sending an allocation update failed: %s", e)
                await trio.sleep(RETRY_AFTER + self._rng.random() * RETRY_STAGGER)
                continue
            self._queue.popleft()
            self.sent += 1


def naive_syncer(rng: random.Random) -> SyncerFactory:
    def make(send: Callable[[list[Allocation]], Awaitable[None]]) -> Syncer:
        return NaiveSyncer(send, rng=rng)
    return make


# ---------------------------------------------------------------------- the simulator

@dataclass(frozen=True)
class NodeSimOptions:
    servers: Sequence[str]
    nodes: int
    seed: int = 0
    profile: Profile = field(default_factory=Profile)
    name_prefix: str = "sim-"
    sync: str = "yurt"  # or "naive"
    register_rate: float = DEFAULT_REGISTER_RATE
    register_window: int = DEFAULT_REGISTER_WINDOW
    progress: bool = True  # registration and status lines on stderr
    #: The cluster's token, sent with each registration (as `yurt agent` sends its own).
    token: str = ""


def peak_rss_bytes() -> int:
    """This process's peak resident set size (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_bytes() -> int:
    """This process's resident set size."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * resource.getpagesize()


@final
class NodeSimulator:
    """N simulated nodes against real servers. Start `run` in a nursery (started once every
    node registered); cancel it to stop them all; `summary()` any time."""

    def __init__(self, options: NodeSimOptions) -> None:
        if options.nodes < 1:
            raise ValueError("nodes must be at least 1")
        if options.sync not in ("yurt", "naive"):
            raise ValueError(f"sync must be yurt or naive, not {options.sync!r}")
        if not options.register_rate > 0 or options.register_window < 1:
            raise ValueError("register_rate must be above 0, register_window at least 1")
        self.options = options
        self.nodes: list[SimNode] = []
        self.transport: CountingTransport | None = None
        self.started = 0.0  # perf_counter of the first registration
        self.registration_seconds: float | None = None
        self.rss_before = 0
        self.rss_registered = 0
        #: The client status each allocation was last reported in.
        self.final_status: dict[str, str] = {}
        #: Placement → running, seconds, one per allocation seen running.
        self.latencies: list[float] = []
        self._began = time.perf_counter()
        self.nofile = 0
        self._first_registrations = 0
        self._all_registered = trio.Event()
        #: Every node's decoded jobs, one per job version (see `RemoteServer`): kept for
        #: the run, a few KiB per version the simulated nodes ran.
        self._jobs: dict[JobKey, Job] = {}

    def _updated(self, alloc: Allocation) -> None:
        previous = self.final_status.get(alloc.id)
        self.final_status[alloc.id] = alloc.client_status
        if alloc.client_status == "running" and previous != "running" and alloc.create_time:
            self.latencies.append(max(0.0, (time.time_ns() - alloc.create_time) / 1e9))

    def registered(self) -> int:
        return sum(1 for n in self.nodes if n.remote.registrations)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Start the nodes (paced), report `started` once all registered, run until
        cancelled."""
        options = self.options
        self.nofile = raise_nofile_limit()
        http = httpx2.AsyncClient(
            timeout=None, follow_redirects=False, trust_env=False,
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=None))
        try:
            self.transport = CountingTransport(HttpTransport(http))
            broker = EventBroker()
            gc.collect()
            self.rss_before = rss_bytes()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._start_nodes, nursery, broker)
                if await self._wait_registered():
                    self.registration_seconds = time.perf_counter() - self.started
                    gc.collect()
                    self.rss_registered = rss_bytes()
                    self._progress(f"registered {len(self.nodes)}/{options.nodes} nodes in "
                                   f"{self.registration_seconds:.1f}s; "
                                   f"{self.memory_per_node() / 1024:.1f} KiB per node")
                task_status.started()
                if options.progress:
                    nursery.start_soon(self._report_progress)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await http.aclose()

    async def _start_nodes(self, nursery: trio.Nursery, broker: EventBroker) -> None:
        options = self.options
        self.started = start = time.perf_counter()
        window = trio.Semaphore(options.register_window)
        for i in range(options.nodes):
            await trio.sleep(max(0.0, start + i / options.register_rate - time.perf_counter()))
            rng = random.Random(int.from_bytes(_derived(options.seed, i, "rng"), "big"))
            _, secret = node_identity(options.seed, i)
            assert self.transport is not None
            sim = SimNode(make_node(options.seed, i, options.profile.node,
                                    name_prefix=options.name_prefix),
                          list(options.servers), secret=secret, transport=self.transport,
                          profile=options.profile.alloc, rng=rng, broker=broker,
                          syncer=naive_syncer(rng) if options.sync == "naive" else None,
                          on_update=self._updated, token=options.token, jobs=self._jobs)
            self.nodes.append(sim)
            await window.acquire()
            nursery.start_soon(sim.run)
            nursery.start_soon(self._release_when_registered, sim, window)

    async def _release_when_registered(self, sim: SimNode, window: trio.Semaphore) -> None:
        await sim.remote.registered.wait()
        window.release()
        self._first_registrations += 1
        if self._first_registrations == self.options.nodes:
            self._all_registered.set()

    async def _wait_registered(self) -> bool:
        """Until every node registered (True), or the time that should take passed thrice,
        plus a minute (False: what runs, runs; the summary says how many registered)."""
        options = self.options
        give_up = time.perf_counter() + 60 + 3 * options.nodes / options.register_rate
        while time.perf_counter() < give_up:
            with trio.move_on_after(2):
                await self._all_registered.wait()
                return True
            self._progress(f"registered {self._first_registrations}/{options.nodes}")
        self._progress(f"only {self._first_registrations}/{options.nodes} nodes registered "
                       "in time; running on with them (the others keep trying)")
        return False

    async def _report_progress(self) -> None:
        while True:
            await trio.sleep(10)
            counts = self.status_counts()
            t = self.transport
            failed = {k: n for k, n in (("unreachable", sum(t.unreachable.values())),
                                        ("refused", sum(t.refused.values())),
                                        ("unanswered", sum(t.timed_out.values())))
                      if n} if t is not None else {}
            self._progress(f"{time.perf_counter() - self._began:.0f}s: "
                           f"{sum(self.transport_calls().values())} calls"
                           + "".join(f", {n} {k}" for k, n in failed.items())
                           + "; allocations "
                           + (", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                              or "none yet"))

    def _progress(self, line: str) -> None:
        if self.options.progress:
            print(f"nodesim: {line}", file=sys.stderr, flush=True)

    def memory_per_node(self) -> float:
        if not self.rss_registered:
            return 0.0
        return max(0, self.rss_registered - self.rss_before) / self.options.nodes

    def transport_calls(self) -> dict[str, int]:
        return dict(self.transport.calls) if self.transport is not None else {}

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for status in self.final_status.values():
            counts[status] = counts.get(status, 0) + 1
        return counts

    def summary(self) -> dict[str, Any]:
        """Everything measured so far, JSON-ready (see the module header)."""
        t = self.transport
        calls = {k: v for k, v in self.transport_calls().items() if k != "other" or v}
        syncers = [n.syncer for n in self.nodes]
        updates = sum(getattr(s, "sent", 0) for s in syncers)
        remotes = [n.remote for n in self.nodes]
        return {
            "nodes": self.options.nodes, "seed": self.options.seed, "sync": self.options.sync,
            "registered": self.registered(),
            "registration_seconds": (round(self.registration_seconds, 3)
                                     if self.registration_seconds is not None else None),
            "elapsed_seconds": round(time.perf_counter() - self._began, 3),
            "memory": {"rss_before_kib": self.rss_before // 1024,
                       "rss_registered_kib": self.rss_registered // 1024,
                       "per_node_kib": round(self.memory_per_node() / 1024, 1),
                       # With the allocations too: the process's peak, over the nodes.
                       "peak_rss_kib": peak_rss_bytes() // 1024,
                       "peak_per_node_kib": round(max(0, peak_rss_bytes() - self.rss_before)
                                                  / self.options.nodes / 1024, 1)},
            "servers_received": {
                "calls": calls, "total_calls": sum(calls.values()),
                "refused": nonzero(t.refused) if t else {},
                "unreachable": nonzero(t.unreachable) if t else {},
                "unanswered": nonzero(t.unanswered()) if t else {},
                "in_flight_at_stop": nonzero(t.stopped) if t else {},
                "update_calls": sum(getattr(s, "calls", 0) for s in syncers),
                "updates_carried": updates,
                "bytes_sent": t.bytes_sent if t else 0,
                "bytes_received": t.bytes_received if t else 0},
            "nodes_saw": {
                "placement_to_running_ms": latency_summary(self.latencies),
                "heartbeat_failures": sum(r.heartbeat_failures for r in remotes),
                "heartbeat_misses": sum(r.heartbeat_misses for r in remotes),
                "pull_failures": sum(r.pull_failures for r in remotes),
                "reregistrations": sum(max(0, r.registrations - 1) for r in remotes),
                "allocations": dict(sorted(self.status_counts().items()))},
        }


def nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def latency_summary(seconds: list[float]) -> dict[str, float | int]:
    """Count, p50, p95 and max in milliseconds (nearest-rank percentiles)."""
    if not seconds:
        return {"count": 0, "p50": 0.0, "p95": 0.0, "max": 0.0}
    ordered = sorted(seconds)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p * len(ordered)) - 1)]

    return {"count": len(ordered), "p50": round(rank(0.50) * 1000, 1),
            "p95": round(rank(0.95) * 1000, 1), "max": round(ordered[-1] * 1000, 1)}


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as the table `yurt nodesim` prints."""
    received = summary["servers_received"]
    saw = summary["nodes_saw"]
    latency = saw["placement_to_running_ms"]
    rows: list[tuple[str, str]] = [
        ("nodes registered", f"{summary['registered']}/{summary['nodes']}" + (
            f" in {summary['registration_seconds']}s"
            if summary["registration_seconds"] is not None else " (stopped before all)")),
        ("memory per node", f"{summary['memory']['per_node_kib']} KiB registered, "
                            f"{summary['memory']['peak_per_node_kib']} KiB at the peak "
                            f"(RSS {summary['memory']['rss_registered_kib']} KiB, peak "
                            f"{summary['memory']['peak_rss_kib']} KiB)"),
        ("run time", f"{summary['elapsed_seconds']}s (sync: {summary['sync']}, "
                     f"seed {summary['seed']})"),
    ]
    rows += [(f"calls: {kind}", str(n)) for kind, n in received["calls"].items()]
    rows += [
        ("calls: total", str(received["total_calls"])),
        *((f"calls {what}", ", ".join(f"{k} {v}" for k, v in received[what].items()) or "0")
          for what in ("refused", "unreachable", "unanswered", "in_flight_at_stop")),
        ("updates carried", f"{received['updates_carried']} by {received['update_calls']} "
                            "update sends (retries included)"),
        ("bytes sent / received", f"{received['bytes_sent']:,} / "
                                  f"{received['bytes_received']:,}"),
        ("placement → running", f"p50 {latency['p50']} ms, p95 {latency['p95']} ms, "
                                f"max {latency['max']} ms ({latency['count']} allocations)"),
        ("heartbeat failures", str(saw["heartbeat_failures"])),
        ("heartbeat misses", f"{saw['heartbeat_misses']} (answered past TTL + grace: "
                             "the servers had marked the node down)"),
        ("pull failures", str(saw["pull_failures"])),
        ("re-registrations", str(saw["reregistrations"])),
        ("allocations", ", ".join(f"{k} {v}" for k, v in saw["allocations"].items()) or "none"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)

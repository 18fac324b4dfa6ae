"""The server store's contract, run against every implementation: `ServerStore` (SQLite in a
temporary directory), `ClusterStore` over `MemoryKV` and `ClusterStore` over a real etcd.

The first half is what `LocalServer` relies on from any store (round trips of every kind,
deletes, the index, a reopened store seeing what was written). The second half is what only
a cluster has: the counter's compare-and-swap between two stores on one key space (a stale
writer is refused and writes nothing; two writers racing lose no update), nodes and their
secrets, the watch decoding every change in order, and the size limits."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from yurt.runtime.server.cluster.etcd.client import EtcdClient
from yurt.runtime.server.cluster.etcd.kv import KV
from yurt.runtime.server.cluster.etcd.memkv import MemoryKV
from yurt.runtime.server.state.etcd import (
    ClusterChange,
    ClusterStore,
    StoreConflict,
    StoreTooLarge,
)
from yurt.runtime.server.state.sqlite import ServerStateStore, ServerStore
from yurt.runtime.structs import Allocation, Evaluation, Job, Node
from yurt.runtime.structs.submission import JobSubmission
from yurt.runtime.structs.update import Deployment

Store = ServerStateStore  # the interface both stores share (what LocalServer uses)


Opener = Callable[[], Awaitable[Any]]


@pytest.fixture(params=["sqlite", "memory", "etcd"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path
                     ) -> AsyncIterator[Opener]:
    """Opens a store on the same state each time it is called (a reopened store)."""
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "sqlite":
            async def opener() -> Store:
                store = await ServerStore.open(tmp_path / "server")
                stack.push_async_callback(store.aclose)
                return store
        else:
            kv_of = await _kv_factory(request, stack)
            prefix: bytes = request.getfixturevalue("etcd_prefix")

            async def opener() -> Store:
                return ClusterStore(kv_of(), prefix)
        yield opener


async def _kv_factory(request: pytest.FixtureRequest, stack: contextlib.AsyncExitStack
                      ) -> Callable[[], KV]:
    """Handles on one key space: a MemoryKV's clients, or new etcd clients."""
    if request.param == "memory":
        space = MemoryKV()
        return space.client
    urls: list[str] = request.getfixturevalue("etcd_urls")

    def client() -> KV:
        kv = EtcdClient(urls)
        stack.push_async_callback(kv.aclose)
        return kv
    return client


@pytest.fixture(params=["memory", "etcd"])
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[], ClusterStore]]:
    """Cluster stores on one key space, one KV handle each (as separate servers hold)."""
    prefix: bytes = request.getfixturevalue("etcd_prefix")
    async with contextlib.AsyncExitStack() as stack:
        kv_of = await _kv_factory(request, stack)
        yield lambda: ClusterStore(kv_of(), prefix)


def _job(job_id: str = "web", version: int = 0, **meta: str) -> Job:
    return Job(id=job_id, name=job_id, version=version, meta=dict(meta))


def _ids(items: list[Any]) -> list[str]:
    return sorted(item.id for item in items)


# --------------------------------------------------------------------------- every store


async def test_every_kind_round_trips_through_a_reopened_store(open_store: Opener) -> None:
    store: Store = await open_store()
    await store.load()
    jobs = [_job("web", 2, a="1"), _job("batch/dispatch-1-abc", 0)]
    allocs = [Allocation(id=f"alloc-{i}", job_id="web", name=f"web.web[{i}]")
              for i in range(3)]
    evals = [Evaluation(id="eval-1", job_id="web", status="complete")]
    versions = [_job("web", v) for v in range(3)] + [_job("batch/dispatch-1-abc", 0)]
    deployments = [Deployment(id="dep-1", job_id="web", job_version=2)]
    await store.save(5, jobs, allocs, evals, versions=versions, deployments=deployments)
    await store.save_services({"svc-1": ("alloc-0", b'{"ID":"svc-1"}'),
                               "svc-2": ("alloc-1", b'{"ID":"svc-2"}')})
    assert store.degraded is None
    await store.aclose()

    again: Store = await open_store()
    got_jobs, got_allocs, index = await again.load()
    assert index == 5
    assert sorted(got_jobs, key=lambda j: j.id) == sorted(jobs, key=lambda j: j.id)
    assert sorted(got_allocs, key=lambda a: a.id) == allocs
    assert await again.load_evals() == evals
    assert sorted(await again.load_versions(), key=lambda j: (j.id, j.version)) == sorted(
        versions, key=lambda j: (j.id, j.version))
    assert await again.load_deployments() == deployments
    assert sorted(await again.load_services()) == [b'{"ID":"svc-1"}', b'{"ID":"svc-2"}']


async def test_a_store_reads_its_own_writes(open_store: Opener) -> None:
    store: Store = await open_store()
    await store.load()
    await store.save(1, [_job("a")], [])
    assert await store.load_evals() == []
    await store.save(2, [], [], [Evaluation(id="e", job_id="a")])
    assert _ids(await store.load_evals()) == ["e"]
    jobs, _, index = await store.load()
    assert (_ids(jobs), index) == (["a"], 2)


async def test_delete_removes_job_allocs_deployments(open_store: Opener) -> None:
    store: Store = await open_store()
    await store.load()
    await store.save(3, [_job("web"), _job("db")],
                     [Allocation(id="a1", job_id="web"), Allocation(id="a2", job_id="web"),
                      Allocation(id="b1", job_id="db")],
                     deployments=[Deployment(id="d1", job_id="web"),
                                  Deployment(id="d2", job_id="db")])
    await store.delete("web", ["a1", "a2"], 4, ["d1"])
    await store.delete("nothing", [])  # no index given: the index stays
    again: Store = await open_store()
    jobs, allocs, index = await again.load()
    assert (_ids(jobs), _ids(allocs), index) == (["db"], ["b1"], 4)
    assert _ids(await again.load_deployments()) == ["d2"]


async def test_delete_evals_collects_allocs_and_deployments(open_store: Opener) -> None:
    store: Store = await open_store()
    await store.load()
    await store.save(1, [_job("web")], [Allocation(id="a1", job_id="web"),
                                        Allocation(id="a2", job_id="web")],
                     [Evaluation(id="e1", job_id="web"), Evaluation(id="e2", job_id="web")],
                     deployments=[Deployment(id="d1", job_id="web")])
    await store.delete_evals(["e1"], 9, ["a1"], ["d1"])
    again: Store = await open_store()
    jobs, allocs, index = await again.load()
    assert (_ids(jobs), _ids(allocs), index) == (["web"], ["a2"], 9)
    assert _ids(await again.load_evals()) == ["e2"]
    assert await again.load_deployments() == []


async def test_forget_versions(open_store: Opener) -> None:
    store: Store = await open_store()
    await store.load()
    job_id = "periodic/periodic-1700000000"  # a child job: its id has a slash
    await store.save(1, [_job(job_id, 2)], [],
                     versions=[_job(job_id, v) for v in range(3)] + [_job("web", 1)])
    await store.save(2, [], [], forget_versions=[(job_id, 1), (job_id, 7)])
    # Kept and forgotten in one change: forgetting wins, as it is applied last.
    await store.save(3, [], [], versions=[_job("web", 5)], forget_versions=[("web", 5)])
    again: Store = await open_store()
    await again.load()
    assert sorted((j.id, j.version) for j in await again.load_versions()) == [
        (job_id, 0), (job_id, 2), ("web", 1)]


async def test_a_submission_is_kept_and_dropped_with_its_version(open_store: Opener) -> None:
    store: Store = await open_store()
    await store.load()
    job_id = "periodic/periodic-1700000000"  # a slash in the id, as version keys have
    subs = [JobSubmission(source=f"job v{v}", format="hcl2", variable_flags={"x": str(v)},
                          variables="y = 1\n", namespace="default", job_id=job_id,
                          version=v, job_modify_index=10 + v) for v in range(2)]
    await store.save(1, [_job(job_id, 1)], [], versions=[_job(job_id, 0), _job(job_id, 1)],
                     submissions=subs)
    await store.save(2, [], [], forget_versions=[(job_id, 0)])
    await store.aclose()
    again: Store = await open_store()
    await again.load()
    assert await again.load_submission(job_id, 0) is None  # forgotten with its version
    assert await again.load_submission(job_id, 1) == subs[1]
    assert await again.load_submission("other", 1) is None
    # Nothing else reads them: they are not versions, nor anything a snapshot decodes.
    assert [j.version for j in await again.load_versions()] == [1]


async def test_services_written_and_deleted(open_store: Opener) -> None:
    store: Store = await open_store()
    await store.load()
    await store.save_services({"s1": ("a1", b'{"ID":"s1"}'), "s2": ("a1", b'{"ID":"s2"}')})
    await store.save_services({"s1": None, "s2": ("a1", b'{"ID":"s2","Port":8080}')})
    again: Store = await open_store()
    await again.load()
    assert await again.load_services() == [b'{"ID":"s2","Port":8080}']


async def test_index_persists_and_starts_at_zero(open_store: Opener) -> None:
    store: Store = await open_store()
    assert (await store.load())[2] == 0
    await store.save(41, [], [])
    await store.save_services({"s": ("a", b"{}")})  # leaves the index alone
    await store.save(42, [], [])
    again: Store = await open_store()
    assert (await again.load())[2] == 42


# ------------------------------------------------------------------------- cluster stores


async def test_a_stale_store_is_refused_and_writes_nothing(
        cluster: Callable[[], ClusterStore]) -> None:
    first, second = cluster(), cluster()
    await first.load()
    await second.load()
    await first.save(1, [_job("a")], [])
    before = (second.index, second.index_revision)
    with pytest.raises(StoreConflict) as conflict:
        await second.save(2, [_job("b")], [Allocation(id="x", job_id="b")])
    assert conflict.value.revision >= first.index_revision
    assert (second.index, second.index_revision) == before  # nothing changed in memory
    with pytest.raises(StoreConflict):
        await second.save_node_secret("n1", "hash")
    assert await second.node_secret("n1") is None
    # ... nor in etcd.
    snapshot = await cluster().snapshot()
    assert (_ids(snapshot.jobs), snapshot.allocs, snapshot.index) == (["a"], [], 1)
    # Caught up, it writes.
    seen = await second.snapshot()
    assert (seen.index, second.index_revision) == (1, first.index_revision)
    await second.save(2, [_job("b")], [])
    assert _ids((await first.snapshot()).jobs) == ["a", "b"]
    # Every write moves the counter, even one that gives no index: the other is stale now.
    await first.save_services({"s": ("a", b"{}")})
    with pytest.raises(StoreConflict):
        await second.delete("b", [], 3)


async def test_nodes_and_their_secrets(cluster: Callable[[], ClusterStore]) -> None:
    one, other = cluster(), cluster()
    await one.load()
    nodes = [Node(id="n1", name="one", status="ready"), Node(id="n2", name="two")]
    await one.save_nodes(7, nodes)
    await one.save_node_secret("n1", "sha256:abc")
    assert await one.node_secret("n1") == "sha256:abc"
    assert await one.node_secret("n2") is None
    # Another server that has not followed the watch yet still finds it.
    assert await other.node_secret("n1") == "sha256:abc"
    snapshot = await other.snapshot()
    assert (snapshot.nodes, snapshot.index) == (nodes, 7)
    assert await other.load_nodes() == nodes
    assert all(b"sha256:abc" not in msgspec.json.encode(n) for n in snapshot.nodes)


async def _rmw_until(store: ClusterStore, name: str, count: int, lock: trio.Lock,
                     read: Callable[[], Job], write_done: Callable[[Job], None],
                     catch_up: Callable[[StoreConflict, int], Awaitable[None]]) -> int:
    """Apply `count` read-modify-writes of job "web" (each adds one Meta key), retrying on
    conflict after `catch_up`; the number of conflicts. Read, decide and write hold `lock`,
    as LocalServer's changes hold its `_lock`."""
    conflicts = 0
    done = 0
    while done < count:
        async with lock:
            job = read()
            updated = msgspec.structs.replace(job, meta={**job.meta, f"{name}-{done}": "1"})
            based_on = store.index_revision
            try:
                await store.save(store.index + 1, [updated], [])
            except StoreConflict as e:
                conflict: StoreConflict | None = e
            else:
                conflict = None
                write_done(updated)
                done += 1
        if conflict is not None:
            conflicts += 1
            await catch_up(conflict, based_on)
    return conflicts


async def test_racing_writers_lose_no_update(cluster: Callable[[], ClusterStore]) -> None:
    """Two stores, 100 read-modify-writes each of one job, concurrently: one catches up by
    snapshot, the other by following the watch. Every one of the 200 must be in the end."""
    setup = cluster()
    await setup.load()
    await setup.save(0, [_job("web")], [])
    by_snapshot, by_watch = cluster(), cluster()
    snapshot_view = {"job": _job()}
    watch_view = {"job": _job(), "revision": 0}
    watch_moved = trio.Event()
    watch_lock = trio.Lock()

    async def refresh_by_snapshot(*_: object) -> None:
        snapshot = await by_snapshot.snapshot()
        snapshot_view["job"] = next(j for j in snapshot.jobs if j.id == "web")

    def wrote_by_watch(job: Job) -> None:
        # A successful compare-and-swap proves the view held every revision before it; the
        # watch may have applied this write, and later ones, already.
        if watch_view["revision"] < by_watch.written_revision:  # type: ignore[operator]
            watch_view["job"], watch_view["revision"] = job, by_watch.written_revision

    async def follow(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        nonlocal watch_moved
        start = await by_watch.snapshot()
        watch_view["job"] = next(j for j in start.jobs if j.id == "web")
        watch_view["revision"] = start.revision
        task_status.started()
        async with aclosing(by_watch.watch(start.revision + 1)) as stream:
            async for change in stream:
                async with watch_lock:
                    # Never apply what the view already holds (our own writes come back later).
                    if change.revision > watch_view["revision"]:  # type: ignore[operator]
                        watch_view["revision"] = change.revision
                        if "web" in change.jobs.put:
                            watch_view["job"] = change.jobs.put["web"]
                    by_watch.observe_change(change)
                watch_moved.set()
                watch_moved = trio.Event()

    async def catch_up_by_watch(_: StoreConflict, based_on: int) -> None:
        # Refused: another write moved the counter past `based_on`; the watch brings it.
        while by_watch.index_revision <= based_on:
            await watch_moved.wait()

    conflicts: dict[str, int] = {}
    with trio.fail_after(60):
        await refresh_by_snapshot()
        async with trio.open_nursery() as nursery:
            await nursery.start(follow)

            async def run_snapshot() -> None:
                conflicts["snapshot"] = await _rmw_until(
                    by_snapshot, "s", 100, trio.Lock(), lambda: snapshot_view["job"],
                    lambda job: snapshot_view.update(job=job), refresh_by_snapshot)

            async def run_watch() -> None:
                conflicts["watch"] = await _rmw_until(
                    by_watch, "w", 100, watch_lock, lambda: watch_view["job"],  # type: ignore[arg-type,return-value]
                    wrote_by_watch, catch_up_by_watch)

            async with trio.open_nursery() as writers:
                writers.start_soon(run_snapshot)
                writers.start_soon(run_watch)
            nursery.cancel_scope.cancel()
    final = await cluster().snapshot()
    job = next(j for j in final.jobs if j.id == "web")
    assert sorted(job.meta) == sorted([f"s-{i}" for i in range(100)]
                                      + [f"w-{i}" for i in range(100)])
    assert final.index == 200  # each success took exactly the next index
    assert sum(conflicts.values()) > 0, "the writers never raced: the test proves nothing"


async def test_watch_decodes_every_change_in_order(cluster: Callable[[], ClusterStore]
                                                   ) -> None:
    writer, follower = cluster(), cluster()
    start = await follower.snapshot()
    await writer.load()
    changes: list[ClusterChange] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            enough = trio.Event()

            async def follow() -> None:
                async with aclosing(follower.watch(start.revision + 1)) as stream:
                    async for change in stream:
                        changes.append(change)
                        follower.observe_change(change)
                        if len(changes) == 6:
                            enough.set()

            nursery.start_soon(follow)
            job, alloc = _job("web", 1), Allocation(id="a1", job_id="web")
            await writer.save(1, [job], [alloc], [Evaluation(id="e1", job_id="web")],
                              versions=[job], deployments=[Deployment(id="d1", job_id="web")])
            revisions = [writer.index_revision]
            await writer.save_nodes(2, [Node(id="n1")])
            revisions.append(writer.index_revision)
            await writer.save_services({"s1": ("a1", b'{"ID":"s1"}')})
            revisions.append(writer.index_revision)
            await writer.save(3, [], [], forget_versions=[("web", 1)])
            revisions.append(writer.index_revision)
            await writer.delete_evals(["e1"], 4, ["a1"], ["d1"])
            revisions.append(writer.index_revision)
            await writer.delete("web", [], 5)
            revisions.append(writer.index_revision)
            await enough.wait()
            nursery.cancel_scope.cancel()
    assert [c.revision for c in changes] == revisions
    assert [c.index for c in changes] == [1, 2, 2, 3, 4, 5]
    first = changes[0]
    assert (first.jobs.put, first.allocs.put) == ({"web": job}, {"a1": alloc})
    assert list(first.evals.put) == ["e1"]
    assert first.versions.put == {("web", 1): job}
    assert list(first.deployments.put) == ["d1"]
    assert list(changes[1].nodes.put) == ["n1"]
    assert changes[2].services.put == {"s1": b'{"ID":"s1"}'}
    assert changes[3].versions.deleted == [("web", 1)]
    assert (changes[4].evals.deleted, changes[4].allocs.deleted,
            changes[4].deployments.deleted) == (["e1"], ["a1"], ["d1"])
    assert changes[5].jobs.deleted == ["web"]
    # The follower observed the counter: it writes next without reading again.
    assert (follower.index, follower.index_revision) == (5, writer.index_revision)
    await follower.save(6, [_job("db")], [])


async def test_a_write_over_etcds_limits_names_the_flags(
        cluster: Callable[[], ClusterStore]) -> None:
    store = cluster()
    await store.load()
    store.max_txn_ops = 10
    with pytest.raises(StoreTooLarge, match="--max-txn-ops"):
        await store.save(1, [], [Allocation(id=f"a{i}", job_id="j") for i in range(10)])
    store.max_txn_ops, store.max_request_bytes = 20_000, 4096
    with pytest.raises(StoreTooLarge, match="--max-request-bytes"):
        await store.save(1, [_job("big", note="x" * 5000)], [])
    assert (await store.snapshot()).jobs == []


async def test_etcds_own_limit_error_is_translated() -> None:
    # An etcd started with lower limits than yurt's: its refusal gets the same explanation.
    store = ClusterStore(MemoryKV(max_txn_ops=5), b"/yurt/")
    await store.load()
    with pytest.raises(StoreTooLarge, match="--max-txn-ops"):
        await store.save(1, [], [Allocation(id=f"a{i}", job_id="j") for i in range(10)])


async def test_decode_observes_the_counter_and_watch_leaves_it_to_the_caller() -> None:
    space = MemoryKV()
    writer = ClusterStore(space.client(), b"/yurt/")
    reader_kv = space.client()
    reader = ClusterStore(reader_kv, b"/yurt/")
    start = await reader.snapshot()
    await writer.save(1, [_job("a")], [])
    await writer.save_node_secret("n1", "hash-1")
    async with aclosing(reader.watch(start.revision + 1)) as stream:
        async for change in stream:
            assert change.jobs.put == {"a": _job("a")}
            assert (reader.index, reader.index_revision) == (0, 0)  # not applied yet
            break
    raw = []
    async with aclosing(space.watch(b"/yurt/", start.revision + 1)) as stream:
        async for revision, events in stream:
            raw.append((revision, events))
            if len(raw) == 2:
                break
    first = reader.decode(*raw[0])
    assert (first.index, reader.index, reader.index_revision) == (1, 1, raw[0][0])
    # A secret arrives with the counter unchanged; node_secret needs no request for it.
    second = reader.decode(*raw[1])
    assert (second.index, reader.index_revision) == (1, raw[1][0])
    requests = reader_kv.requests
    assert await reader.node_secret("n1") == "hash-1"
    assert reader_kv.requests == requests
    # An older revision observed late does not move the counter back.
    reader.observe(0, raw[0][0] - 1)
    assert reader.index_revision == raw[1][0]
    await reader.save(2, [_job("b")], [])


async def test_one_plan_of_many_large_allocations_is_one_write(
        cluster: Callable[[], ClusterStore]) -> None:
    """10,000 allocations of one job of about 8 KiB, as a 10,000-count group's plan writes
    them: inline, over 80 MB, past any request etcd takes; normalised, the job is written
    once, and every allocation read back carries it (one decoded object for all)."""
    store = cluster()
    await store.load()
    job = _job("big", 0, blob="x" * 8000)
    allocs = [Allocation(id=f"alloc-{i:05d}", job_id="big", job=job) for i in range(10_000)]
    reader = cluster()
    start = await reader.snapshot()
    with trio.fail_after(60):
        await store.save(1, [job], allocs)
        snapshot = await cluster().snapshot()
        async with aclosing(reader.watch(start.revision + 1)) as stream:
            change = await anext(aiter(stream))
    assert (len(snapshot.allocs), snapshot.index) == (10_000, 1)
    assert snapshot.allocs[9999] == allocs[9999]
    assert len({id(a.job) for a in snapshot.allocs}) == 1
    assert len(change.allocs.put) == 10_000
    assert change.allocs.put["alloc-00042"] == allocs[42]
    # An update of a few of them writes no job again; a new job version writes one body.
    v1 = _job("big", 1, blob="y" * 8000)
    await store.save(2, [v1], [msgspec.structs.replace(allocs[0], job=v1), allocs[1]])
    bodies = [kv for kv in (await store._kv.get_prefix(store.prefix + b"alloc-jobs/"))[0]]
    assert len(bodies) == 2
    # Purged with its job: no body is left behind.
    await store.delete("big", [a.id for a in allocs], 3)
    assert (await store._kv.get_prefix(store.prefix + b"alloc-jobs/"))[0] == []
    assert (await cluster().snapshot()).allocs == []


def test_cluster_store_has_every_public_method_of_server_store() -> None:
    import inspect

    def public(cls: type) -> dict[str, inspect.Signature]:
        return {name: inspect.signature(fn) for name, fn in vars(cls).items()
                if callable(fn) and not name.startswith("_") and name != "open"}

    cluster_methods = public(ClusterStore)
    for name, signature in public(ServerStore).items():
        theirs = cluster_methods.get(name)
        assert theirs is not None, name
        # Every call the SQLite store takes, the cluster's takes the same way; it may take
        # more, optional, keyword arguments (a cluster's nodes).
        ours = list(signature.parameters.values())
        extra = list(theirs.parameters.values())[len(ours):]
        assert list(theirs.parameters.values())[:len(ours)] == ours, name
        assert all(p.default is not p.empty for p in extra), name
        assert theirs.return_annotation == signature.return_annotation, name

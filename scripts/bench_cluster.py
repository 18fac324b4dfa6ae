"""Benchmark: cluster scheduling throughput over etcd, with 100 nodes.

What it measures, in one run on one machine:
- **cluster, etcd**: a `yurt server` (`ClusterServer`, leading) over a real single-member etcd
  started for the run, 100 registered nodes; N jobs registered at once; the time from the
  first register to the last allocation placed, as allocations placed per second; and the
  etcd requests and bytes the server sent per allocation (registers, evaluations, plans,
  the watch);
- **cluster, in-memory etcd**: the same server code over `MemoryKV` (no network, no disk):
  what the scheduler and the server's logic cost alone;
- **physical limit**: the very transactions the etcd run committed (same keys, same bytes,
  same count), replayed on the same etcd back to back with no logic in between: what etcd
  and this HTTP client allow, the ceiling for the first row.

Prints a table, then one JSON line (`{"bench": "cluster", …}`) for machines. The node
simulator (1,000 nodes) is a later step.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yurt.runtime.eventstream import EventBroker
from yurt.runtime.server.cluster.etcd.client import Compare, EtcdClient, Op, TxnResult
from yurt.runtime.server.cluster.etcd.kv import KV
from yurt.runtime.server.cluster.etcd.memkv import MemoryKV
from yurt.runtime.server.cluster.etcd.process import start_etcd
from yurt.runtime.server.cluster.server import ClusterServer
from yurt.runtime.server.state.etcd import ClusterStore
from yurt.runtime.structs import (
    Job,
    Node,
    NodeCpuResources,
    NodeMemoryResources,
    NodeResources,
    Resources,
    Task,
    TaskGroup,
)


class RecordingKV:
    """A KV that records every transaction it sends (for the replay) and its size."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv
        self.txns: list[tuple[list[Op], list[Op]]] = []
        self.bytes = 0
        self.recording = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kv, name)

    async def txn(self, compare: list[Compare], success: list[Op],
                  failure: list[Op] | None = None) -> TxnResult:
        if self.recording:
            self.txns.append((success, failure or []))
            self.bytes += len(json.dumps([o.body for o in success]))
        result: TxnResult = await self.kv.txn(compare, success, failure)
        return result


def node(i: int) -> Node:
    return Node(id=f"node-{i:04d}", name=f"node-{i:04d}", datacenter="dc1",
                attributes={"unique.network.ip-address": "127.0.0.1"},
                node_resources=NodeResources(cpu=NodeCpuResources(cpu_shares=8000),
                                             memory=NodeMemoryResources(memory_mb=16384)))


def job(i: int, count: int) -> Job:
    return Job(id=f"job-{i:03d}", name=f"job-{i:03d}", datacenters=["dc1"],
               task_groups=[TaskGroup(name="g", count=count, tasks=[Task(
                   name="t", driver="mock_driver", config={"run_for": "1h"},
                   resources=Resources(cpu=50, memory=64))])])


async def run_cluster(kv: Any, nodes: int, jobs: int, count: int) -> dict[str, Any]:
    recording = RecordingKV(kv)
    store = ClusterStore(recording, b"/bench/")
    server = ClusterServer(EventBroker(), store, recording, b"/bench/")
    await server.load()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.follow)
        nursery.start_soon(server.lead)
        for i in range(nodes):
            await server.register_node(node(i), f"secret-{i}")
        total = jobs * count
        requests_before = kv.requests
        recording.recording = True
        start = time.perf_counter()
        async with trio.open_nursery() as registering:
            for i in range(jobs):
                registering.start_soon(server.register_job, job(i, count))
        while sum(1 for a in server.allocs.values() if not a.is_terminal()) < total:
            await server.changed.wait()
        seconds = time.perf_counter() - start
        recording.recording = False
        requests = kv.requests - requests_before
        used = {a.node_id for a in server.allocs.values()}
        nursery.cancel_scope.cancel()
    return {"allocs": total, "seconds": round(seconds, 3),
            "allocs_per_s": round(total / seconds), "etcd_requests": requests,
            "requests_per_alloc": round(requests / total, 3),
            "bytes_per_alloc": round(recording.bytes / total),
            "transactions": len(recording.txns), "nodes_used": len(used),
            "_txns": recording.txns}


async def replay(kv: KV, txns: list[tuple[list[Op], list[Op]]], total: int) -> dict[str, Any]:
    """The same transactions, under another prefix so nothing collides, back to back."""
    moved = [[Op({k: {**v, "key": _moved(v["key"])} for k, v in op.body.items()})
              for op in success] for success, _ in txns]
    start = time.perf_counter()
    for ops in moved:
        await kv.txn([], ops)
    seconds = time.perf_counter() - start
    return {"allocs": total, "seconds": round(seconds, 3),
            "allocs_per_s": round(total / seconds), "etcd_requests": len(moved),
            "requests_per_alloc": round(len(moved) / total, 3), "transactions": len(moved)}


def _moved(key_b64: str) -> str:
    import base64

    return base64.b64encode(b"/replay" + base64.b64decode(key_b64)).decode()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        etcd = start_etcd(Path(tmp) / "etcd", name="bench")
        try:
            client = EtcdClient(etcd.urls)
            try:
                real = await run_cluster(client, args.nodes, args.jobs, args.count)
                limit = await replay(client, real.pop("_txns"), real["allocs"])
            finally:
                await client.aclose()
        finally:
            etcd.stop()
    memory = await run_cluster(MemoryKV(), args.nodes, args.jobs, args.count)
    memory.pop("_txns")
    rows = [("cluster, etcd", real), ("cluster, in-memory etcd", memory),
            ("physical limit (etcd replay)", limit)]
    table = Table(title=f"scheduling {real['allocs']} allocations ({args.jobs} jobs × "
                        f"{args.count}) over {args.nodes} nodes", title_justify="left")
    for col in ("run", "seconds", "allocs/s", "etcd requests", "requests/alloc",
                "transactions", "vs limit"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, r in rows:
        table.add_row(name, str(r["seconds"]), f"{r['allocs_per_s']:,}",
                      str(r["etcd_requests"]), str(r["requests_per_alloc"]),
                      str(r["transactions"]),
                      f"{r['allocs_per_s'] / limit['allocs_per_s']:.2f}×")
    console = Console(width=120)
    console.print(table)
    console.print(f"etcd bytes per allocation (transaction bodies): {real['bytes_per_alloc']:,}; "
                  f"nodes used: {real['nodes_used']} of {args.nodes}")
    print(json.dumps({"bench": "cluster", "nodes": args.nodes, "jobs": args.jobs,
                      "count": args.count, "etcd": real, "memory": memory,
                      "physical_limit": limit,
                      "etcd_over_limit": round(real["allocs_per_s"] / limit["allocs_per_s"], 3),
                      "etcd_over_memory": round(real["allocs_per_s"]
                                                / memory["allocs_per_s"], 3)}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=100, help="nodes registered (default 100)")
    parser.add_argument("--jobs", type=int, default=20, help="jobs registered (default 20)")
    parser.add_argument("--count", type=int, default=50,
                        help="allocations per job (default 50)")
    trio.run(main, parser.parse_args())

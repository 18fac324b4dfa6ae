"""Benchmark: N allocations × 3 mock tasks (prestart, main, sidecar) started, running, stopped.

One process, the whole runtime core (client, alloc runners, task runners, coordinator, kill
order, event broker, in-memory state store), under Trio's mock clock with autojump: time only
moves when every task is idle, so the numbers are the runtime's own CPU cost, not waiting.

For each N it reports wall seconds for the whole life (place, start, run, stop), allocations
per second, the process's CPU time per allocation (steadier than wall time on a shared
machine), and the resident memory each live allocation costs (RSS with all N running, minus
RSS before, divided by N). The cost per allocation must not grow with N: the table shows the
ratio of the per-allocation time at the largest N to the smallest.

Each row runs as the agent does for memory: survivors of full collections frozen, and the
heap frozen once the start burst settled (runtime/agent/heap.py). The same sizes run once more
with Python's cyclic garbage collector off (`--no-gc-rows` skips
them): CPython's collector scans a heap that grows with N, so the difference between the two
growth ratios is the collector's, and what remains is yurt's own scaling.

Prints a table, then one JSON line (`{"bench": "runtime", …}`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import trio
import trio.testing
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yurt.runtime.agent.heap import freeze_long_lived, freezing_survivors
from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.structs import Node
from yurt.store import MemoryStateDB

JOB = """
job "bench-%d" {
  group "g" {
    count = %d
    task "init" {
      driver = "mock_driver"
      lifecycle { hook = "prestart" }
      config { run_for = "1s" }
    }
    task "main" {
      driver = "mock_driver"
      config { run_for = "24h" }
    }
    task "side" {
      driver = "mock_driver"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config { run_for = "24h" }
    }
  }
}
"""

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


#: A group's `count` is capped (jobspec limits), so large N is placed as several jobs.
JOB_COUNT_MAX = 1_000


async def life_of(n: int) -> dict[str, float]:
    jobs = [parse_job(JOB % (i, min(JOB_COUNT_MAX, n - first)))
            for i, first in enumerate(range(0, n, JOB_COUNT_MAX))]

    def unix_clock() -> int:
        return 1_800_000_000 * 10**9 + int(trio.current_time() * 1e9)

    broker = EventBroker()
    server = LocalServer(Node(id="bench-node", name="bench"), broker)
    config = AllocRunnerConfig(state_db=MemoryStateDB(),
                               drivers={"mock_driver": MockDriver(unix_clock)},
                               unix_clock=unix_clock)
    client = Client(config, broker)
    gc.collect()
    rss_before = rss_bytes()
    start, cpu_start = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(client.run)
        for job in jobs:
            for alloc in (await server.register_job(job)).placed:
                client.add_alloc(alloc)
        await trio.sleep(60)  # virtual: every prestart done, every main running
        running = time.perf_counter()
        live = sum(1 for r in client.runners.values()
                   if r.task_runners["main"].state.state == "running")
        assert live == n, f"only {live} of {n} allocations running"
        rss_live = rss_bytes()
        # The burst has settled: what it left alive lives as long as its allocations. The
        # agent freezes it out of the cyclic collector's reach here (runtime/agent/agent.py).
        freeze_long_lived()
        for job in jobs:
            for alloc in await server.stop_job(job.id):
                client.update_alloc(alloc)
        await client.wait_all()
        stopped, cpu_stopped = time.perf_counter(), time.process_time()
        complete = sum(1 for r in client.runners.values()
                       if r.alloc_state().client_status == "complete")
        assert complete == n, f"only {complete} of {n} allocations complete"
        nursery.cancel_scope.cancel()
    return {"allocations": n, "tasks": 3 * n, "wall_s": round(stopped - start, 3),
            "start_s": round(running - start, 3), "stop_s": round(stopped - running, 3),
            "allocs_per_s": round(n / (stopped - start)),
            "us_per_alloc": round((stopped - start) / n * 1e6),
            "cpu_us_per_alloc": round((cpu_stopped - cpu_start) / n * 1e6),
            "rss_per_live_alloc_kib": round((rss_live - rss_before) / n / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[1_000, 10_000],
                        help="numbers of allocations (default: 1000 10000)")
    parser.add_argument("--no-gc-rows", action="store_true",
                        help="skip the diagnostic rows with the garbage collector off")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--gc-off", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.one is not None:  # a single row, in this fresh process
        if args.gc_off:
            gc.disable()
        with freezing_survivors():  # as the agent runs (runtime/agent/agent.py)
            row = trio.run(life_of, args.one,
                           clock=trio.testing.MockClock(autojump_threshold=0))
        print(json.dumps({**row, "gc": not args.gc_off}))
        return

    def measure(gc_on: bool) -> list[dict[str, float]]:
        """Each row in its own process, so memory and collector state start clean."""
        out = []
        for n in args.sizes:
            cmd = [sys.executable, __file__, "--one", str(n), *([] if gc_on else ["--gc-off"])]
            result = subprocess.run(cmd, capture_output=True, text=True, check=True)
            out.append(json.loads(result.stdout.splitlines()[-1]))
        return out

    rows = measure(True) + ([] if args.no_gc_rows else measure(False))
    table = Table(title="runtime core: N allocations × 3 mock tasks, whole life under a mock "
                        "clock", title_justify="left")
    for col in ("allocations", "gc", "tasks", "wall s", "start s", "stop s", "allocs/s",
                "µs/alloc", "CPU µs/alloc", "RSS/live alloc"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['allocations']:,}", "on" if r["gc"] else "off", f"{r['tasks']:,}",
                      str(r["wall_s"]),
                      str(r["start_s"]), str(r["stop_s"]), f"{r['allocs_per_s']:,}",
                      str(r["us_per_alloc"]), str(r["cpu_us_per_alloc"]),
                      f"{r['rss_per_live_alloc_kib']} KiB")
    console = Console(width=120)
    console.print(table)
    growth = {}
    for gc_on in (True, False):
        sized = [r for r in rows if r["gc"] is gc_on]
        if len(sized) < 2:
            continue
        ratio = sized[-1]["us_per_alloc"] / sized[0]["us_per_alloc"]
        cpu_ratio = sized[-1]["cpu_us_per_alloc"] / sized[0]["cpu_us_per_alloc"]
        growth["gc_on" if gc_on else "gc_off"] = round(ratio, 2)
        growth["cpu_gc_on" if gc_on else "cpu_gc_off"] = round(cpu_ratio, 2)
        console.print(f"gc {'on ' if gc_on else 'off'}: per-allocation time at "
                      f"N={sized[-1]['allocations']:,} vs N={sized[0]['allocations']:,}: "
                      f"{ratio:.2f}× wall, {cpu_ratio:.2f}× CPU (1.0 = no growth with N)")
    print(json.dumps({"bench": "runtime", "rows": rows, "per_alloc_growth": growth}))


if __name__ == "__main__":
    msgspec.json.Encoder()  # import cost outside the measurement
    main()

"""Benchmark: what N allocations starting at once cost the server, with and without Nomad's
alloc sync scheme.

N allocations of 3 mock tasks (prestart 1 s, main 30 s, prestart sidecar) run their whole life
under a mock clock on an embedded client. Every new client view of an allocation goes either
- to a naive client that sends it to the server at once (one call per update), or
- to yurt's `AllocSyncer` (latest update per allocation, 200 ms ticks, urgent updates on the
  next tick, the rest at most once a second, identical ones dropped).
A counting fake server records calls and allocation updates received. Prints a table and one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import trio
import trio.testing
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client.allocsync import AllocSyncer, stripped
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.mock import MockDriver
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.structs import Allocation, Node
from yurt.store import MemoryStateDB

JOB = """
job "sync" {
  type = "batch"
  group "g" {
    count = %d
    task "init" {
      driver = "mock_driver"
      lifecycle { hook = "prestart" }
      config { run_for = "1s" }
    }
    task "main" {
      driver = "mock_driver"
      config { run_for = "30s" }
    }
    task "side" {
      driver = "mock_driver"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config { run_for = "1h" }
    }
  }
}
"""


class CountingServer:
    def __init__(self) -> None:
        self.calls = 0
        self.updates = 0
        self.final: dict[str, str] = {}

    async def update_allocs(self, batch: list[Allocation]) -> None:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        self.updates += len(batch)
        for alloc in batch:
            self.final[alloc.id] = alloc.client_status


async def life(n: int, scheme: str) -> dict[str, object]:
    def unix_clock() -> int:
        return 1_800_000_000 * 10**9 + int(trio.current_time() * 1e9)

    job = parse_job(JOB % n)
    server = CountingServer()
    db = MemoryStateDB()
    broker = EventBroker()
    placement = LocalServer(Node(id="n", name="n"), broker)
    async with trio.open_nursery() as nursery:
        syncer = AllocSyncer(server.update_allocs, db, unix_clock=unix_clock,
                             rng=random.Random(1))
        syncer.servers_contacted.set()
        if scheme == "naive":
            def on_update(alloc: Allocation) -> None:
                nursery.start_soon(server.update_allocs, [stripped(alloc)])
        else:
            await nursery.start(syncer.run)
            on_update = syncer.add
        client = Client(AllocRunnerConfig(state_db=db,
                                          drivers={"mock_driver": MockDriver(unix_clock)},
                                          unix_clock=unix_clock), broker, on_update)
        await nursery.start(client.run)
        for alloc in (await placement.register_job(job)).placed:
            client.add_alloc(alloc)
        await client.wait_all()
        await trio.sleep(2)  # let the last tick go out
        nursery.cancel_scope.cancel()
    complete = sum(1 for status in server.final.values() if status == "complete")
    return {"scheme": scheme, "allocations": n, "server_calls": server.calls,
            "updates_sent": server.updates, "server_sees_complete": complete}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=1000, help="allocations (default 1000)")
    args = parser.parse_args()
    rows = [trio.run(life, args.n, scheme, clock=trio.testing.MockClock(autojump_threshold=0))
            for scheme in ("naive", "yurt")]
    table = Table(title=f"{args.n} allocations × 3 mock tasks, whole life: what the server "
                        "receives", title_justify="left")
    for col in ("client", "server calls", "allocation updates", "server sees complete"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["scheme"]), f"{r['server_calls']:,}", f"{r['updates_sent']:,}",
                      f"{r['server_sees_complete']:,}")
    naive, yurt = rows
    calls_ratio = int(naive["server_calls"]) / max(int(yurt["server_calls"]), 1)
    updates_ratio = int(naive["updates_sent"]) / max(int(yurt["updates_sent"]), 1)
    console = Console(width=120)
    console.print(table)
    console.print(f"yurt makes {calls_ratio:.0f}× fewer server calls and sends "
                  f"{updates_ratio:.1f}× fewer allocation updates")
    print(json.dumps({"bench": "sync", "rows": rows, "calls_ratio": round(calls_ratio, 1),
                      "updates_ratio": round(updates_ratio, 2)}))


if __name__ == "__main__":
    main()

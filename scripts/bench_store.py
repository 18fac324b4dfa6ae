"""Benchmark: state writes per second through the async StateDB API.

What it measures, in one run on one machine:
- `put_task_state` through `open_state_db` (SQLite, WAL, synchronous=FULL, one coalescing
  writer), with de-duplication on and off, for *changed* values (every write differs) and
  *identical* values (the same bytes rewritten: what Nomad's boltdd benchmark measures), from
  one producer task (a lone task runner, each write waiting for its commit) and from many
  concurrent producers (many task runners at once, sharing transactions);
- the physical limit for the same rows on this disk: plain `sqlite3`, one `executemany` upsert
  in one transaction, no event loop, no thread hop.

Prints a table, then one JSON line (`{"bench": "store", …}`) for machines.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import trio
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yurt.runtime.structs import TaskEvent, TaskState
from yurt.store import open_state_db
from yurt.store.base import encode


def make_state(n: int, changed: bool) -> TaskState:
    """A realistic task state (~1 KB of JSON: a few events)."""
    events = [TaskEvent(type=t, time=1_700_000_000_000_000_000 + i,
                        display_message=f"{t} message", details={"k": "v"})
              for i, t in enumerate(["Received", "Task Setup", "Started"])]
    return TaskState(state="running", restarts=n if changed else 0, events=events)


async def run_case(producers: int, writes: int, dedup: bool, changed: bool) -> dict[str, object]:
    per_producer = writes // producers
    with tempfile.TemporaryDirectory() as tmp:
        async with open_state_db(Path(tmp) / "state", dedup=dedup) as db:
            # Prime every key once, so "identical" means identical to what is on disk.
            async with trio.open_nursery() as nursery:
                for p in range(producers):
                    nursery.start_soon(db.put_task_state, f"alloc-{p}", "task",
                                       make_state(0, False))
            before = (db.stats.transactions, db.stats.written)

            # Built before the clock starts: the benchmark times the store, not the structs.
            states = [make_state(i + 1, changed) for i in range(per_producer)]

            async def produce(p: int) -> None:
                alloc_id = f"alloc-{p}"
                for state in states:
                    await db.put_task_state(alloc_id, "task", state)

            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for p in range(producers):
                    nursery.start_soon(produce, p)
            seconds = time.perf_counter() - start
            transactions = db.stats.transactions - before[0]
            written = db.stats.written - before[1]
    total = per_producer * producers
    return {"producers": producers, "dedup": dedup, "values": "changed" if changed else "identical",
            "writes": total, "seconds": round(seconds, 4),
            "writes_per_s": round(total / seconds), "us_per_write": round(seconds / total * 1e6, 2),
            "transactions": transactions, "rows_written": written}


def physical_limit(writes: int) -> dict[str, object]:
    """Plain sqlite3 on the same schema: the rows in one executemany, one transaction."""
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "raw.db")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE task (alloc_id TEXT, task TEXT, kind TEXT, value TEXT, "
                     "PRIMARY KEY (alloc_id, task, kind))")
        rows = [(f"alloc-{i % 100}", "task", "task_state", encode(make_state(i, True)).decode())
                for i in range(writes)]
        start = time.perf_counter()
        with conn:
            conn.executemany("INSERT INTO task VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
                             "value = excluded.value", rows)
        seconds = time.perf_counter() - start
        conn.close()
    return {"writes": writes, "seconds": round(seconds, 4), "writes_per_s": round(writes / seconds),
            "us_per_write": round(seconds / writes * 1e6, 2)}


async def main(args: argparse.Namespace) -> None:
    rows = []
    for producers, writes in ((1, args.single_writes), (args.producers, args.many_writes)):
        for dedup in (True, False):
            for changed in (True, False):
                rows.append(await run_case(producers, writes, dedup, changed))
    limit = physical_limit(args.many_writes)

    table = Table(title="state writes through the async API (SQLite, WAL, synchronous=FULL)",
                  title_justify="left")
    for col in ("producers", "dedup", "values", "writes", "writes/s", "µs/write",
                "transactions", "rows written", "vs limit"):
        table.add_column(col, justify="right" if col not in ("dedup", "values") else "left")
    for r in rows:
        table.add_row(str(r["producers"]), "on" if r["dedup"] else "off", str(r["values"]),
                      str(r["writes"]), f"{r['writes_per_s']:,}", str(r["us_per_write"]),
                      str(r["transactions"]), str(r["rows_written"]),
                      f"{r['writes_per_s'] / limit['writes_per_s']:.2f}×")  # type: ignore[operator]
    table.add_row("limit", "-", "changed", str(limit["writes"]), f"{limit['writes_per_s']:,}",
                  str(limit["us_per_write"]), "1", str(limit["writes"]), "1.00×")
    console = Console(width=120)
    console.print(table)

    def cost(producers: int, dedup: bool, values: str) -> float:
        r = next(r for r in rows
                 if (r["producers"], r["dedup"], r["values"]) == (producers, dedup, values))
        return float(r["us_per_write"])  # type: ignore[arg-type]

    ratios = {
        f"{p}_producers": round(cost(p, True, "changed") / cost(p, True, "identical"), 1)
        for p in (1, args.producers)
    }
    console.print("cost of a changed write ÷ cost of an identical rewrite (dedup on): "
                  + ", ".join(f"{k.replace('_', ' ')}: {v}×" for k, v in ratios.items()))
    print(json.dumps({"bench": "store", "rows": rows, "physical_limit": limit,
                      "changed_over_identical_cost": ratios}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--producers", type=int, default=100,
                        help="concurrent producer tasks in the 'many' rows (default 100)")
    parser.add_argument("--single-writes", type=int, default=2_000,
                        help="writes in the one-producer rows (default 2000)")
    parser.add_argument("--many-writes", type=int, default=20_000,
                        help="writes in the many-producer rows (default 20000)")
    trio.run(main, parser.parse_args())

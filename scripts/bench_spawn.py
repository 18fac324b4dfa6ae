"""Benchmark: N raw_exec tasks of `sleep 3600` through yurt, against the physical limit.

In one run, on this machine:
- the physical limit: the same N processes started bare with `os.posix_spawn`;
- yurt: N allocations of one raw_exec task each, placed on an embedded client with the real
  SQLite state store, from placement until every task is `running`, then stopped.

Reported: seconds until all are running (and tasks/s), the agent's RSS growth, the shims'
memory (RSS, and PSS, which splits shared pages fairly and is the honest cost), the tasks'
own memory for comparison, and the time to stop everything. A table, then one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import trio
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yurt.runtime.client.allocrunner.runner import AllocRunnerConfig
from yurt.runtime.client.client import Client
from yurt.runtime.client.drivers.rawexec import RawExecDriver
from yurt.runtime.eventstream import EventBroker
from yurt.runtime.jobspec import parse_job
from yurt.runtime.server.local import LocalServer
from yurt.runtime.structs import Node
from yurt.store import open_state_db

JOB = """
job "spawn" {
  group "g" {
    count = %d
    task "sleep" {
      driver = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }
      logs { disabled = true }
    }
  }
}
"""

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss(pid: int | None = None) -> int:
    with open(f"/proc/{pid or 'self'}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def rollup(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes from /proc/<pid>/smaps_rollup."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Pss:"):
                values[parts[0]] = int(parts[1]) * 1024
    return values["Rss:"], values["Pss:"]


def physical_limit(n: int) -> dict[str, float]:
    start = time.perf_counter()
    pids = [os.posix_spawn("/bin/sleep", ["sleep", "3600"], os.environ) for _ in range(n)]
    spawned = time.perf_counter() - start
    sizes = [rollup(pid) for pid in pids]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
    return {"seconds_to_running": round(spawned, 3), "tasks_per_s": round(n / spawned),
            "task_rss_mib": round(sum(r for r, _ in sizes) / 2**20, 1),
            "task_pss_mib": round(sum(p for _, p in sizes) / 2**20, 1)}


async def through_yurt(n: int) -> dict[str, float]:
    job = parse_job(JOB % n)
    with tempfile.TemporaryDirectory(prefix="yurt-bench-") as tmp:
        async with open_state_db(Path(tmp) / "state") as db:
            broker = EventBroker()
            node = Node(id="bench", name="bench")
            server = LocalServer(node, broker)
            driver = RawExecDriver()
            client = Client(AllocRunnerConfig(state_db=db, drivers={"raw_exec": driver},
                                              unix_clock=time.time_ns,
                                              alloc_root=Path(tmp) / "alloc", node=node),
                            broker)
            gc.collect()
            rss_before = rss()
            async with trio.open_nursery() as nursery:
                await nursery.start(client.run)
                start = time.perf_counter()
                allocs = (await server.register_job(job)).placed
                for alloc in allocs:
                    client.add_alloc(alloc)
                listener_done = trio.Event()

                async def all_running() -> None:
                    sub = broker.subscribe(size=100_000)
                    running: set[str] = set()
                    async for record in sub:
                        for event in record.events:
                            if event.topic == "Task" and event.payload["Event"].type == (
                                    "Started"):
                                running.add(event.key)
                        if len(running) == n:
                            break
                    sub.close()
                    listener_done.set()

                nursery.start_soon(all_running)
                with trio.fail_after(600):
                    await listener_done.wait()
                to_running = time.perf_counter() - start
                agent_rss = rss() - rss_before
                handles = [r.task_runners["sleep"].handle for r in client.runners.values()]
                shims = [rollup(int(h.driver_state["shim_pid"])) for h in handles if h]
                tasks = [rollup(int(h.driver_state["pid"])) for h in handles if h]
                stop_start = time.perf_counter()
                for alloc in await server.stop_job(job.id):
                    client.update_alloc(alloc)
                with trio.fail_after(600):
                    await client.wait_all()
                to_stopped = time.perf_counter() - stop_start
                nursery.cancel_scope.cancel()
    mib = 2**20
    return {"seconds_to_running": round(to_running, 3), "tasks_per_s": round(n / to_running),
            "agent_rss_growth_mib": round(agent_rss / mib, 1),
            "agent_rss_per_task_kib": round(agent_rss / n / 1024, 1),
            "shim_rss_mib": round(sum(r for r, _ in shims) / mib, 1),
            "shim_pss_mib": round(sum(p for _, p in shims) / mib, 1),
            "shim_pss_per_task_kib": round(sum(p for _, p in shims) / n / 1024, 1),
            "task_rss_mib": round(sum(r for r, _ in tasks) / mib, 1),
            "task_pss_mib": round(sum(p for _, p in tasks) / mib, 1),
            "seconds_to_stopped": round(to_stopped, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=500, help="number of tasks (default 500)")
    args = parser.parse_args()
    limit = physical_limit(args.n)
    yurt = trio.run(through_yurt, args.n)

    table = Table(title=f"{args.n} × sleep 3600: yurt raw_exec vs bare posix_spawn",
                  title_justify="left")
    for col in ("", "to running", "tasks/s", "agent RSS +", "shims RSS / PSS",
                "tasks RSS / PSS", "to stopped"):
        table.add_column(col, justify="right")
    table.add_row("posix_spawn (limit)", f"{limit['seconds_to_running']} s",
                  f"{limit['tasks_per_s']:,}", "-", "-",
                  f"{limit['task_rss_mib']} / {limit['task_pss_mib']} MiB", "-")
    table.add_row("yurt raw_exec", f"{yurt['seconds_to_running']} s",
                  f"{yurt['tasks_per_s']:,}",
                  f"{yurt['agent_rss_growth_mib']} MiB ({yurt['agent_rss_per_task_kib']} KiB/task)",
                  f"{yurt['shim_rss_mib']} / {yurt['shim_pss_mib']} MiB",
                  f"{yurt['task_rss_mib']} / {yurt['task_pss_mib']} MiB",
                  f"{yurt['seconds_to_stopped']} s")
    slower = yurt["seconds_to_running"] / limit["seconds_to_running"]
    console = Console(width=140)
    console.print(table)
    console.print(f"yurt takes {slower:.1f}× the bare spawn time to get every task running; "
                  f"each shim costs {yurt['shim_pss_per_task_kib']} KiB PSS")
    print(json.dumps({"bench": "spawn", "tasks": args.n, "physical_limit": limit,
                      "yurt": yurt, "time_ratio_vs_limit": round(slower, 1)}))


if __name__ == "__main__":
    main()

"""Benchmark: the runners' share of a start, a restart and a stop, with real raw_exec tasks.

`bench_spawn` answers "how long until N tasks run"; this one splits that answer the way the
task and alloc runners see it, on an embedded client with the real SQLite state store:

- start: N allocations of one `sleep` task placed at once; when the first task is `Started`
  (a pipelined start shows its first task early; a start marching in lock-step shows it late)
  and when the last one is;
- restart: one task at a time is SIGKILLed (restart delay 0): from the kill until the runner
  reports the new run `Started`, p50 and p95 over `--restarts` samples;
- stop-all: the job stopped (every allocation told at once, as `DELETE /v1/job/<id>` does)
  until the driver was asked to stop the last task, until the last task and shim are gone
  (seen in /proc), and until every runner has finished;
- crash loop: one task of `/bin/false` with delay 0 for `--loop-seconds`: the agent's CPU
  time per start.

Prints one JSON line per run (`{"bench": "lifecycle", …}`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

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
job "%(name)s" {
  group "g" {
    count = %(count)d
    restart {
      attempts = 100000
      interval = "24h"
      delay    = "0s"
      mode     = "delay"
    }
    task "t" {
      driver = "raw_exec"
      kill_timeout = "2s"
      config {
        command = "%(command)s"
        args    = %(args)s
      }
      resources {
        cpu    = 1
        memory = 10
      }
      logs { disabled = true }
    }
  }
}
"""


class TimedDriver(RawExecDriver):
    """raw_exec, noting when it was asked to stop each task."""

    def __init__(self) -> None:
        super().__init__()
        self.stops: list[float] = []

    async def stop_task(self, task_id: str, kill_timeout: int, signal: str) -> None:
        self.stops.append(time.perf_counter())
        await super().stop_task(task_id, kill_timeout, signal)


def alive(pids: list[int]) -> int:
    return sum(1 for pid in pids if os.path.exists(f"/proc/{pid}"))


def job_text(name: str, count: int, command: str, args: list[str]) -> str:
    return JOB % {"name": name, "count": count, "command": command,
                  "args": json.dumps(args)}


async def measure(n: int, restarts: int, loop_seconds: float,
                  start_concurrency: int = 0) -> dict[str, float]:
    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="yurt-bench-") as tmp:
        async with open_state_db(Path(tmp) / "state") as db:
            broker = EventBroker()
            node = Node(id="bench", name="bench")
            server = LocalServer(node, broker)
            driver = TimedDriver()
            config = AllocRunnerConfig(state_db=db, drivers={"raw_exec": driver},
                                       unix_clock=time.time_ns,
                                       alloc_root=Path(tmp) / "alloc", node=node)
            if start_concurrency:
                config = dataclasses.replace(
                    config, start_limiter=trio.CapacityLimiter(start_concurrency))
            client = Client(config, broker)
            started: dict[str, int] = {}  # alloc id -> Started events seen
            changed = trio.Event()

            async def follow() -> None:
                nonlocal changed
                sub = broker.subscribe(size=1_000_000)
                async for record in sub:
                    for event in record.events:
                        if event.topic == "Task" and event.payload["Event"].type == "Started":
                            alloc = event.payload["AllocID"]
                            started[alloc] = started.get(alloc, 0) + 1
                            changed.set()
                            changed = trio.Event()

            async def until(predicate: object) -> None:
                with trio.fail_after(600):
                    while not predicate():  # type: ignore[operator]
                        await changed.wait()

            async with trio.open_nursery() as nursery:
                await nursery.start(client.run)
                nursery.start_soon(follow)
                await trio.sleep(0.05)  # the follower subscribes

                # ---- start
                job = parse_job(job_text("start", n, "/bin/sleep", ["3600"]))
                t0 = time.perf_counter()
                for alloc in (await server.register_job(job)).placed:
                    client.add_alloc(alloc)
                await until(lambda: len(started) >= 1)
                result["first_started_s"] = round(time.perf_counter() - t0, 3)
                await until(lambda: len(started) >= n)
                result["all_started_s"] = round(time.perf_counter() - t0, 3)

                # ---- restart latency, one at a time
                samples = []
                runners = list(client.runners.values())
                for i in range(restarts):
                    runner = runners[i % len(runners)]
                    handle = runner.task_runners["t"].handle
                    if handle is None:
                        continue
                    before = started[runner.id]
                    t1 = time.perf_counter()
                    os.kill(int(handle.driver_state["pid"]), signal.SIGKILL)
                    await until(lambda r=runner, b=before: started[r.id] > b)  # type: ignore[misc]
                    samples.append((time.perf_counter() - t1) * 1000)
                if samples:
                    samples.sort()
                    result["restart_p50_ms"] = round(statistics.median(samples), 1)
                    result["restart_p95_ms"] = round(samples[int(len(samples) * 0.95) - 1], 1)

                # ---- stop-all
                pids = [int(h.driver_state[key]) for r in client.runners.values()
                        if (h := r.task_runners["t"].handle) is not None
                        for key in ("pid", "shim_pid")]
                driver.stops.clear()
                t2 = time.perf_counter()
                gone = 0.0

                async def watch_gone() -> None:
                    nonlocal gone
                    while alive(pids):  # noqa: ASYNC110 - /proc has no event to wait on
                        await trio.sleep(0.005)
                    gone = time.perf_counter() - t2

                async with trio.open_nursery() as watchers:
                    watchers.start_soon(watch_gone)
                    for alloc in await server.stop_job(job.id):
                        client.update_alloc(alloc)
                    with trio.fail_after(600):
                        await client.wait_all()
                result["stop_all_s"] = round(time.perf_counter() - t2, 3)
                result["stop_signalled_s"] = round(max(driver.stops, default=t2) - t2, 3)
                result["stop_gone_s"] = round(gone, 3)

                # ---- crash loop
                if loop_seconds > 0:
                    loop = parse_job(job_text("loop", 1, "/bin/false", []))
                    placed = (await server.register_job(loop)).placed
                    for alloc in placed:
                        client.add_alloc(alloc)
                    alloc_id = placed[0].id
                    await until(lambda: started.get(alloc_id, 0) >= 1)
                    c0, s0 = time.process_time(), started[alloc_id]
                    await trio.sleep(loop_seconds)
                    c1, s1 = time.process_time(), started[alloc_id]
                    result["crash_loop_starts_per_s"] = round((s1 - s0) / loop_seconds, 1)
                    result["crash_loop_cpu_ms_per_start"] = round(
                        (c1 - c0) * 1000 / max(s1 - s0, 1), 2)
                    with trio.fail_after(60):
                        await client.destroy_all()
                nursery.cancel_scope.cancel()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=500, help="allocations (default 500)")
    parser.add_argument("--restarts", type=int, default=40, help="restart samples")
    parser.add_argument("--loop-seconds", type=float, default=3.0,
                        help="crash loop duration (0: skip)")
    parser.add_argument("--start-concurrency", type=int, default=0,
                        help="task starts in flight (default: the agent's default)")
    args = parser.parse_args()
    result = trio.run(measure, args.n, args.restarts, args.loop_seconds,
                      args.start_concurrency)
    print(json.dumps({"bench": "lifecycle", "tasks": args.n, "loadavg": os.getloadavg()[0],
                      "start_concurrency": args.start_concurrency, **result}))


if __name__ == "__main__":
    main()

"""Benchmark: the agent's CPU per task start in a crash loop, and raw_exec's own start cost.

Two measurements, in one run:
- crash loop: one allocation whose task is `/bin/false` with `restart { delay = "0s" }`,
  through the real alloc runner, task runner and raw_exec driver (in-memory state), until it
  has started N times. Reported: the agent's CPU (user + system, all its threads) per start,
  and the wall time per start (the restart latency, with a delay of 0).
- driver only: N sequential start → wait → destroy of `/bin/true` straight on the raw_exec
  driver, and N `sleep` tasks started concurrently: the driver's own share of a start.

Children's CPU (shims, tasks) is not the agent's and is not counted. A table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from yurt.runtime.client.allocrunner.runner import AllocRunner, AllocRunnerConfig
from yurt.runtime.client.drivers.protocol import TaskConfig
from yurt.runtime.client.drivers.rawexec import RawExecDriver
from yurt.runtime.jobspec import parse_job
from yurt.runtime.structs import Allocation, Node
from yurt.store import MemoryStateDB

JOB = """
job "loop" {
  type = "batch"
  group "g" {
    restart {
      attempts = %d
      interval = "24h"
      delay    = "0s"
      mode     = "fail"
    }
    task "t" {
      driver = "raw_exec"
      config { command = "/bin/false" }
      logs { disabled = true }
    }
  }
}
"""


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def crash_loop(n: int, root: Path) -> dict[str, float]:
    job = parse_job(JOB % (n - 1))
    alloc = Allocation(id="crashloop-0000", name="loop.g[0]", job=job, job_id=job.id,
                       task_group="g")
    config = AllocRunnerConfig(state_db=MemoryStateDB(), drivers={"raw_exec": RawExecDriver()},
                               unix_clock=time.time_ns, alloc_root=root / "loop",
                               node=Node(id="bench", name="bench"))
    wall, used = time.perf_counter(), cpu()
    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            runner = AllocRunner(alloc, config, nursery=nursery)
            await runner.run()
    wall, used = time.perf_counter() - wall, cpu() - used
    starts = runner.task_runners["t"].state.restarts + 1  # events keep only the last 10
    return {"starts": starts, "cpu_ms_per_start": round(used / starts * 1e3, 2),
            "wall_ms_per_start": round(wall / starts * 1e3, 2)}


def task_config(root: Path, name: str, command: str, *args: str) -> TaskConfig:
    task_dir = root / "driver" / name
    task_dir.mkdir(parents=True, exist_ok=True)
    return TaskConfig(id=f"driver/{name}/0001", name=name, alloc_id="driver", job_id="j",
                      task_group="g", driver_config={"command": command, "args": list(args)},
                      task_dir=task_dir)


async def driver_only(n: int, root: Path) -> dict[str, float]:
    driver = RawExecDriver()
    wall, used = time.perf_counter(), cpu()
    for i in range(n):
        cfg = task_config(root, f"seq{i}", "/bin/true")
        await driver.start_task(cfg)
        await driver.wait_task(cfg.id)
        await driver.destroy_task(cfg.id, force=True)
    seq_wall, seq_cpu = time.perf_counter() - wall, cpu() - used
    configs = [task_config(root, f"par{i}", "/bin/sleep", "1000") for i in range(n)]
    wall, used = time.perf_counter(), cpu()
    async with trio.open_nursery() as nursery:
        for cfg in configs:
            nursery.start_soon(driver.start_task, cfg)
    par_wall, par_cpu = time.perf_counter() - wall, cpu() - used
    async with trio.open_nursery() as nursery:
        for cfg in configs:
            nursery.start_soon(driver.stop_task, cfg.id, 0, "SIGKILL")
    for cfg in configs:
        await driver.wait_task(cfg.id)
        await driver.destroy_task(cfg.id, force=True)
    return {"sequential_cpu_ms_per_task": round(seq_cpu / n * 1e3, 2),
            "sequential_wall_ms_per_task": round(seq_wall / n * 1e3, 2),
            "concurrent_cpu_ms_per_start": round(par_cpu / n * 1e3, 2),
            "concurrent_wall_s": round(par_wall, 3)}


async def main_async(n: int) -> tuple[dict[str, float], dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="yurt-crashloop-") as tmp:
        return await crash_loop(n, Path(tmp)), await driver_only(n, Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=200, help="starts per measurement (200)")
    args = parser.parse_args()
    loop, only = trio.run(main_async, args.n)
    print(f"crash loop: {loop['starts']} starts, agent CPU {loop['cpu_ms_per_start']} ms/start, "
          f"{loop['wall_ms_per_start']} ms/start wall")
    print(f"driver: start+wait+destroy {only['sequential_cpu_ms_per_task']} ms CPU, "
          f"{only['sequential_wall_ms_per_task']} ms wall; {args.n} concurrent starts "
          f"{only['concurrent_cpu_ms_per_start']} ms CPU each, {only['concurrent_wall_s']} s")
    print(json.dumps({"bench": "crashloop", "n": args.n, "crash_loop": loop, "driver": only}))


if __name__ == "__main__":
    main()

"""/v1/client/...: what this node's client does to and reports about its allocations —
restart, signal, garbage collection, allocation and host resource usage.

These act on a running alloc runner, so they wait until the allocation is restored after an agent
restart (`Context.restored_runner`). The alloc runner's errors are imported inside the handler
that maps them: the API binds before the runners load. A task's usage comes from its driver
when the driver measures it (`StatsDriver`: docker asks the Engine API), else from /proc
directly (a few small files per process, no thread hop; runtime/client/taskusage.py sums a
task's process tree and makes CPU a rate); host stats, which stat the data directory, run in a
worker thread.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, body_field, body_json, json_response
from yurt.runtime.client.drivers.protocol import StatsDriver, TaskUsage
from yurt.runtime.client.taskusage import CpuRate, TreeUsage, tree_usage, uptime
from yurt.runtime.errors import DriverError, TaskNotRunningError, YurtError
from yurt.runtime.lib.signames import parse_signal_name

log = logging.getLogger("yurt.api")


async def alloc_restart(ctx: Context, request: Request) -> Response:
    runner = await ctx.restored_runner(ctx.find_alloc_id(request.path_params["id"]))
    body = await body_json(request)
    task = body_field(body, "TaskName", str, "")
    all_tasks = body_field(body, "AllTasks", bool, False)
    if task and all_tasks:
        raise ApiError(400, "task name cannot be set when restarting all tasks")
    from yurt.runtime.client.allocrunner.interface import AllocRunnerError

    try:
        if task:
            await runner.restart_task(task)
        elif all_tasks:
            await runner.restart_all()
        else:
            await runner.restart_running()
    except TaskNotRunningError as e:
        raise ApiError(400, str(e)) from None
    except AllocRunnerError as e:
        raise ApiError(404 if "Could not find" in str(e) else 400, str(e)) from None
    return json_response({})


async def alloc_signal(ctx: Context, request: Request) -> Response:
    runner = await ctx.restored_runner(ctx.find_alloc_id(request.path_params["id"]))
    body = await body_json(request)
    task = body_field(body, "Task", str, "") or None
    if "Signal" in body and not isinstance(body["Signal"], str):
        raise ApiError(400, '"Signal" must be a signal name such as "SIGHUP"')
    try:
        # Refused here, before any task is touched: a driver sends a name it does not
        # know as SIGINT, which stops most tasks.
        sig = parse_signal_name(body.get("Signal") or "SIGINT")
    except ValueError as e:
        # "invalid signal" leads the message: clients match on it (python-nomad does).
        raise ApiError(400, f"invalid signal: {e}") from None
    try:
        await runner.signal(task, sig)
    except (YurtError, OSError) as e:
        raise ApiError(400, str(e)) from None
    return json_response({})


async def alloc_gc(ctx: Context, request: Request) -> Response:
    alloc_id = ctx.find_alloc_id(request.path_params["id"])
    await ctx.wait_restored(alloc_id)
    if not await ctx.client_side().gc.collect(alloc_id):
        raise ApiError(400, "No such allocation on client, or allocation not eligible "
                            "for GC")
    return json_response({})


async def client_gc(ctx: Context, request: Request) -> Response:
    await ctx.wait_restored()
    await ctx.client_side().gc.collect_all()
    return json_response({})


async def alloc_stats(ctx: Context, request: Request) -> Response:
    """Nomad's `AllocResourceUsage`: per task, what its driver measures when it can
    (`StatsDriver`, e.g. docker's Engine API stats), else the sum over its process tree with
    CPU as a rate (runtime/client/taskusage.py), each process under `Pids`; the
    allocation's total."""
    runner = await ctx.restored_runner(ctx.find_alloc_id(request.path_params["id"]))
    only = request.query_params.get("task")
    if any(r.devices for r in runner.alloc.task_resources.values()):
        await ctx.client_side().devices.refresh_stats()  # only what reserves devices asks
    measured = await driver_usages(runner.task_runners, only)
    now = time.time_ns()
    moment, since_boot, mhz = time.monotonic(), uptime(), core_mhz(ctx)
    tasks: dict[str, Any] = {}
    total = resource_usage(0, CpuRate(0.0, 0.0, 0.0), mhz)
    all_devices: list[dict[str, Any]] = []
    for name, tr in runner.task_runners.items():
        if only and name != only:
            continue
        driver_usage = measured.get(name)
        if driver_usage is not None:
            tree = TreeUsage()
            rate = CpuRate(driver_usage.cpu_percent, driver_usage.cpu_user_mode,
                           driver_usage.cpu_system_mode)
            usage = measured_usage(driver_usage, mhz)
        else:
            pid = int(tr.handle.driver_state.get("pid", 0)) if tr.handle else 0
            tree = tree_usage(pid) if tr.state.state == "running" else TreeUsage()
            rate = ctx.cpu_rates.rate((runner.alloc.id, name), moment, tree, since_boot)
            usage = resource_usage(tree.rss, rate, mhz)
        allocated = runner.alloc.task_resources.get(name)
        usage["DeviceStats"] = device_stats(
            ctx, {(d.vendor, d.type, d.name): set(d.device_ids)
                  for d in (allocated.devices if allocated else [])})
        all_devices += usage["DeviceStats"]
        pids = {}
        for each, process in tree.processes.items():
            one = TreeUsage(process.rss, process.user_ticks, process.system_ticks,
                            process.start_ticks, {each: process})
            pids[str(each)] = resource_usage(
                process.rss, ctx.cpu_rates.rate((runner.alloc.id, f"{name}/{each}"), moment,
                                                one, since_boot), mhz)
        tasks[name] = {"ResourceUsage": usage, "Pids": pids,
                       "Timestamp": driver_usage.timestamp if driver_usage else now}
        total = add_usage(total, usage)
    total["DeviceStats"] = all_devices
    return json_response({"ResourceUsage": total, "Tasks": tasks, "Timestamp": now})


async def driver_usages(task_runners: Mapping[str, Any], only: str | None
                        ) -> dict[str, TaskUsage]:
    """The usage of each running task whose driver measures it (`StatsDriver`), asked of
    all at once (docker's takes a second). A driver that cannot tell (its daemon away, the
    task gone) leaves the task to the process-tree path."""
    found: dict[str, TaskUsage] = {}

    async def ask(name: str, driver: StatsDriver, task_id: str) -> None:
        try:
            usage = await driver.task_usage(task_id)
        except DriverError as e:
            log.debug("stats of task %s from its driver: %s", name, e)
            return
        if usage is not None:
            found[name] = usage

    async with trio.open_nursery() as nursery:
        for name, tr in task_runners.items():
            if only and name != only:
                continue
            if (tr.state.state == "running" and tr.handle is not None
                    and isinstance(tr.driver, StatsDriver)):
                nursery.start_soon(ask, name, tr.driver, tr.handle.task_id)
    return found


def measured_usage(usage: TaskUsage, mhz: float) -> dict[str, Any]:
    """Nomad's `ResourceUsage` of what a driver measured; `TotalTicks` from the percent and
    one core's MHz when the driver did not give them (drivers/docker/util/stats_posix.go)."""
    ticks = usage.cpu_total_ticks or usage.cpu_percent / 100.0 * mhz
    return {"MemoryStats": {"RSS": usage.rss, "Cache": usage.cache, "Swap": usage.swap,
                            "MappedFile": usage.mapped_file, "Usage": usage.usage,
                            "MaxUsage": usage.max_usage, "KernelUsage": usage.kernel_usage,
                            "KernelMaxUsage": usage.kernel_max_usage,
                            "Measured": list(usage.memory_measured)},
            "CpuStats": {"SystemMode": usage.cpu_system_mode, "UserMode": usage.cpu_user_mode,
                         "TotalTicks": ticks, "ThrottledPeriods": usage.cpu_throttled_periods,
                         "ThrottledTime": usage.cpu_throttled_time,
                         "Percent": usage.cpu_percent, "Measured": list(usage.cpu_measured)},
            "DeviceStats": []}


def core_mhz(ctx: Context) -> float:
    """One core's speed as the node fingerprinted it (`cpu.frequency`), 0 if unknown."""
    try:
        return float(ctx.agent.node.attributes.get("cpu.frequency", "0"))
    except ValueError:
        return 0.0


def device_stats(ctx: Context, wanted: dict[tuple[str, str, str], set[str]] | None
                 ) -> list[dict[str, Any]]:
    """Nomad's `DeviceGroupStats`: per group, the cached stats of its instances (only the
    `wanted` instances of the `wanted` groups, when given)."""
    stats = ctx.client_side().devices.stats()
    out = []
    for group in ctx.client_side().devices.all_groups():
        key = (group.vendor, group.type, group.name)
        if wanted is not None and key not in wanted:
            continue
        ids = wanted[key] if wanted is not None else {i.id for i in group.instances}
        instances = {i: {"Summary": stats[i].summary, "Timestamp": stats[i].timestamp}
                     for i in sorted(ids) if i in stats}
        out.append({"Vendor": group.vendor, "Type": group.type, "Name": group.name,
                    "InstanceStats": instances})
    return out


async def client_stats(ctx: Context, request: Request) -> Response:
    stats = await trio.to_thread.run_sync(host_stats, str(ctx.agent.config.data_dir))
    await ctx.client_side().devices.refresh_stats()
    stats["DeviceStats"] = device_stats(ctx, None)
    return json_response(stats)


def add_usage(total: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    """`total` plus one task's `ResourceUsage`, as Nomad sums an allocation's
    (nomad/structs `MemoryStats.Add`, `CpuStats.Add`: every number added, `Measured`
    merged)."""
    summed: dict[str, Any] = {}
    for part in ("MemoryStats", "CpuStats"):
        mine, theirs = total[part], usage[part]
        summed[part] = {key: (sorted(set(mine[key]) | set(theirs[key])) if key == "Measured"
                              else mine[key] + theirs.get(key, 0)) for key in mine}
    return {**total, **summed}


def resource_usage(rss: int, rate: CpuRate, mhz: float) -> dict[str, Any]:
    return {"MemoryStats": {"RSS": rss, "Cache": 0, "Swap": 0, "MappedFile": 0,
                            "Usage": rss, "MaxUsage": 0, "KernelUsage": 0,
                            "KernelMaxUsage": 0, "Measured": ["RSS"]},
            "CpuStats": {"SystemMode": rate.system, "UserMode": rate.user,
                         "TotalTicks": rate.mhz(mhz), "ThrottledPeriods": 0,
                         "ThrottledTime": 0, "Percent": rate.percent,
                         "Measured": ["System Mode", "User Mode", "Percent", "Total Ticks"]},
            "DeviceStats": []}


def host_stats(data_dir: str) -> dict[str, Any]:
    mem: dict[str, int] = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, value = line.split(":", 1)
            mem[key] = int(value.split()[0]) * 1024
    st = os.statvfs(data_dir)
    size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return {"Memory": {"Total": mem.get("MemTotal", 0), "Available": mem.get("MemAvailable", 0),
                       "Used": mem.get("MemTotal", 0) - mem.get("MemAvailable", 0),
                       "Free": mem.get("MemFree", 0)},
            "CPU": [], "DiskStats": [{"Device": "", "Mountpoint": data_dir, "Size": size,
                                      "Used": size - free, "Available": free,
                                      "UsedPercent": 100.0 * (size - free) / size if size else 0,
                                      "InodesUsedPercent": 100.0 * (1 - st.f_favail / st.f_files)
                                      if st.f_files else 0}],
            "AllocDirStats": None, "DeviceStats": [], "Uptime": int(uptime),
            "Timestamp": time.time_ns(), "CPUTicksConsumed": 0.0}

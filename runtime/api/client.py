"""/v1/client/...: what this node's client does to and reports about its allocations —
restart, signal, garbage collection, allocation and host resource usage.

These act on a running alloc runner, so they wait until the allocation is restored after an agent
restart (`Context.restored_runner`). The alloc runner's errors are imported inside the handler
that maps them: the API binds before the runners load. Usage is read from /proc directly (a few
small files, no thread hop); host stats, which stat the data directory, run in a worker thread.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.context import Context
from yurt.runtime.api.request import ApiError, body_field, body_json, json_response
from yurt.runtime.errors import TaskNotRunningError, YurtError
from yurt.runtime.procfs import stat_fields
from yurt.runtime.signames import parse_signal_name


async def alloc_restart(ctx: Context, request: Request) -> Response:
    runner = await ctx.restored_runner(ctx.find_alloc_id(request.path_params["id"]))
    body = await body_json(request)
    task = body_field(body, "TaskName", str, "")
    all_tasks = body_field(body, "AllTasks", bool, False)
    if task and all_tasks:
        raise ApiError(400, "task name cannot be set when restarting all tasks")
    from yurt.runtime.allocrunner.interface import AllocRunnerError

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
    await ctx.agent.restoring.wait(alloc_id)
    if not await ctx.agent.gc.collect(alloc_id):
        raise ApiError(400, "No such allocation on client, or allocation not eligible "
                            "for GC")
    return json_response({})


async def client_gc(ctx: Context, request: Request) -> Response:
    await ctx.agent.restoring.wait()
    await ctx.agent.gc.collect_all()
    return json_response({})


async def alloc_stats(ctx: Context, request: Request) -> Response:
    runner = await ctx.restored_runner(ctx.find_alloc_id(request.path_params["id"]))
    only = request.query_params.get("task")
    if any(r.devices for r in runner.alloc.task_resources.values()):
        await ctx.agent.devices.refresh_stats()  # only what reserves devices asks
    now = time.time_ns()
    tasks: dict[str, Any] = {}
    total_rss = total_ticks = 0.0
    all_devices: list[dict[str, Any]] = []
    for name, tr in runner.task_runners.items():
        if only and name != only:
            continue
        pid = int(tr.handle.driver_state.get("pid", 0)) if tr.handle else 0
        rss, ticks = process_usage(pid)  # /proc only: no thread hop (runtime.procfs)
        usage = resource_usage(rss, ticks)
        allocated = runner.alloc.task_resources.get(name)
        usage["DeviceStats"] = device_stats(
            ctx, {(d.vendor, d.type, d.name): set(d.device_ids)
                  for d in (allocated.devices if allocated else [])})
        all_devices += usage["DeviceStats"]
        tasks[name] = {"ResourceUsage": usage, "Timestamp": now,
                       "Pids": {str(pid): usage} if pid else {}}
        if tr.state.state == "running":
            total_rss, total_ticks = total_rss + rss, total_ticks + ticks
    total = resource_usage(total_rss, total_ticks)
    total["DeviceStats"] = all_devices
    return json_response({"ResourceUsage": total, "Tasks": tasks, "Timestamp": now})


def device_stats(ctx: Context, wanted: dict[tuple[str, str, str], set[str]] | None
                 ) -> list[dict[str, Any]]:
    """Nomad's `DeviceGroupStats`: per group, the cached stats of its instances (only the
    `wanted` instances of the `wanted` groups, when given)."""
    stats = ctx.agent.devices.stats()
    out = []
    for group in ctx.agent.devices.all_groups():
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
    await ctx.agent.devices.refresh_stats()
    stats["DeviceStats"] = device_stats(ctx, None)
    return json_response(stats)


_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def process_usage(pid: int) -> tuple[float, float]:
    """(RSS bytes, CPU ticks user+system) of a process, zeros if it is gone."""
    if pid <= 0:
        return 0.0, 0.0
    try:
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except OSError:
        return 0.0, 0.0
    fields = stat_fields(pid)
    if fields is None:
        return 0.0, 0.0
    return float(rss), float(int(fields[11]) + int(fields[12]))


def resource_usage(rss: float, ticks: float) -> dict[str, Any]:
    return {"MemoryStats": {"RSS": int(rss), "Cache": 0, "Swap": 0, "MappedFile": 0,
                            "Usage": int(rss), "MaxUsage": 0, "KernelUsage": 0,
                            "KernelMaxUsage": 0, "Measured": ["RSS"]},
            "CpuStats": {"SystemMode": 0.0, "UserMode": 0.0, "TotalTicks": ticks,
                         "ThrottledPeriods": 0, "ThrottledTime": 0, "Percent": 0.0,
                         "Measured": ["Total Ticks"]},
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

"""`yurt alloc status ALLOC`, as Nomad's command/alloc_status.go prints it.

The text, top to bottom: the `key = value` header (ID, Eval ID, Name, Node ID, Node Name, Job
ID, Job Version, Client Status, Client Description, Desired Status, Desired Description,
Created, Modified; with a deployment its ID, health and `Canary`; the replacement's ID), the
`Allocation Addresses` table, then per task, prestart tasks first (`sortedTaskStateIterator`):
`Task "web" is "running"`, `Task Resources` (CPU, Memory, Disk, Addresses, with the live
usage from /v1/client/allocation/:id/stats as `used/reserved`, Nomad's `40/100 MHz`),
`Task Events:` (Started At, Finished At, Total Restarts, Last Restart) and `Recent Events:`
(Time, Type, Description, newest first). `-stats` adds each task's `Memory Stats` and
`CPU Stats`; `-verbose` full IDs and times, the placement counts and `Placement Metrics`;
`-short` only ID, Name, Created, Modified and the `Tasks` table (Name, State, Last Event,
Time, Lifecycle). `-json`/`-t` give the allocation; with no ALLOC, every allocation (Nomad's
rule for those two flags).

One deliberate difference: Nomad's `formatAllocNetworkInfo` says "yes" under `Dynamic` for
every port; here a static port (the network's `ReservedPorts`) says "no", since that is the
question the column asks. `-ui` opens the allocation's web UI page (runtime/cli/ui_hint.py).

Exit codes: 0 shown; 1 no such allocation, a refused request or no agent; 2 bad input or an
ambiguous prefix (api_client.py `resolve_alloc`, yurt's rule for every prefix). Stats that
cannot be read are left out (with `-stats`, said on stderr), as Nomad goes on without them.

The formatting functions are pure (API JSON in, text out, "now" given).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import click

from yurt.runtime.cli.output import format_kv, format_list, output_options
from yurt.runtime.cli.statusfmt import (
    format_rfc3339,
    format_time_ns,
    ibytes,
    id_length,
    limit,
    mib,
    pretty_time_diff,
    section,
)
from yurt.runtime.cli.ui_hint import ui_option


def _go_duration(ns: int) -> str:
    """Go's `Duration.String` for the short spans a placement takes ("1.5ms", "120µs")."""
    if ns < 1000:
        return f"{ns}ns"
    for size, unit in ((1_000, "µs"), (1_000_000, "ms"), (1_000_000_000, "s")):
        if ns < size * 1000 or unit == "s":
            return f"{ns / size:.6f}".rstrip("0").rstrip(".") + unit
    return f"{ns}ns"  # pragma: no cover - the loop always returns


def alloc_header(alloc: dict[str, Any], *, verbose: bool, now_ns: int) -> list[tuple[str, str]]:
    """Nomad's `formatAllocBasicInfo`."""
    length = id_length(verbose)
    if verbose:
        created, modified = (format_time_ns(alloc.get("CreateTime")),
                             format_time_ns(alloc.get("ModifyTime")))
    else:
        created, modified = (pretty_time_diff(alloc.get("CreateTime"), now_ns),
                             pretty_time_diff(alloc.get("ModifyTime"), now_ns))
    job = alloc.get("Job") or {}
    pairs = [("ID", alloc["ID"]), ("Eval ID", limit(alloc.get("EvalID") or "", length)),
             ("Name", alloc["Name"]), ("Node ID", limit(alloc.get("NodeID") or "", length)),
             ("Node Name", alloc.get("NodeName") or ""), ("Job ID", alloc["JobID"]),
             ("Job Version", str(job.get("Version", alloc.get("JobVersion") or 0))),
             ("Client Status", alloc["ClientStatus"]),
             ("Client Description", alloc.get("ClientDescription") or ""),
             ("Desired Status", alloc["DesiredStatus"]),
             ("Desired Description", alloc.get("DesiredDescription") or ""),
             ("Created", created), ("Modified", modified)]
    if alloc.get("DeploymentID"):
        status = alloc.get("DeploymentStatus") or {}
        healthy = status.get("Healthy")
        pairs += [("Deployment ID", limit(alloc["DeploymentID"], length)),
                  ("Deployment Health", "unset" if healthy is None
                   else "healthy" if healthy else "unhealthy")]
        if status.get("Canary"):
            pairs.append(("Canary", "true"))
    if alloc.get("NextAllocation"):
        pairs.append(("Replacement Alloc ID", limit(alloc["NextAllocation"], length)))
    if verbose:
        metrics = alloc.get("Metrics") or {}
        pairs += [("Evaluated Nodes", str(metrics.get("NodesEvaluated", 0))),
                  ("Filtered Nodes", str(metrics.get("NodesFiltered", 0))),
                  ("Exhausted Nodes", str(metrics.get("NodesExhausted", 0))),
                  ("Allocation Time", _go_duration(int(metrics.get("AllocationTime", 0)))),
                  ("Failures", str(metrics.get("CoalescedFailures", 0)))]
    return pairs


def addresses_text(alloc: dict[str, Any]) -> str:
    """Nomad's "Allocation Addresses" (`formatAllocNetworkInfo`): every port the group
    holds, `*label` for the group's shared ports, `host:port` (`-> to` when mapped); "" when
    the group has no ports. `Dynamic` is "no" for a static port (module docstring)."""
    shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
    networks = shared.get("Networks") or []
    if not networks or not (networks[0].get("DynamicPorts") or networks[0].get("ReservedPorts")):
        return ""
    nw = networks[0]
    static = {p["Label"] for p in nw.get("ReservedPorts") or []}

    def row(label: str, shown: str, value: int, to: int, host: str) -> list[str]:
        return [shown, "no" if label in static else "yes",
                f"{host}:{value}" + (f" -> {to}" if to > 0 else "")]

    rows = [["Label", "Dynamic", "Address"]]
    if shared.get("Ports"):
        rows += [row(p["Label"], "*" + p["Label"], p["Value"], p.get("To", 0), p["HostIP"])
                 for p in shared["Ports"]]
    else:
        rows += [row(p["Label"], p["Label"], p["Value"], p.get("To", 0), nw.get("IP", ""))
                 for p in (nw.get("DynamicPorts") or []) + (nw.get("ReservedPorts") or [])]
    mode = f' (mode = "{nw["Mode"]}")' if nw.get("Mode") else ""
    return f"Allocation Addresses{mode}:\n{format_list(rows)}"


def _lifecycles(alloc: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    group: dict[str, Any] = next((g for g in (alloc.get("Job") or {}).get("TaskGroups") or []
                                  if g.get("Name") == alloc.get("TaskGroup")), {})
    return {t["Name"]: t.get("Lifecycle") for t in group.get("Tasks") or []}


def lifecycle_name(lifecycle: dict[str, Any] | None) -> str:
    """Nomad's `lifecycleDisplayName`: "main", or the hook (and " sidecar")."""
    if not lifecycle or not lifecycle.get("Hook"):
        return "main"
    return str(lifecycle["Hook"]) + (" sidecar" if lifecycle.get("Sidecar") else "")


def task_order(alloc: dict[str, Any]) -> list[str]:
    """Nomad's `sortedTaskStateIterator`: by name, then lifecycle tasks first, and among
    them the ones that are not sidecars."""
    lifecycles = _lifecycles(alloc)

    def rank(name: str) -> int:
        lc = lifecycles.get(name)
        if not lc or not lc.get("Hook"):
            return 2
        return 1 if lc.get("Sidecar") else 0

    return sorted(sorted(alloc.get("TaskStates") or {}), key=rank)


def task_resources_text(alloc: dict[str, Any], task: str, usage: dict[str, Any] | None) -> str:
    """Nomad's `outputTaskResources`: the task's reservation, with its live usage
    (`usage`: the task's `ResourceUsage` from the stats endpoint) as `used/reserved`."""
    allocated = (alloc.get("AllocatedResources") or {}).get("Tasks") or {}
    if task not in allocated:
        return ""
    res = allocated[task]
    cores = len((res.get("Cpu") or {}).get("ReservedCores") or [])
    cpu_header = f"CPU ({cores} cores)" if cores else "CPU"
    addresses = [f"{p['Label']}: {nw.get('IP', '')}:{p['Value']}"
                 for nw in res.get("Networks") or []
                 for p in (nw.get("DynamicPorts") or []) + (nw.get("ReservedPorts") or [])]
    cpu = str((res.get("Cpu") or {}).get("CpuShares", 0))
    memory_mb = (res.get("Memory") or {}).get("MemoryMB", 0)
    memory = mib(memory_mb)
    max_mb = (res.get("Memory") or {}).get("MemoryMaxMB") or 0
    memory_max = f"Max: {mib(max_mb)}" if max_mb and max_mb != memory_mb else ""
    if usage:
        cpu_stats, mem_stats = usage.get("CpuStats"), usage.get("MemoryStats")
        if cpu_stats:
            cpu = f"{math.floor(cpu_stats.get('TotalTicks', 0))}/{cpu}"
        if mem_stats:
            used = mem_stats.get("RSS", 0)
            if not used and "RSS" not in (mem_stats.get("Measured") or []):
                used = mem_stats.get("Usage", 0)
            memory = f"{ibytes(used)}/{memory}"
    disk = mib(((alloc.get("AllocatedResources") or {}).get("Shared") or {}).get("DiskMB", 0))
    rows = [[cpu_header, "Memory", "Disk", "Addresses"],
            [f"{cpu} MHz", memory, disk, addresses[0] if addresses else ""]]
    if memory_max or len(addresses) > 1:
        rows.append(["", memory_max, "", addresses[1] if len(addresses) > 1 else ""])
    rows += [["", "", "", a] for a in addresses[2:]]
    return "Task Resources:\n" + format_list(rows)


def verbose_usage_text(usage: dict[str, Any]) -> str:
    """Nomad's `outputVerboseResourceUsage` (`-stats`): `Memory Stats` and `CPU Stats`,
    the measured values only."""
    parts: list[str] = []
    memory = usage.get("MemoryStats") or {}
    names = {"RSS": "RSS", "Cache": "Cache", "Swap": "Swap", "Usage": "Usage",
             "Max Usage": "MaxUsage", "Kernel Usage": "KernelUsage",
             "Kernel Max Usage": "KernelMaxUsage"}
    measured = sorted(m for m in memory.get("Measured") or [] if m in names)
    if measured:
        parts.append("Memory Stats\n" + format_list(
            [measured, [ibytes(memory.get(names[m], 0)) for m in measured]]))
    cpu = usage.get("CpuStats") or {}
    percent = {"Percent": "Percent", "User Mode": "UserMode", "System Mode": "SystemMode"}
    plain = {"Throttled Periods": "ThrottledPeriods", "Throttled Time": "ThrottledTime"}
    measured = sorted(m for m in cpu.get("Measured") or [] if m in percent or m in plain)
    if measured:
        values = [f"{cpu.get(percent[m], 0):.2f}%" if m in percent else str(cpu.get(plain[m], 0))
                  for m in measured]
        parts.append("CPU Stats\n" + format_list([measured, values]))
    return "\n\n".join(parts)


def task_events_text(state: dict[str, Any]) -> str:
    """Nomad's `outputTaskStatus`: `Task Events:` and `Recent Events:`, newest first."""
    head = format_kv([("Started At", format_rfc3339(state.get("StartedAt"), "N/A")),
                      ("Finished At", format_rfc3339(state.get("FinishedAt"), "N/A")),
                      ("Total Restarts", str(state.get("Restarts", 0))),
                      ("Last Restart", format_rfc3339(state.get("LastRestart"), "N/A"))])
    rows = [[format_time_ns(e.get("Time")), e.get("Type", ""),
             e.get("DisplayMessage") or e.get("Message") or ""]
            for e in reversed(state.get("Events") or [])]
    return (f"Task Events:\n{head}\n\nRecent Events:\n"
            + format_list([["Time", "Type", "Description"], *rows]))


def short_tasks_text(alloc: dict[str, Any]) -> str:
    """Nomad's `shortTaskStatus`: the `Tasks` table, one row per task."""
    lifecycles = _lifecycles(alloc)
    rows = [["Name", "State", "Last Event", "Time", "Lifecycle"]]
    for name in task_order(alloc):
        state = alloc["TaskStates"][name]
        events = state.get("Events") or []
        last = events[-1] if events else {}
        rows.append([name, state["State"], last.get("Type", ""), format_time_ns(last.get("Time")),
                     lifecycle_name(lifecycles.get(name))])
    return section("Tasks", format_list(rows))


def alloc_detail_text(alloc: dict[str, Any], stats: dict[str, Any] | None, *,
                      short: bool = False, verbose: bool = False, show_stats: bool = False,
                      now_ns: int | None = None) -> str:
    """`alloc status ALLOC`'s whole text (module docstring). Pure: `now_ns` defaults to the
    clock only when not given; `stats` is the stats endpoint's answer, or None."""
    from yurt.runtime.cli.evalfmt import format_alloc_metrics

    now_ns = time.time_ns() if now_ns is None else now_ns
    if short:
        info = format_kv([("ID", alloc["ID"]), ("Name", alloc["Name"]),
                          ("Created", pretty_time_diff(alloc.get("CreateTime"), now_ns)),
                          ("Modified", pretty_time_diff(alloc.get("ModifyTime"), now_ns))])
        return info + short_tasks_text(alloc)
    out = format_kv(alloc_header(alloc, verbose=verbose, now_ns=now_ns))
    addresses = addresses_text(alloc)
    if addresses:
        out += f"\n\n{addresses}"
    lifecycles = _lifecycles(alloc)
    task_usage = (stats or {}).get("Tasks") or {}
    for name in task_order(alloc):
        state = alloc["TaskStates"][name]
        lc = lifecycles.get(name)
        indicator = f" ({lifecycle_name(lc)})" if lc and lc.get("Hook") else ""
        out += f'\n\nTask "{name}"{indicator} is "{state["State"]}"'
        usage = (task_usage.get(name) or {}).get("ResourceUsage")
        resources = task_resources_text(alloc, name, usage)
        if resources:
            out += "\n" + resources
            if show_stats and usage:
                detail = verbose_usage_text(usage)
                if detail:
                    out += "\n\n" + detail
        out += "\n\n" + task_events_text(state)
    if verbose:
        metrics = alloc.get("Metrics")
        lines = format_alloc_metrics(metrics) if metrics else ["  (none recorded)"]
        out += section("Placement Metrics", "\n".join(lines))
    return out


def alloc_status(alloc_id: str | None, *, json_output: bool = False, template: str = "",
                 short: bool = False, verbose: bool = False, show_stats: bool = False) -> None:
    """`yurt alloc status [ALLOC]` (see the module docstring)."""
    from yurt.runtime.cli.api_client import api, call, resolve_alloc
    from yurt.runtime.cli.output import check_format, echo, emit, fail
    from yurt.runtime.cli.ui_hint import ui_hint
    from yurt.runtime.errors import EXIT_USAGE

    check_format(json_output, template)
    if alloc_id is None and not (json_output or template):
        fail("This command takes one of the following argument conditions:\n"
             " * A single <allocation>\n * No arguments, with output format specified",
             EXIT_USAGE)
    stats: dict[str, Any] | None = None
    with api() as client:
        if alloc_id is None:
            allocs = call(client, "GET", "/v1/allocations")
            emit(allocs, json_output, template, lambda: None)
            return
        full_id = resolve_alloc(client, alloc_id)
        alloc = call(client, "GET", f"/v1/allocation/{full_id}")
        if not (json_output or template or short):
            response = client.request("GET", f"/v1/client/allocation/{full_id}/stats")
            if response.status_code == 200:
                stats = response.json()
            elif show_stats:
                echo(f"Couldn't retrieve stats: {response.text.strip()}", err=True)
    emit(alloc, json_output, template, lambda: echo(alloc_detail_text(
        alloc, stats, short=short, verbose=verbose, show_stats=show_stats)))
    if not (json_output or template):
        ui_hint("alloc status", allocID=full_id)


def register(alloc_group: click.Group) -> None:
    """Add `alloc status` to the `alloc` group (called from runtime/cli/__init__.py)."""

    @alloc_group.command("status")
    @click.argument("alloc_id", metavar="ALLOC", required=False)
    @click.option("-short", "--short", "short", is_flag=True,
                  help="Only the header's times and each task's last event.")
    @click.option("-verbose", "--verbose", "verbose", is_flag=True,
                  help="Full IDs and times, and the placement metrics.")
    @click.option("-stats", "--stats", "show_stats", is_flag=True,
                  help="Each task's detailed memory and CPU usage.")
    @ui_option
    @output_options
    def alloc_status_command(alloc_id: str | None, short: bool, verbose: bool,
                             show_stats: bool, json_output: bool, template: str) -> None:
        """An allocation: its placement, addresses, and each task's resources, usage and
        recent events, as Nomad's `alloc status`."""
        alloc_status(alloc_id, json_output=json_output, template=template, short=short,
                     verbose=verbose, show_stats=show_stats)


__all__: Sequence[str] = ("alloc_detail_text", "alloc_status", "register")

"""/v1/metrics: the client's gauges Nomad exports, as Nomad's JSON or Prometheus text.

Gauges, with Nomad's names and labels (client/client.go, client/allocrunner/taskrunner):
- `nomad.client.allocations.{running,pending,blocked,migrating,terminal}`: this client's
  allocations by state (blocked: waiting for a previous or preempted allocation to stop);
- `nomad.client.host.memory.{total,available,used,free}`, `nomad.client.host.cpu.{user,system,
  idle,total}` per CPU (percent of the time since the previous scrape, or since boot on the
  first), `nomad.client.host.disk.{size,used,available,used_percent,inodes_percent}` for the
  data dir's file system, `nomad.client.uptime`, `nomad.client.{allocated,unallocated}.{cpu,
  memory}` (MHz, MB: what live allocations reserve, what is left);
- `nomad.client.allocs.memory.{rss,usage,allocated}` and `nomad.client.allocs.cpu.{total_ticks,
  total_percent,allocated}` per running task, labelled `alloc_id`, `job`, `task_group`, `task`,
  `namespace`.
Node gauges carry `node_id`, `datacenter`, `node_class` (`none` when unset) and `node_pool`.

`?format=prometheus` answers the text exposition format (names with `_` for `.`, a `# TYPE`
line per family); anything else the JSON of Nomad's in-memory sink: `{Timestamp, Gauges,
Points, Counters, Samples}`. Reading takes a few /proc files and one statvfs, in a worker
thread; the previous CPU sample is kept per agent so percentages cover the scrape interval.
"""

from __future__ import annotations

import os
import time
import weakref
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import trio
from starlette.requests import Request
from starlette.responses import Response

from yurt.runtime.api.client import host_stats
from yurt.runtime.api.context import Context
from yurt.runtime.api.request import json_response
from yurt.runtime.api.view import AgentView
from yurt.runtime.client.taskusage import tree_usage
from yurt.runtime.structs import is_client_terminal

Labels = dict[str, str]
_TICKS_PER_S = float(os.sysconf("SC_CLK_TCK"))


@dataclass
class _Samples:
    """What the previous scrape saw: per-CPU jiffies and per-task CPU ticks, with when."""

    cpus: dict[str, list[int]] = field(default_factory=dict)
    tasks: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)


_previous: weakref.WeakKeyDictionary[AgentView, _Samples] = weakref.WeakKeyDictionary()


def _cpu_jiffies() -> dict[str, list[int]]:
    """/proc/stat: per CPU, (user+nice, system+irq+softirq, idle+iowait, total)."""
    out: dict[str, list[int]] = {}
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if not parts or not parts[0].startswith("cpu") or parts[0] == "cpu":
            continue
        v = [int(x) for x in parts[1:9]] + [0] * max(0, 8 - len(parts[1:9]))
        user, system, idle = v[0] + v[1], v[2] + v[5] + v[6], v[3] + v[4]
        out[parts[0]] = [user, system, idle, sum(v)]
    return out


def _cpu_gauges(now: dict[str, list[int]], before: dict[str, list[int]], base: Labels
                ) -> list[tuple[str, float, Labels]]:
    gauges: list[tuple[str, float, Labels]] = []
    for cpu, values in sorted(now.items()):
        prev = before.get(cpu, [0, 0, 0, 0])
        delta = [a - b for a, b in zip(values, prev, strict=True)]
        total = delta[3] or 1
        user, system, idle = (100.0 * d / total for d in delta[:3])
        labels = {**base, "cpu": cpu}
        gauges += [("nomad.client.host.cpu.user", user, labels),
                   ("nomad.client.host.cpu.system", system, labels),
                   ("nomad.client.host.cpu.idle", idle, labels),
                   ("nomad.client.host.cpu.total", 100.0 - idle, labels)]
    return gauges


def collect(ctx: Context, host: dict[str, Any], cpus: dict[str, list[int]]
            ) -> list[tuple[str, float, Labels]]:
    """Every gauge: (Nomad's name, value, labels)."""
    agent = ctx.agent
    node = agent.node
    base = {"node_id": node.id, "datacenter": node.datacenter,
            "node_class": node.node_class or "none", "node_pool": node.node_pool}
    samples = _previous.setdefault(agent, _Samples())
    counts = dict.fromkeys(("running", "pending", "blocked", "migrating", "terminal"), 0)
    gauges: list[tuple[str, float, Labels]] = []
    wall = time.monotonic()
    seen: dict[tuple[str, str], tuple[float, float]] = {}
    from yurt.runtime.client.allocrunner.runner import real

    for any_runner in list(ctx.runners().values()):
        if (runner := real(any_runner)) is None:
            continue
        view = runner.alloc_state()
        if is_client_terminal(view.client_status):
            counts["terminal"] += 1
        elif runner.watcher.waiting:
            counts["blocked"] += 1
        elif view.client_status == "running":
            counts["running"] += 1
        else:
            counts["pending"] += 1
        alloc = runner.alloc
        for name, tr in runner.task_runners.items():
            if tr.state.state != "running" or tr.handle is None:
                continue
            pid = int(tr.handle.driver_state.get("pid", 0))
            tree = tree_usage(pid)  # the task's processes, its shell's children too
            rss, ticks = float(tree.rss), float(tree.ticks)
            labels = {"alloc_id": alloc.id, "job": alloc.job_id,
                      "task_group": alloc.task_group, "task": name,
                      "namespace": alloc.namespace}
            before = samples.tasks.get((alloc.id, name))
            seen[(alloc.id, name)] = (wall, ticks)
            percent = 0.0
            if before is not None and wall > before[0]:
                percent = 100.0 * (ticks - before[1]) / _TICKS_PER_S / (wall - before[0])
            allocated = alloc.task_resources.get(name)
            gauges += [
                ("nomad.client.allocs.memory.rss", rss, labels),
                ("nomad.client.allocs.memory.usage", rss, labels),
                ("nomad.client.allocs.memory.allocated",
                 float((allocated.memory_mb if allocated else 0) * 1024 * 1024), labels),
                ("nomad.client.allocs.cpu.total_ticks", ticks, labels),
                ("nomad.client.allocs.cpu.total_percent", max(percent, 0.0), labels),
                ("nomad.client.allocs.cpu.allocated",
                 float(allocated.cpu_shares if allocated else 0), labels)]
    samples.tasks = seen
    head = [(f"nomad.client.allocations.{state}", float(n), base)
            for state, n in counts.items()]
    memory = host["Memory"]
    head += [(f"nomad.client.host.memory.{k.lower()}", float(memory[k]), base)
             for k in ("Total", "Available", "Used", "Free")]
    head += _cpu_gauges(cpus, samples.cpus, base)
    samples.cpus = cpus
    for disk in host["DiskStats"]:
        labels = {**base, "disk": disk["Device"] or disk["Mountpoint"]}
        head += [("nomad.client.host.disk.size", float(disk["Size"]), labels),
                 ("nomad.client.host.disk.used", float(disk["Used"]), labels),
                 ("nomad.client.host.disk.available", float(disk["Available"]), labels),
                 ("nomad.client.host.disk.used_percent", float(disk["UsedPercent"]), labels),
                 ("nomad.client.host.disk.inodes_percent", float(disk["InodesUsedPercent"]),
                  labels)]
    head.append(("nomad.client.uptime", float(host["Uptime"]), base))
    head += _allocated(agent, base)
    return head + gauges


def _allocated(agent: AgentView, base: Labels) -> list[tuple[str, float, Labels]]:
    """`nomad.client.{allocated,unallocated}.{cpu,memory}`: what the server's live
    allocations on this node reserve, and what is left of the node's capacity."""
    cpu = memory = 0
    for alloc in agent.server.allocs_for_node():
        if alloc.is_terminal():
            continue
        for resources in alloc.task_resources.values():
            cpu += resources.cpu_shares
            memory += resources.memory_mb
    total = agent.node.node_resources
    return [("nomad.client.allocated.cpu", float(cpu), base),
            ("nomad.client.allocated.memory", float(memory), base),
            ("nomad.client.unallocated.cpu", float(total.cpu.cpu_shares - cpu), base),
            ("nomad.client.unallocated.memory", float(total.memory.memory_mb - memory), base)]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(gauges: list[tuple[str, float, Labels]]) -> str:
    """The text exposition format: one `# TYPE` per family, then its samples."""
    families: dict[str, list[str]] = {}
    for name, value, labels in gauges:
        metric = name.replace(".", "_").replace("-", "_")
        rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        families.setdefault(metric, []).append(
            f"{metric}{{{rendered}}} {value!r}" if rendered else f"{metric} {value!r}")
    lines: list[str] = []
    for metric, samples in families.items():
        lines += [f"# HELP {metric} {metric}", f"# TYPE {metric} gauge", *samples]
    return "\n".join(lines) + "\n"


def _go_time(now: float) -> str:
    """Go's `time.Time.String()` of the sink's interval start (10 s intervals)."""
    start = datetime.fromtimestamp(now - now % 10, tz=UTC)
    return start.strftime("%Y-%m-%d %H:%M:%S +0000 UTC")


async def metrics(ctx: Context, request: Request) -> Response:
    data_dir = str(ctx.agent.config.data_dir)

    def read() -> tuple[dict[str, Any], dict[str, list[int]]]:
        return host_stats(data_dir), _cpu_jiffies()

    host, cpus = await trio.to_thread.run_sync(read)
    gauges = collect(ctx, host, cpus)
    if request.query_params.get("format") == "prometheus":
        return Response(prometheus_text(gauges),
                        media_type="text/plain; version=0.0.4; charset=utf-8")
    return json_response({
        "Timestamp": _go_time(time.time()),
        "Gauges": [{"Name": n, "Value": v, "Labels": labels} for n, v, labels in gauges],
        "Points": [], "Counters": [], "Samples": []})

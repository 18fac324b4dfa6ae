"""A container's resource usage from the Engine API's stats (`/containers/ID/stats`), as
Nomad's drivers/docker/util/stats_posix.go `DockerStatsToTaskResourceUsage` computes it.

`usage_from_stats` is the pure part (one stats answer in, a `TaskUsage` out):
- memory: `rss` and `cache` from the cgroup's memory.stat (`rss`/`cache` under cgroup v1,
  `anon`/`file` under v2), `swap`, `file_mapped`, the cgroup's `usage` and `max_usage`;
  what is measured is Nomad's v1 list, or its v2 list when `max_usage` is absent (Nomad's
  heuristic: v2 has no max usage);
- CPU: `percent` of one core, Nomad's util.go `CalculateCPUPercent`: the container's CPU time
  over the host's between the answer's two samples (`precpu_stats`, `cpu_stats`), times the
  cores; `system_mode`/`user_mode` likewise over the container's own total; throttling from
  `throttling_data`. The total ticks (MHz) are `percent / 100` × one core's MHz, which the
  caller knows (runtime/api/client.py `alloc_stats` fills them in).

`container_usage` asks with `stream=false`: the daemon takes two samples a second apart
(so the call takes about a second) and answers once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Final

from yurt.runtime.client.drivers.docker.engine import DockerEngine
from yurt.runtime.client.drivers.docker.logcopier import timestamp_ns
from yurt.runtime.client.drivers.protocol import TaskUsage

#: Nomad's stats_posix.go `DockerMeasuredCPUStats` and the memory lists.
MEASURED_CPU: Final = ("Throttled Periods", "Throttled Time", "Percent")
MEASURED_MEMORY_V1: Final = ("RSS", "Cache", "Swap", "Usage", "Max Usage")
MEASURED_MEMORY_V2: Final = ("RSS", "Cache", "Swap", "Usage")
STATS_TIMEOUT: Final = 10.0


def _int(mapping: object, *keys: str) -> int:
    """The integer at `keys` down nested mappings, 0 when absent or not a number."""
    value: object = mapping
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return int(value) if isinstance(value, (int, float)) else 0


def cpu_percent(new: int, old: int, new_total: int, old_total: int, cores: int) -> float:
    """Nomad's drivers/docker/util/util.go `CalculateCPUPercent`."""
    if new <= old or new_total <= old_total:
        return 0.0
    return (new - old) / (new_total - old_total) * cores * 100.0


def _cores(stats: Mapping[str, Any]) -> int:
    online = _int(stats, "cpu_stats", "online_cpus")
    if online:
        return online
    per_cpu = stats.get("cpu_stats", {}).get("cpu_usage", {}).get("percpu_usage")
    return len(per_cpu) if isinstance(per_cpu, list) and per_cpu else os.cpu_count() or 1


def usage_from_stats(stats: Mapping[str, Any], cores: int | None = None) -> TaskUsage:
    """One stats answer as a `TaskUsage` (see the module's docstring); `cores` defaults to
    the daemon's `online_cpus`."""
    memory = stats.get("memory_stats") or {}
    mem_stat = memory.get("stats") or {}
    usage, max_usage = _int(memory, "usage"), _int(memory, "max_usage")
    cores = cores or _cores(stats)
    cpu, pre = stats.get("cpu_stats") or {}, stats.get("precpu_stats") or {}
    total, pre_total = _int(cpu, "cpu_usage", "total_usage"), _int(pre, "cpu_usage",
                                                                    "total_usage")
    try:
        read = timestamp_ns(str(stats["read"]).encode())
    except (KeyError, ValueError, IndexError):
        read = time.time_ns()
    return TaskUsage(
        rss=_int(mem_stat, "rss") or _int(mem_stat, "anon"),
        cache=_int(mem_stat, "cache") or _int(mem_stat, "file"),
        swap=_int(mem_stat, "swap"),
        mapped_file=_int(mem_stat, "file_mapped"),
        usage=usage, max_usage=max_usage,
        memory_measured=MEASURED_MEMORY_V2 if max_usage == 0 and usage != 0
        else MEASURED_MEMORY_V1,
        cpu_percent=cpu_percent(total, pre_total, _int(cpu, "system_cpu_usage"),
                                _int(pre, "system_cpu_usage"), cores),
        cpu_system_mode=cpu_percent(_int(cpu, "cpu_usage", "usage_in_kernelmode"),
                                    _int(pre, "cpu_usage", "usage_in_kernelmode"),
                                    total, pre_total, cores),
        cpu_user_mode=cpu_percent(_int(cpu, "cpu_usage", "usage_in_usermode"),
                                  _int(pre, "cpu_usage", "usage_in_usermode"),
                                  total, pre_total, cores),
        cpu_throttled_periods=_int(cpu, "throttling_data", "throttled_periods"),
        cpu_throttled_time=_int(cpu, "throttling_data", "throttled_time"),
        cpu_measured=MEASURED_CPU,
        timestamp=read)


async def container_usage(engine: DockerEngine, container_id: str) -> TaskUsage:
    """The container's usage now (one `/containers/ID/stats?stream=false`, about a second).

    Raises:
        DockerError: the daemon refused (e.g. no such container); DockerUnreachable.
    """
    stats = await engine.request("GET", f"/containers/{container_id}/stats",
                                 params={"stream": "false"}, read_timeout=STATS_TIMEOUT)
    return usage_from_stats(stats if isinstance(stats, Mapping) else {})

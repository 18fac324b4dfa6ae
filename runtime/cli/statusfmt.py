"""The pieces every Nomad status output shares: times, sizes, IDs and the allocations table.

Nomad's status verbs (command/job_status.go, alloc_status.go, node_status.go) print the same
few things the same way: times as ISO 8601 in the local zone (`formatTime`, blank for the
zero time), ages as the two largest units (`prettyTimeDiff`: "5m3s ago"), sizes in binary
units (go-humanize `IBytes`: "64 MiB"), IDs cut to 8 characters unless `-verbose`
(`limit`), and allocations as one table (`formatAllocListStubs`). They live here once, so
`job status`, `alloc status`, `node status` and `status` print them alike.

Invariants: every function is pure (API JSON in, text out); "now" is a parameter, never read
here, so tests fix it; the module imports nothing of yurt beyond output.py's `format_list`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from yurt.runtime.cli.output import format_list

#: Nomad's `shortId` and `fullId` (command/meta.go).
SHORT_ID: Final = 8
FULL_ID: Final = 36

#: Go's zero time, as the API writes an unset time (`0001-01-01T00:00:00Z`).
_ZERO_YEAR: Final = 1


def id_length(verbose: bool) -> int:
    """How much of an ID to show: Nomad's `fullId` with `-verbose`, else `shortId`."""
    return FULL_ID if verbose else SHORT_ID


def limit(text: str, length: int) -> str:
    """Nomad's `limit` (command/helpers.go)."""
    return text[:length]


def _iso(moment: datetime) -> str:
    """Go's "2006-01-02T15:04:05Z07:00": `Z` for UTC, else the offset with a colon."""
    local = moment.astimezone()
    offset = local.utcoffset()
    if not offset:
        return local.strftime("%Y-%m-%dT%H:%M:%SZ")
    text = local.strftime("%Y-%m-%dT%H:%M:%S%z")
    return f"{text[:-2]}:{text[-2:]}"


def format_time_ns(ns: int | None) -> str:
    """Nomad's `formatUnixNanoTime`: "" before 1970-01-01T00:00:01 (an unset time)."""
    if not ns or ns < 1_000_000_000:
        return ""
    return _iso(datetime.fromtimestamp(ns / 1e9, tz=UTC))


def parse_rfc3339(text: str | None) -> datetime | None:
    """An API time string as a datetime; None for Go's zero time, "" or an unreadable one."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.year <= _ZERO_YEAR:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def format_rfc3339(text: str | None, zero: str = "") -> str:
    """Nomad's `formatTime` of an API time string; `zero` for an unset one (`formatTaskTimes`
    says "N/A")."""
    moment = parse_rfc3339(text)
    return zero if moment is None else _iso(moment)


_UNITS: Final = ((60, "s"), (60, "m"), (24, "h"), (30, "d"), (12, "mo"))


def pretty_time_diff(first_ns: int | None, now_ns: int) -> str:
    """Nomad's `prettyTimeDiff`: the two largest units of the distance, "ago" or "from now";
    "" for an unset time."""
    if not first_ns:
        return ""
    first, now = round(first_ns / 1e9), round(now_ns / 1e9)
    suffix = "ago" if now >= first else "from now"
    left = abs(now - first)
    parts: list[str] = []
    for size, unit in _UNITS:
        left, value = divmod(left, size)
        if value:
            parts.append(f"{value}{unit}")
        if not left:
            break
    else:
        if left:
            parts.append(f"{left}y")
    if not parts:
        return f"0s {suffix}"
    return "".join(reversed(parts[-2:])) + f" {suffix}"


_IEC: Final = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def ibytes(n: int | float) -> str:
    """go-humanize's `IBytes`: "9 B", "1.5 KiB", "64 MiB"."""
    size = int(n)
    if size < 10:
        return f"{max(size, 0)} B"
    exponent = min(math.floor(math.log(size, 1024)), len(_IEC) - 1)
    value = math.floor(size / 1024**exponent * 10 + 0.5) / 10
    return f"{value:.1f} {_IEC[exponent]}" if value < 10 else f"{value:.0f} {_IEC[exponent]}"


def mib(megabytes: int | float) -> str:
    """A size given in MB (Nomad's resources) as `IBytes` prints it."""
    return ibytes(int(megabytes) * 1024 * 1024)


def alloc_version(alloc: dict[str, Any]) -> int:
    """The job version an allocation runs: the stub's `JobVersion`, or its job's `Version`."""
    if alloc.get("JobVersion") is not None:
        return int(alloc["JobVersion"])
    return int((alloc.get("Job") or {}).get("Version") or 0)


def alloc_table(allocs: Sequence[dict[str, Any]], *, verbose: bool, length: int, now_ns: int,
                node_name: bool = True) -> str:
    """Nomad's `formatAllocListStubs` (and, with `node_name=False`, `formatAllocList`, whose
    verbose table has no Node Name): "No allocations placed" for none. Verbose tables show
    times in full, the others as ages."""
    if not allocs:
        return "No allocations placed"
    if verbose:
        header = ["ID", "Eval ID", "Node ID", *(["Node Name"] if node_name else []),
                  "Task Group", "Version", "Desired", "Status", "Created", "Modified"]
        rows = [[limit(a["ID"], length), limit(a.get("EvalID") or "", length),
                 limit(a.get("NodeID") or "", length),
                 *([a.get("NodeName") or ""] if node_name else []),
                 a.get("TaskGroup") or "", str(alloc_version(a)), a["DesiredStatus"],
                 a["ClientStatus"], format_time_ns(a.get("CreateTime")),
                 format_time_ns(a.get("ModifyTime"))] for a in allocs]
    else:
        header = ["ID", "Node ID", "Task Group", "Version", "Desired", "Status", "Created",
                  "Modified"]
        rows = [[limit(a["ID"], length), limit(a.get("NodeID") or "", length),
                 a.get("TaskGroup") or "", str(alloc_version(a)), a["DesiredStatus"],
                 a["ClientStatus"], pretty_time_diff(a.get("CreateTime"), now_ns),
                 pretty_time_diff(a.get("ModifyTime"), now_ns)] for a in allocs]
    return format_list([header, *rows])


def alloc_list(allocs: Sequence[dict[str, Any]], verbose: bool, length: int) -> str:
    """`alloc_table` as of now: the monitors' and the job verbs' allocation list."""
    import time

    return alloc_table(allocs, verbose=verbose, length=length, now_ns=time.time_ns())


def section(title: str, body: str) -> str:
    """A status section as Nomad prints it, to append to the text before it: a blank line,
    the heading, the body."""
    return f"\n\n{title}\n{body}"

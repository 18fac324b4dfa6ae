"""`yurt node status [-self | NODE]`, as Nomad's command/node_status.go prints it.

No NODE and no `-self`: the node list, `ID Node Pool DC Name Class Drain Eligibility Status`
(`-verbose` adds Address and Version and shows whole IDs, `-allocs` a `Running Allocs`
column, `-os` an `OS` column, `-quiet` only the IDs), or "No nodes registered". `-json`/`-t`
format the list the API gives (Nomad's node stubs).

`-self` or NODE (an ID or a unique prefix): the node's `key = value` header (ID, Name, Node
Pool, Class, DC, Drain, Eligibility, Status, CSI Controllers, CSI Drivers, Uptime, Host
Volumes, Host Networks, CSI Volumes, Driver Status; yurt adds `Tasks`, how many tasks the
agent's open-file limit leaves room for), then `Node Events`, `Allocated Resources`,
`Allocation Resource Utilization`, `Host Resource Utilization`, yurt's `Devices` table when
the node has devices, and `Allocations`. `-verbose` moves the host volumes and drivers into
sections of their own (`Host Volumes`, `Drivers`: Driver, Detected, Healthy, Message, Time)
and ends with `Attributes` and `Meta`; `-stats` adds `CPU Stats`, `Memory Stats` and `Disk
Stats`; `-short` stops after the header (with the drivers' names) and the allocations.
`-json`/`-t` format the node. The list takes Nomad's `-filter`, `-per-page` and `-page-token`
(runtime/cli/paging.py), and ends with Nomad's "Results have been paginated" footer when a
next page exists.

What the agent says its operator must hear (`/v1/agent/self` `Warnings`) goes to stderr
before human output, so a listing on stdout stays a listing.

Exit codes: 0 shown; 1 no such node, a refused request or no agent; 2 bad input, or a prefix
several nodes share (yurt's rule for every prefix; Nomad exits 1 there).

The formatting functions are pure (API JSON in, text out, "now" given).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from yurt.runtime.cli.output import format_kv, format_list, output_options
from yurt.runtime.cli.paging import filter_option, page_options
from yurt.runtime.cli.statusfmt import (
    alloc_table,
    format_rfc3339,
    ibytes,
    id_length,
    limit,
    mib,
    parse_rfc3339,
    section,
)
from yurt.runtime.cli.ui_hint import ui_option

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection


def node_list_text(nodes: Sequence[dict[str, Any]], *, verbose: bool = False,
                   running: dict[str, int] | None = None, show_os: bool = False,
                   quiet: bool = False) -> str:
    """Nomad's node list (`NodeStatusCommand.Run` without a node): `running` is the count
    of running allocations per node ID, for `-allocs`."""
    if not nodes:
        return "No nodes registered"
    if quiet:
        return "\n".join(n["ID"] for n in nodes)
    length = id_length(verbose)
    header = ["ID", "Node Pool", "DC", "Name", "Class", *(["OS"] if show_os else []),
              *(["Address", "Version"] if verbose else []), "Drain", "Eligibility", "Status",
              *(["Running Allocs"] if running is not None else [])]
    rows = [header]
    for n in nodes:
        rows.append([limit(n["ID"], length), n.get("NodePool") or "", n.get("Datacenter", ""),
                     n.get("Name", ""), n.get("NodeClass") or "",
                     *([(n.get("Attributes") or {}).get("os.name", "")] if show_os else []),
                     *([n.get("Address") or "", n.get("Version") or ""] if verbose else []),
                     str(bool(n.get("Drain"))).lower(), n.get("SchedulingEligibility", ""),
                     n.get("Status", ""),
                     *([str(running.get(n["ID"], 0))] if running is not None else [])])
    return format_list(rows)


def stub_list_text(nodes: Sequence[dict[str, Any]], verbose: bool) -> str:
    """Nomad's `formatNodeStubList`, for a prefix several nodes share."""
    length = id_length(verbose)
    return format_list([["ID", "DC", "Name", "Class", "Drain", "Eligibility", "Status"],
                        *([limit(n["ID"], length), n.get("Datacenter", ""), n.get("Name", ""),
                           n.get("NodeClass") or "", str(bool(n.get("Drain"))).lower(),
                           n.get("SchedulingEligibility", ""), n.get("Status", "")]
                          for n in nodes)])


def drain_text(node: dict[str, Any]) -> str:
    """Nomad's `formatDrain`."""
    strategy = node.get("DrainStrategy")
    if not strategy:
        return str(bool(node.get("Drain"))).lower()
    text = "true"
    deadline = (strategy.get("DrainSpec") or {}).get("Deadline", strategy.get("Deadline", 0))
    if deadline and deadline < 0:
        text += "; force drain"
    elif parse_rfc3339(strategy.get("ForceDeadline")) is None:
        text += "; no deadline"
    else:
        text += f"; {format_rfc3339(strategy.get('ForceDeadline'))} deadline"
    if (strategy.get("DrainSpec") or {}).get("IgnoreSystemJobs") or strategy.get(
            "IgnoreSystemJobs"):
        text += "; ignoring system jobs"
    return text


def _driver_status(node: dict[str, Any]) -> str:
    """Nomad's `outputTruncatedNodeDriverInfo`: detected drivers, `(unhealthy)` marked."""
    return ",".join(sorted(name if info.get("Healthy") else f"{name} (unhealthy)"
                           for name, info in (node.get("Drivers") or {}).items()
                           if info.get("Detected")))


def _go_seconds(seconds: int) -> str:
    """Go's `Duration.String` of whole seconds ("5h3m0s")."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def node_header(node: dict[str, Any], host: dict[str, Any] | None, *, short: bool,
                verbose: bool) -> list[tuple[str, str]]:
    """The `key = value` block of `node status NODE` (node_status.go `formatNode`)."""
    pairs = [("ID", node["ID"]), ("Name", node.get("Name", "")),
             ("Node Pool", node.get("NodePool") or ""), ("Class", node.get("NodeClass") or ""),
             ("DC", node.get("Datacenter", "")), ("Drain", drain_text(node)),
             ("Eligibility", node.get("SchedulingEligibility", "")),
             ("Status", node.get("Status", "")), ("CSI Controllers", ""), ("CSI Drivers", "")]
    volumes = ",".join(sorted(node.get("HostVolumes") or {}))
    networks = ",".join(sorted(node.get("HostNetworks") or {}))
    if short:
        drivers = ",".join(sorted(k.split(".", 1)[1] for k, v in
                                  (node.get("Attributes") or {}).items()
                                  if k.count(".") == 1 and k.startswith("driver.")
                                  and v in ("1", "true")))
        return [*pairs, ("Host Volumes", volumes), ("Host Networks", networks),
                ("CSI Volumes", ""), ("Drivers", drivers)]
    if host is not None:
        pairs.append(("Uptime", _go_seconds(int(host.get("Uptime", 0)))))
    if not verbose:
        pairs += [("Host Volumes", volumes), ("Host Networks", networks), ("CSI Volumes", ""),
                  ("Driver Status", _driver_status(node))]
    attrs = node.get("Attributes") or {}
    if "yurt.max_tasks" in attrs:  # what the agent's open-file limit leaves room for
        pairs.append(("Tasks", f"up to {attrs['yurt.max_tasks']} "
                               f"(open-file limit {attrs.get('yurt.nofile', '?')})"))
    return pairs


def _totals(node: dict[str, Any]) -> tuple[int, int, int]:
    """Nomad's `computeNodeTotalResources`: CPU MHz, memory MB, disk MB, less the reserved."""
    res = node.get("NodeResources") or {}
    reserved = node.get("ReservedResources") or {}

    def get(d: dict[str, Any], kind: str, key: str) -> int:
        return int((d.get(kind) or {}).get(key, 0) or 0)

    return (get(res, "Cpu", "CpuShares") - get(reserved, "Cpu", "CpuShares"),
            get(res, "Memory", "MemoryMB") - get(reserved, "Memory", "MemoryMB"),
            get(res, "Disk", "DiskMB") - get(reserved, "Disk", "DiskMB"))


def allocated_text(node: dict[str, Any], running: Sequence[dict[str, Any]]) -> str:
    """Nomad's `getAllocatedResources`: what the running allocations reserve, of the total."""
    cpu = mem = disk = 0
    for alloc in running:
        allocated = alloc.get("AllocatedResources") or {}
        for task in (allocated.get("Tasks") or {}).values():
            cpu += int((task.get("Cpu") or {}).get("CpuShares", 0))
            mem += int((task.get("Memory") or {}).get("MemoryMB", 0))
        disk += int((allocated.get("Shared") or {}).get("DiskMB", 0))
    total_cpu, total_mem, total_disk = _totals(node)
    return format_list([["CPU", "Memory", "Disk", "Alloc Count"],
                        [f"{cpu}/{total_cpu} MHz", f"{mib(mem)}/{mib(total_mem)}",
                         f"{mib(disk)}/{mib(total_disk)}", str(len(running))]])


def utilization_text(node: dict[str, Any], usages: Sequence[dict[str, Any]]) -> str:
    """Nomad's `getActualResources`: the running allocations' measured use (`usages`: each
    one's stats `ResourceUsage`)."""
    cpu = sum(float((u.get("CpuStats") or {}).get("TotalTicks", 0)) for u in usages)
    mem = 0
    for u in usages:
        stats = u.get("MemoryStats") or {}
        mem += int(stats.get("Usage") or stats.get("RSS") or 0)
    total_cpu, total_mem, _ = _totals(node)
    return format_list([["CPU", "Memory"],
                        [f"{math.floor(cpu)}/{total_cpu} MHz", f"{ibytes(mem)}/{mib(total_mem)}"]])


def host_text(node: dict[str, Any], host: dict[str, Any]) -> str:
    """Nomad's `getHostResources`: the machine's use; the disk of the node's storage volume
    (matched by device, or by mount point where the device is not known)."""
    volume = (node.get("Attributes") or {}).get("unique.storage.volume", "")
    disk = next((d for d in host.get("DiskStats") or []
                 if volume and volume in (d.get("Device"), d.get("Mountpoint"))), None)
    memory = host.get("Memory") or {}
    cpu = (f"{math.floor(float(host.get('CPUTicksConsumed', 0)))}/"
           f"{((node.get('NodeResources') or {}).get('Cpu') or {}).get('CpuShares', 0)} MHz")
    used = f"{ibytes(memory.get('Used', 0))}/{ibytes(memory.get('Total', 0))}"
    disk_text = (f"{ibytes(disk['Used'])}/{ibytes(disk['Size'])}" if disk is not None
                 else f"({volume})")
    return format_list([["CPU", "Memory", "Disk"], [cpu, used, disk_text]])


def host_stats_text(host: dict[str, Any]) -> str:
    """`-stats`: Nomad's `CPU Stats`, `Memory Stats` and `Disk Stats` sections."""
    cpus = "\n\n".join(format_kv([("CPU", str(c.get("CPU", ""))),
                                  ("User", f"{c.get('User', 0):,.2f}%"),
                                  ("System", f"{c.get('System', 0):,.2f}%"),
                                  ("Idle", f"{c.get('Idle', 0):,.2f}%")])
                       for c in host.get("CPU") or [])
    memory = host.get("Memory") or {}
    mem = format_kv([(k, ibytes(memory.get(k, 0))) for k in ("Total", "Available", "Used",
                                                              "Free")])
    disks = "\n\n".join(format_kv([
        ("Device", d.get("Device", "")), ("MountPoint", d.get("Mountpoint", "")),
        ("Size", ibytes(d.get("Size", 0))), ("Used", ibytes(d.get("Used", 0))),
        ("Available", ibytes(d.get("Available", 0))),
        ("Used Percent", f"{d.get('UsedPercent', 0):,.2f}%"),
        ("Inodes Percent", f"{d.get('InodesUsedPercent', 0):,.2f}%")])
        for d in host.get("DiskStats") or [])
    return section("CPU Stats", cpus) + section("Memory Stats", mem) + section("Disk Stats",
                                                                               disks)


def events_text(node: dict[str, Any], verbose: bool) -> str:
    """Nomad's `outputNodeEvent`: newest first; a driver's event names its driver."""
    rows = []
    for event in reversed(node.get("Events") or []):
        details = event.get("Details") or {}
        subsystem = f"Driver: {details['driver']}" if details.get("driver") else event.get(
            "Subsystem", "")
        row = [format_rfc3339(event.get("Timestamp")), subsystem, event.get("Message", "")]
        if verbose:
            row.append(", ".join(f"{k}: {v}" for k, v in sorted(details.items())))
        rows.append(row)
    header = ["Time", "Subsystem", "Message", *(["Details"] if verbose else [])]
    return section("Node Events", format_list([header, *rows]))


def drivers_text(node: dict[str, Any]) -> str:
    """Nomad's `outputNodeDriverInfo` (`-verbose`)."""
    rows = [[name, str(bool(info.get("Detected"))).lower(), str(bool(info.get("Healthy"))).lower(),
             info.get("HealthDescription", ""), format_rfc3339(info.get("UpdateTime"))]
            for name, info in sorted((node.get("Drivers") or {}).items())]
    return section("Drivers", format_list([["Driver", "Detected", "Healthy", "Message", "Time"],
                                           *rows]))


def devices_text(node: dict[str, Any]) -> str:
    """yurt's device groups: healthy instances of all, and their IDs ("" with none)."""
    groups = (node.get("NodeResources") or {}).get("Devices") or []
    if not groups:
        return ""
    rows = [[f"{g['Vendor']}/{g['Type']}/{g['Name']}",
             f"{sum(1 for i in g['Instances'] if i['Healthy'])}/{len(g['Instances'])}",
             ", ".join(i["ID"] for i in g["Instances"])] for g in groups]
    return section("Devices", format_list([["Device", "Healthy", "Instances"], *rows]))


def node_detail_text(node: dict[str, Any], allocs: Sequence[dict[str, Any]],
                     host: dict[str, Any] | None, usages: Sequence[dict[str, Any]] | None, *,
                     short: bool = False, verbose: bool = False, stats: bool = False,
                     now_ns: int | None = None) -> str:
    """`node status NODE`'s whole text (module docstring): `allocs` the node's allocations,
    `host` its host stats (None when unread), `usages` the running allocations' usage (None
    when one could not be read: the section is left out, as Nomad's). Pure."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    length = id_length(verbose)
    table = alloc_table(allocs, verbose=verbose, length=length, now_ns=now_ns, node_name=False)
    out = format_kv(node_header(node, host, short=short, verbose=verbose))
    if short:
        return out + section("Allocations", table)
    if verbose:
        volumes = node.get("HostVolumes") or {}
        if volumes:
            out += section("Host Volumes", format_list(
                [["Name", "ReadOnly", "Source"],
                 *([name, str(bool(v.get("ReadOnly"))).lower(), v.get("Path", "")]
                   for name, v in sorted(volumes.items()))]))
        out += drivers_text(node)
    out += events_text(node, verbose)
    running = [a for a in allocs if a.get("ClientStatus") == "running"]
    out += section("Allocated Resources", allocated_text(node, running))
    if usages is not None:
        out += section("Allocation Resource Utilization", utilization_text(node, usages))
    if host is not None:
        out += section("Host Resource Utilization", host_text(node, host))
    out += devices_text(node)
    if host is not None and stats:
        out += host_stats_text(host)
    out += section("Allocations", table)
    if verbose:
        attrs = node.get("Attributes") or {}
        out += section("Attributes", format_kv(sorted(attrs.items())))
        meta = node.get("Meta") or {}
        out += section("Meta", format_kv(sorted(meta.items())) if meta else "")
    return out


def _resolve(client: AgentConnection, prefix: str, verbose: bool) -> str:
    """The node a prefix names, with Nomad's messages."""
    from yurt.runtime.cli.api_client import call
    from yurt.runtime.cli.output import fail
    from yurt.runtime.errors import EXIT_USAGE

    if len(prefix) == 1:
        fail("Identifier must contain at least two characters.", EXIT_USAGE)
    nodes = call(client, "GET", "/v1/nodes", params={"prefix": prefix})
    if not nodes:
        fail(f'No node(s) with prefix "{prefix}" found')
    exact = [n for n in nodes if n["ID"] == prefix]
    if len(nodes) > 1 and not exact:
        fail("Prefix matched multiple nodes\n\n" + stub_list_text(nodes, verbose), EXIT_USAGE)
    return str((exact or nodes)[0]["ID"])


def _usages(client: AgentConnection, running: Sequence[dict[str, Any]]
            ) -> list[dict[str, Any]] | None:
    usages = []
    for alloc in running:
        response = client.request("GET", f"/v1/client/allocation/{alloc['ID']}/stats")
        if response.status_code != 200:
            return None
        usages.append(response.json().get("ResourceUsage") or {})
    return usages


def node_status(node_id: str | None, *, self_: bool = False, json_output: bool = False,
                template: str = "", short: bool = False, verbose: bool = False,
                stats: bool = False, allocs: bool = False, show_os: bool = False,
                quiet: bool = False, filter_expr: str = "", per_page: int = 0,
                page_token: str = "") -> None:
    """`yurt node status [-self | NODE]` (see the module docstring)."""
    from yurt.runtime.cli.api_client import agent_warnings, api, call
    from yurt.runtime.cli.output import check_format, echo, emit, fail
    from yurt.runtime.cli.ui_hint import ui_hint
    from yurt.runtime.errors import EXIT_USAGE

    check_format(json_output, template)
    if self_ and node_id:
        fail("a node ID cannot be given with -self", EXIT_USAGE)
    human = not (json_output or template)
    if quiet and (verbose or json_output):
        fail("-quiet cannot be used with -verbose or -json", EXIT_USAGE)
    with api() as client:
        for warning in agent_warnings(client) if human else []:
            echo(f"Warning: {warning}", err=True)  # stderr: stdout stays a listing
        if node_id is None and not self_:
            from yurt.runtime.cli.paging import get_page, next_page_hint, page_params

            nodes, next_token = get_page(client, "/v1/nodes", {
                **({"os": "true"} if show_os else {}),
                **page_params(filter_expr, per_page, page_token)})
            running = None
            if allocs and human:
                running = {n["ID"]: sum(1 for a in call(client, "GET",
                                                        f"/v1/node/{n['ID']}/allocations")
                                        if a.get("ClientStatus") == "running") for n in nodes}
            emit(nodes, json_output, template, lambda: echo("\n".join(filter(None, (
                node_list_text(nodes, verbose=verbose, running=running, show_os=show_os,
                               quiet=quiet), next_page_hint(next_token))))))
            if human:
                ui_hint("node status")
            return
        if self_:
            node_id = str(call(client, "GET", "/v1/agent/self")["stats"]["client"]["node_id"])
        assert node_id is not None
        full_id = _resolve(client, node_id, verbose)
        node = call(client, "GET", f"/v1/node/{full_id}")
        if not human:
            emit(node, json_output, template, lambda: None)
            return
        node_allocs = call(client, "GET", f"/v1/node/{full_id}/allocations")
        host = usages = None
        if not short:
            response = client.request("GET", "/v1/client/stats", params={"node_id": full_id})
            if response.status_code == 200:
                host = response.json()
            else:
                echo(f"error fetching node stats: {response.text.strip()}", err=True)
            usages = _usages(client, [a for a in node_allocs
                                      if a.get("ClientStatus") == "running"])
    echo(node_detail_text(node, node_allocs, host, usages, short=short, verbose=verbose,
                          stats=stats))
    ui_hint("node status single", nodeID=full_id)


def register(node_group: click.Group) -> None:
    """Add `node status` to the `node` group (called from runtime/cli/__init__.py)."""

    def flag(name: str, dest: str, text: str
             ) -> Callable[[Callable[..., None]], Callable[..., None]]:
        return click.option(f"-{name}", f"--{name}", dest, is_flag=True, help=text)

    @node_group.command("status")
    @click.argument("node_id", metavar="[NODE]", required=False)
    @flag("self", "self_", "This agent's node.")
    @flag("short", "short", "Only the header and the allocations.")
    @flag("verbose", "verbose", "Full IDs, drivers, attributes and meta.")
    @flag("stats", "stats", "The host's CPU, memory and disk statistics.")
    @flag("allocs", "allocs", "In the list: each node's running allocations.")
    @flag("os", "show_os", "In the list: each node's operating system.")
    @flag("quiet", "quiet", "In the list: only the node IDs.")
    @filter_option
    @page_options
    @ui_option
    @output_options
    def node_status_command(node_id: str | None, self_: bool, short: bool, verbose: bool,
                            stats: bool, allocs: bool, show_os: bool, quiet: bool,
                            filter_expr: str, per_page: int, page_token: str,
                            json_output: bool, template: str) -> None:
        """List the nodes, or show one (`-self`, or an ID or a unique prefix): its drivers,
        events, resources and allocations, as Nomad's `node status`."""
        node_status(node_id, self_=self_, json_output=json_output, template=template,
                    short=short, verbose=verbose, stats=stats, allocs=allocs,
                    show_os=show_os, quiet=quiet, filter_expr=filter_expr, per_page=per_page,
                    page_token=page_token)

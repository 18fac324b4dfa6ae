"""The CLI verbs that talk to a running agent over its HTTP API (`$YURT_ADDR`).

Each command is a thin client: it calls Nomad's API paths, then prints either human output
(tables with rich) or, with `--json`, the API's JSON unchanged for programs. Exit codes follow
DESIGN §7: 0 ok, 1 a job or allocation failed (or the agent cannot be reached), 2 bad input.
The token, when the agent needs one, comes from `$YURT_TOKEN` or from the file named by
`$YURT_TOKEN_FILE`, never from the command line (every user can read it in /proc), and is sent
only as the `X-Nomad-Token` header, the websocket's too (a query string ends up in logs).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlencode

import click
import httpx2
from rich.console import Console
from rich.table import Table

from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

DEFAULT_ADDR = "http://127.0.0.1:4646"


def _fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"yurt: {message}", err=True)
    sys.exit(code)


def client_token() -> str:
    """`$YURT_TOKEN`, else the contents of the file `$YURT_TOKEN_FILE`, else ""."""
    token = os.environ.get("YURT_TOKEN", "").strip()
    path = os.environ.get("YURT_TOKEN_FILE")
    if token or not path:
        return token
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        _fail(f"cannot read $YURT_TOKEN_FILE {path}: {reason}", EXIT_USAGE)
    if not token:
        _fail(f"$YURT_TOKEN_FILE {path} is empty", EXIT_USAGE)
    return token


@contextmanager
def api() -> Iterator[httpx2.Client]:
    addr = os.environ.get("YURT_ADDR", DEFAULT_ADDR)
    token = client_token()
    headers = {"X-Nomad-Token": token} if token else {}
    try:
        with httpx2.Client(base_url=addr, headers=headers, timeout=30) as client:
            yield client
    except httpx2.ConnectError:
        _fail(f"cannot reach the agent at {addr}: is `yurt agent` running? "
              "(set YURT_ADDR to another address)")


def call(client: httpx2.Client, method: str, path: str, **kw: Any) -> Any:
    response = client.request(method, path, **kw)
    if response.status_code == 404:
        _fail(response.text.strip() or "not found")
    if response.status_code == 403:
        _fail("permission denied: set YURT_TOKEN (or YURT_TOKEN_FILE) to the agent's token")
    if response.status_code >= 400:
        _fail(response.text.strip(), EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)
    return response.json() if response.content else None


def console() -> Console:
    c = Console(highlight=False)
    return c if c.is_terminal else Console(highlight=False, width=140)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


def _ago(ns: int) -> str:
    if not ns:
        return "-"
    seconds = max(time.time() - ns / 1e9, 0)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def alloc_table(allocs: list[dict[str, Any]]) -> Table:
    table = Table(title="Allocations", title_justify="left")
    for col in ("ID", "Name", "Desired", "Status", "Tasks", "Created"):
        table.add_column(col)
    for a in allocs:
        tasks = ", ".join(f"{name}={state['State']}"
                          for name, state in sorted((a.get("TaskStates") or {}).items()))
        table.add_row(a["ID"][:8], a["Name"], a["DesiredStatus"], a["ClientStatus"], tasks,
                      _ago(a.get("CreateTime", 0)))
    return table


def _event_time(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).astimezone().strftime("%H:%M:%S")


# --------------------------------------------------------------------------- job


def job_stop(job_id: str, json_output: bool) -> None:
    with api() as client:
        result = call(client, "DELETE", f"/v1/job/{job_id}")
    if json_output:
        emit_json(result)
    else:
        click.echo(f'Job "{job_id}" stopped')



# --------------------------------------------------------------------------- alloc


def alloc_status(alloc_id: str, json_output: bool) -> None:
    with api() as client:
        alloc = call(client, "GET", f"/v1/allocation/{alloc_id}")
    if json_output:
        emit_json(alloc)
        return
    out = console()
    out.print(format_kv(alloc_basic_info(alloc)), markup=False, highlight=False)
    addresses = alloc_addresses(alloc)
    if addresses:
        out.print(f"\n{addresses}", markup=False, highlight=False)
    for name, state in sorted((alloc.get("TaskStates") or {}).items()):
        table = Table(title=f'Task "{name}" is "{state["State"]}"'
                            f'{" (failed)" if state["Failed"] else ""}, '
                            f'{state["Restarts"]} restarts', title_justify="left")
        for col in ("Time", "Type", "Description"):
            table.add_column(col)
        for event in reversed(state.get("Events") or []):
            table.add_row(_event_time(event["Time"]), event["Type"], event["DisplayMessage"])
        out.print(table)


def format_kv(pairs: list[tuple[str, str]]) -> str:
    """Nomad's `formatKV`: `key = value` lines, the keys padded to the longest."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.ljust(width)} = {v}" for k, v in pairs)


def format_list(rows: list[list[str]]) -> str:
    """Nomad's `formatList`: columns padded to their widest cell, two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def alloc_basic_info(alloc: dict[str, Any]) -> list[tuple[str, str]]:
    """`alloc status`'s header; with a deployment, Nomad's `Deployment ID`, `Deployment
    Health` (healthy, unhealthy or unset) and `Canary` lines (command/alloc_status.go)."""
    pairs = [("ID", alloc["ID"]), ("Name", alloc["Name"]), ("Job ID", alloc["JobID"]),
             ("Desired", alloc["DesiredStatus"]),
             ("Client Status", f"{alloc['ClientStatus']} ({alloc['ClientDescription']})")]
    if alloc.get("DeploymentID"):
        status = alloc.get("DeploymentStatus") or {}
        healthy = status.get("Healthy")
        pairs += [("Deployment ID", alloc["DeploymentID"][:8]),
                  ("Deployment Health", "unset" if healthy is None
                   else "healthy" if healthy else "unhealthy")]
        if status.get("Canary"):
            pairs.append(("Canary", "true"))
    return pairs


def alloc_addresses(alloc: dict[str, Any]) -> str:
    """Nomad's "Allocation Addresses" section (`formatAllocNetworkInfo`): every port the
    group holds, `*label`, "yes", `host:port` (`-> to` when mapped); "" without ports."""
    shared = (alloc.get("AllocatedResources") or {}).get("Shared") or {}
    networks = shared.get("Networks") or []
    if not networks or not (networks[0].get("DynamicPorts") or networks[0].get("ReservedPorts")):
        return ""
    nw = networks[0]

    def row(label: str, value: int, to: int, host: str) -> list[str]:
        return [label, "yes", f"{host}:{value}" + (f" -> {to}" if to > 0 else "")]

    rows = [["Label", "Dynamic", "Address"]]
    if shared.get("Ports"):
        rows += [row("*" + p["Label"], p["Value"], p["To"], p["HostIP"])
                 for p in shared["Ports"]]
    else:
        rows += [row(p["Label"], p["Value"], p["To"], nw["IP"])
                 for p in (nw.get("DynamicPorts") or []) + (nw.get("ReservedPorts") or [])]
    mode = f' (mode = "{nw["Mode"]}")' if nw.get("Mode") else ""
    return f"Allocation Addresses{mode}:\n{format_list(rows)}"


def _only_task(client: httpx2.Client, alloc_id: str, task: str | None) -> tuple[str, str]:
    alloc = call(client, "GET", f"/v1/allocation/{alloc_id}")
    if task:
        return alloc["ID"], task
    tasks = sorted(alloc.get("TaskStates") or {})
    if len(tasks) != 1:
        _fail(f"allocation has tasks {', '.join(tasks)}: name one", EXIT_USAGE)
    return alloc["ID"], tasks[0]


def alloc_restart(alloc_id: str, task: str | None, all_tasks: bool) -> None:
    with api() as client:
        body = {"TaskName": task or "", "AllTasks": all_tasks}
        call(client, "POST", f"/v1/client/allocation/{alloc_id}/restart", json=body)
    click.echo(f"Allocation {alloc_id} restarted")


def alloc_signal(alloc_id: str, task: str | None, signal: str) -> None:
    with api() as client:
        call(client, "POST", f"/v1/client/allocation/{alloc_id}/signal",
             json={"Task": task or "", "Signal": signal})
    click.echo(f"Sent {signal} to allocation {alloc_id}{f' task {task}' if task else ''}")


def alloc_stop(alloc_id: str) -> None:
    with api() as client:
        call(client, "POST", f"/v1/allocation/{alloc_id}/stop")
    click.echo(f"Allocation {alloc_id} is stopping")


# --------------------------------------------------------------------------- node, events


def node_status(json_output: bool) -> None:
    with api() as client:
        nodes = call(client, "GET", "/v1/nodes")
        detail = [call(client, "GET", f"/v1/node/{n['ID']}") for n in nodes]
    if json_output:
        emit_json(detail)
        return
    out = console()
    for node in detail:
        res = node["NodeResources"]
        out.print(f"ID     = {node['ID']}\nName   = {node['Name']}\nDC     = "
                  f"{node['Datacenter']}\nStatus = {node['Status']}\nCPU    = "
                  f"{res['Cpu']['CpuShares']} MHz\nMemory = {res['Memory']['MemoryMB']} MB")
        attrs = node.get("Attributes") or {}
        if "yurt.max_tasks" in attrs:  # what the agent's open-file limit leaves room for
            out.print(f"Tasks  = up to {attrs['yurt.max_tasks']} "
                      f"(open-file limit {attrs.get('yurt.nofile', '?')})")
        table = Table(title="Drivers", title_justify="left")
        for col in ("Driver", "Detected", "Healthy", "Description"):
            table.add_column(col)
        for name, info in sorted(node["Drivers"].items()):
            table.add_row(name, str(info["Detected"]).lower(), str(info["Healthy"]).lower(),
                          info["HealthDescription"])
        out.print(table)
        devices = Table(title="Devices", title_justify="left")
        for col in ("Device", "Healthy", "Instances"):
            devices.add_column(col)
        for group in res.get("Devices") or []:
            healthy = sum(1 for i in group["Instances"] if i["Healthy"])
            devices.add_row(f"{group['Vendor']}/{group['Type']}/{group['Name']}",
                            f"{healthy}/{len(group['Instances'])}",
                            ", ".join(i["ID"] for i in group["Instances"]))
        out.print(devices)


def events(topics: list[str], index: int | None, json_output: bool) -> None:
    import trio
    from trio_websocket import ConnectionClosed, open_websocket_url

    addr = os.environ.get("YURT_ADDR", DEFAULT_ADDR)
    params: list[tuple[str, str]] = [("topic", t) for t in topics]
    if index is not None:
        params.append(("index", str(index)))
    token = client_token()
    headers = [(b"X-Nomad-Token", token.encode())] if token else []
    query = urlencode(params)
    url = addr.replace("http", "ws", 1) + "/v1/event/ws" + (f"?{query}" if query else "")

    async def follow() -> None:
        try:
            async with open_websocket_url(url, extra_headers=headers) as ws:
                while True:
                    record = json.loads(await ws.get_message())
                    if json_output:
                        click.echo(json.dumps(record))
                        continue
                    for event in record.get("Events", []):
                        line = f"{event['Index']:>6}  {event['Topic']}/{event['Type']}"
                        if event["Topic"] == "Task":
                            p = event["Payload"]
                            line += (f"  {p['AllocID'][:8]} {p['Task']}: "
                                     f"{p['Event']['Type']} — {p['Event']['DisplayMessage']}")
                        elif event["Topic"] == "Allocation":
                            a = event["Payload"]["Allocation"]
                            line += f"  {a['Name']} {a['ClientStatus']}"
                        else:
                            line += f"  {event['Key']}"
                        click.echo(line)
        except ConnectionClosed:
            return
        except OSError as e:
            _fail(f"cannot reach the agent at {addr}: {e}")

    try:
        trio.run(follow)
    except KeyboardInterrupt:
        sys.exit(130)

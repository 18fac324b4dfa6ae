"""CLI verbs for the node, the system and the task list, in Nomad's spelling.

    yurt node eligibility -enable|-disable [-self | NODE]
    yurt node drain -enable|-disable [-deadline 1h] [-force] [-no-deadline]
                    [-ignore-system] [-keep-ineligible] [-detach] [-yes] [-m MESSAGE]
                    [-meta KEY=VALUE]... [-self | NODE]
    yurt node drain -monitor [-self | NODE]
    yurt system gc
    yurt system reconcile summaries
    yurt tasks [-json] [-t TMPL]  every job and allocation, one line per task, like
                                  `supervisorctl status` (`yurt status` is Nomad's: status.py)

Nomad's flags have one dash (`-enable`); the two-dash spelling works too. NODE is an ID or a
unique prefix of one. A drain is followed until it is done, as `nomad node drain` does, unless
`-detach`. Exit codes: 0 ok, 1 failed (the agent refused or cannot be reached), 2 bad input.
`register` attaches these to runtime/cli/__init__.py's groups; the HTTP helpers are api_client.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from yurt.runtime.cli.output import echo, fail, output_options
from yurt.runtime.errors import EXIT_USAGE

#: Nomad's default drain deadline.
DEFAULT_DEADLINE = "1h"


def _node_id(client: Any, node: str | None, self_: bool) -> str:
    """The node's full ID from `-self` or an ID prefix (Nomad's messages on failure)."""
    from yurt.runtime.cli.api_client import call

    if self_ and node:
        fail("a node ID cannot be given with -self", EXIT_USAGE)
    if self_:
        return str(call(client, "GET", "/v1/agent/self")["stats"]["client"]["node_id"])
    if not node:
        fail("Node ID must be specified if -self isn't being used", EXIT_USAGE)
    if len(node) == 1:
        fail("Identifier must contain at least two characters.", EXIT_USAGE)
    matches = call(client, "GET", "/v1/nodes", params={"prefix": node})
    if not matches:
        fail(f"No node(s) with prefix or id {node!r} found")
    if len(matches) > 1:
        fail(f"Prefix matched multiple nodes: {', '.join(m['ID'] for m in matches)}", EXIT_USAGE)
    return str(matches[0]["ID"])


def _either(enable: bool, disable: bool) -> bool:
    if enable == disable:
        fail("Either the '-enable' or '-disable' flag must be set", EXIT_USAGE)
    return enable


def eligibility(enable: bool, disable: bool, self_: bool, node: str | None) -> None:
    from yurt.runtime.cli.api_client import api, call

    eligible = _either(enable, disable)
    with api() as client:
        node_id = _node_id(client, node, self_)
        call(client, "PUT", f"/v1/node/{node_id}/eligibility",
             json={"Eligibility": "eligible" if eligible else "ineligible"})
    echo(f'Node "{node_id}" scheduling eligibility set: '
               f"{'eligible' if eligible else 'ineligible'} for scheduling")


def _deadline_ns(deadline: str | None, force: bool, no_deadline: bool) -> int:
    from yurt.runtime.lib.durations import parse_duration

    if sum((deadline is not None, force, no_deadline)) > 1:
        fail("only one of -deadline, -force and -no-deadline may be given", EXIT_USAGE)
    if force:
        return -1
    if no_deadline:
        return 0
    try:
        ns = parse_duration(deadline or DEFAULT_DEADLINE)
    except ValueError as e:
        fail(f"bad -deadline: {e}", EXIT_USAGE)
    if ns <= 0:
        fail("-deadline must be positive (use -no-deadline or -force)", EXIT_USAGE)
    return ns


def _stamp(rfc3339: str) -> str:
    try:
        moment = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return rfc3339
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _monitor(client: Any, node_id: str, since: int) -> None:
    """Print the node's new events until its drain is over (blocking queries)."""

    index = 0
    while True:  # each round is a blocking query: it returns on the next change
        response = client.get(f"/v1/node/{node_id}", params={"index": index, "wait": "30s"},
                              timeout=60)
        if response.status_code != 200:
            fail(response.text.strip() or f"reading node {node_id} failed")
        node = response.json()
        index = int(response.headers.get("X-Nomad-Index", index))
        for event in node.get("Events") or []:
            if event["CreateIndex"] > since:
                since = event["CreateIndex"]
                echo(f"{_stamp(event['Timestamp'])}: {event['Message']}")
        if node.get("DrainStrategy") is None:
            echo(f'{datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}: Drain complete for node '
                       f'{node_id}')
            return


def drain_meta(on: bool, last_drain: dict[str, Any] | None, message: str,
               pairs: tuple[str, ...]) -> dict[str, str]:
    """The drain metadata Nomad's command/node_drain.go `Run` sends: a cancel carries the
    last drain's over; `-m` is "message" when enabling, "cancel_message" when disabling;
    each `-meta key=value` (a bare key: "") is added. Pure."""
    meta: dict[str, str] = {}
    if not on and last_drain is not None:
        meta.update(last_drain.get("Meta") or {})
    if message:
        meta["message" if on else "cancel_message"] = message
    for pair in pairs:
        if pair:
            key, _, value = pair.partition("=")
            meta[key] = value
    return meta


def monitor_only(self_: bool, node: str | None) -> None:
    """Nomad's `node drain -monitor`: follow a drain already under way, changing nothing
    (no drain: Nomad's warning, exit 0)."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.job_monitor import now_stamp

    with api() as client:
        node_id = _node_id(client, node, self_)
        current = call(client, "GET", f"/v1/node/{node_id}")
        if current.get("DrainStrategy") is None:
            echo("No drain strategy set", err=True)
            return
        echo(f'==> {now_stamp()}: Monitoring node "{node_id}": Ctrl-C to detach monitoring')
        seen = max((e.get("CreateIndex", 0) for e in current.get("Events") or []), default=0)
        _monitor(client, node_id, seen)


def drain(enable: bool, disable: bool, deadline: str | None, force: bool, no_deadline: bool,
          ignore_system: bool, keep_ineligible: bool, detach: bool, self_: bool,
          node: str | None, *, message: str = "", meta: tuple[str, ...] = (),
          monitor: bool = False) -> None:
    from yurt.runtime.cli.api_client import api, call

    if monitor:
        if enable or disable:  # Nomad's text
            fail("The -monitor flag cannot be used with the '-enable' or '-disable' flags",
                 EXIT_USAGE)
        monitor_only(self_, node)
        return
    on = _either(enable, disable)
    if not on and (deadline is not None or force or no_deadline or ignore_system):
        fail("drain options are only valid with -enable", EXIT_USAGE)
    ns = _deadline_ns(deadline, force, no_deadline) if on else 0
    with api() as client:
        node_id = _node_id(client, node, self_)
        last = call(client, "GET", f"/v1/node/{node_id}").get("LastDrain") if not on else None
        sent = drain_meta(on, last, message, meta)
        if not on:
            call(client, "PUT", f"/v1/node/{node_id}/drain",
                 json={"DrainSpec": None, "MarkEligible": not keep_ineligible,
                       "Meta": sent or None})
            echo(f'Node "{node_id}" drain strategy unset')
            return
        result = call(client, "PUT", f"/v1/node/{node_id}/drain", json={
            "DrainSpec": {"Deadline": ns, "IgnoreSystemJobs": ignore_system},
            "MarkEligible": False, "Meta": sent or None})
        echo(f'Node "{node_id}" drain strategy set')
        if not detach:
            _monitor(client, node_id, int(result["NodeModifyIndex"]) - 1)


def system_gc() -> None:
    from yurt.runtime.cli.api_client import api, call

    with api() as client:
        call(client, "PUT", "/v1/system/gc")


def system_reconcile_summaries() -> None:
    from yurt.runtime.cli.api_client import api, call

    with api() as client:
        call(client, "PUT", "/v1/system/reconcile/summaries")
    echo("Reconciled job summaries")


def _since(rfc3339: str) -> str:
    try:
        started = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if started.year <= 1:
        return ""
    seconds = int(max((datetime.now(UTC) - started).total_seconds(), 0))
    hours, rest = divmod(seconds, 3600)
    return f"uptime {hours}:{rest // 60:02d}:{rest % 60:02d}"


def overview_rows(jobs: list[dict[str, Any]], allocs: list[dict[str, Any]]
                  ) -> list[tuple[str, str, str, str]]:
    """One row per task of each allocation that should run or still runs: (name, state,
    allocation, detail), like supervisorctl's `name STATE pid, uptime`; a job without such an
    allocation gets one row with its own status."""
    rows: list[tuple[str, str, str, str]] = []
    shown: set[str] = set()
    for alloc in sorted(allocs, key=lambda a: (a["JobID"], a["Name"])):
        live = alloc["DesiredStatus"] == "run" or alloc["ClientStatus"] in ("pending",
                                                                          "running")
        if not live:
            continue
        shown.add(alloc["JobID"])
        states = alloc.get("TaskStates") or {}
        if not states:
            rows.append((alloc["Name"], alloc["ClientStatus"].upper(), alloc["ID"][:8],
                         alloc.get("ClientDescription", "")))
        for task, state in sorted(states.items()):
            detail = _since(state.get("StartedAt", "")) if state["State"] == "running" else ""
            if state["State"] == "dead":
                detail = "failed" if state.get("Failed") else "exited"
            if state.get("Restarts"):
                detail += f"{', ' if detail else ''}{state['Restarts']} restarts"
            rows.append((f"{alloc['Name']}:{task}", state["State"].upper(), alloc["ID"][:8],
                         detail))
    for job in sorted(jobs, key=lambda j: j["ID"]):
        if job["ID"] not in shown:
            status = "stopped" if job.get("Stop") else job.get("Status", "")
            rows.append((job["ID"], status.upper(), "-", f"{job['Type']} job"))
    return rows


def task_list(json_output: bool, template: str = "") -> None:
    """`yurt tasks`: one line per task of each live allocation (`overview_rows`)."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import check_format, emit, format_list

    check_format(json_output, template)
    with api() as client:
        jobs = call(client, "GET", "/v1/jobs")
        allocs = call(client, "GET", "/v1/allocations")

    def human() -> None:
        rows = overview_rows(jobs, allocs)
        if not rows:
            echo("No running jobs")
            return
        # supervisorctl's shape at a terminal too: plain columns, never cut.
        echo(format_list([["Name", "State", "Alloc", "Detail"], *map(list, rows)]))

    emit({"Jobs": jobs, "Allocations": allocs}, json_output, template, human)


def register(cli: click.Group, node: click.Group) -> None:
    """Attach the verbs to `yurt` and its `node` group (called from runtime/cli/__init__.py)."""

    def dual(name: str, **kw: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
        """A flag spelled `-name` as Nomad does, and `--name`."""
        return click.option(f"-{name}", f"--{name}", name.replace("-", "_"), is_flag=True,
                            **kw)

    @node.command("eligibility")
    @dual("enable", help="Mark the node eligible for scheduling.")
    @dual("disable", help="Mark the node ineligible for scheduling.")
    @click.option("-self", "--self", "self_", is_flag=True, help="This agent's node.")
    @click.argument("node_id", metavar="[NODE]", required=False)
    def node_eligibility(enable: bool, disable: bool, self_: bool, node_id: str | None
                         ) -> None:
        """Toggle a node's scheduling eligibility."""
        eligibility(enable, disable, self_, node_id)

    @node.command("drain")
    @dual("enable", help="Start draining the node.")
    @dual("disable", help="Stop draining the node.")
    @click.option("-deadline", "--deadline", default=None, metavar="DURATION",
                  help=f"Force-stop what is left after this long (default "
                       f"{DEFAULT_DEADLINE}).")
    @dual("force", help="Stop every allocation now.")
    @dual("no-deadline", help="Never force-stop: wait for allocations to migrate.")
    @dual("ignore-system", help="Leave system jobs' allocations running.")
    @dual("keep-ineligible", help="With -disable, keep the node ineligible.")
    @dual("detach", help="Return at once instead of following the drain.")
    @dual("yes", help="Accepted for Nomad compatibility (no prompt is asked).")
    @dual("monitor", help="Follow the drain under way, changing nothing.")
    @click.option("-m", "message", default="", metavar="MESSAGE",
                  help='Stored in the drain\'s metadata as "message" (with -disable: '
                       '"cancel_message").')
    @click.option("-meta", "--meta", "meta", multiple=True, metavar="KEY=VALUE",
                  help="Metadata stored with the drain (repeatable).")
    @click.option("-self", "--self", "self_", is_flag=True, help="This agent's node.")
    @click.argument("node_id", metavar="[NODE]", required=False)
    def node_drain(enable: bool, disable: bool, deadline: str | None, force: bool,
                   no_deadline: bool, ignore_system: bool, keep_ineligible: bool,
                   detach: bool, yes: bool, monitor: bool, message: str,
                   meta: tuple[str, ...], self_: bool, node_id: str | None) -> None:
        """Drain a node: stop its allocations in waves, within a deadline (-monitor:
        follow a drain under way)."""
        drain(enable, disable, deadline, force, no_deadline, ignore_system, keep_ineligible,
              detach, self_, node_id, message=message, meta=meta, monitor=monitor)

    @cli.group("system")
    def system() -> None:
        """Server maintenance."""

    @system.command("gc")
    def gc() -> None:
        """Garbage-collect jobs that are over, with their allocations."""
        system_gc()

    @system.group("reconcile")
    def reconcile() -> None:
        """Reconcile server state."""

    @reconcile.command("summaries")
    def summaries() -> None:
        """Reconcile job summaries."""
        system_reconcile_summaries()

    # Named `tasks`, not `status`: `yurt status` is Nomad's (runtime/cli/status.py), and
    # what this lists is tasks, one line each, as `supervisorctl status` does; a top-level
    # word because it spans every job and node (`node tasks` would promise one node's).
    @cli.command("tasks")
    @output_options
    def overview(json_output: bool, template: str) -> None:
        """Every job and what its allocations' tasks are doing, one line each, like
        `supervisorctl status` (the data for -json/-t: {"Jobs": [...], "Allocations":
        [...]})."""
        task_list(json_output, template)

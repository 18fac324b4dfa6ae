"""Nomad's evaluation monitor and deployment monitor, as `job run`, `job promote` (and any
verb that starts an evaluation) print them: command/monitor.go `monitor` and
command/deployment_status.go `defaultMonitor`.

`monitor(client, eval_id, length)` polls the evaluation and its allocations until the
evaluation is terminal, printing each change once, as Nomad's `update` does ("Evaluation
triggered by job", "Evaluation within deployment", "Allocation … created: node …, group …",
"Evaluation status changed"), then "Evaluation … finished with status …" (or, with groups
left unplaced, Nomad's placement failure, worded by runtime/cli/evalfmt.py). It follows the
evaluation's `NextEval`. When the evaluation belongs to a deployment (a service job's update)
and placed everything, it then follows the deployment, printing its status and group table
(runtime/cli/deployment.py `status_text`) each time it changes (redrawn in place at a
terminal, runtime/cli/output.py `live_block`), until it is terminal.

It never waits for an allocation to *run* or *end*: a batch job's `job run` returns once the
job is placed. Exit codes (Nomad's `monitor`): 0 placed (and the deployment successful),
1 the deployment did not succeed, or an error (unknown evaluation, agent unreachable),
2 groups could not be placed. A deployment is not followed after a placement failure: it
could not finish before its progress deadline, and the documented contract of `job run` is
"2 on placement issues".

Lines carry Nomad's prefixes: `==> ` for headlines (its `Info`), four spaces for the rest,
each with Nomad's `formatTime` stamp (local time, ISO 8601, to the second).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from yurt.runtime.cli.evalfmt import format_alloc_metrics
from yurt.runtime.cli.output import echo, stdout_is_terminal

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection

#: Nomad's `shortId` and `fullId`.
SHORT_ID: Final = 8
FULL_ID: Final = 36
#: Evaluation statuses the monitor stops at (Nomad's: complete, failed, canceled).
EVAL_TERMINAL: Final = frozenset({"complete", "failed", "canceled", "cancelled"})
DEPLOYMENT_TERMINAL: Final = frozenset({"successful", "failed", "cancelled", "blocked"})
#: Between two polls of a pending evaluation (Nomad waits a second: its `updateWait`; the
#: embedded server finishes an evaluation within the register, so this is rarely slept).
POLL: Final = 0.2
#: How long one blocking query on the deployment waits for a change.
DEPLOYMENT_WAIT: Final = "5s"

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_PLACEMENT: Final = 2


def now_stamp(when: datetime | None = None) -> str:
    """Nomad's `formatTime`: ISO 8601 in local time, to the second, `Z` for UTC."""
    stamp = (when or datetime.now()).astimezone().isoformat(timespec="seconds")
    return stamp[:-6] + "Z" if stamp.endswith("+00:00") else stamp


def limit(ident: str, length: int) -> str:
    """Nomad's `limit`: the first `length` characters."""
    return ident[:length]


def _info(message: str) -> None:
    echo(f"==> {now_stamp()}: {message}")


def _out(message: str) -> None:
    echo(f"    {now_stamp()}: {message}")


class _EvalState:
    """What the monitor last saw (Nomad's `evalState`)."""

    def __init__(self) -> None:
        self.status = "pending"
        self.job = ""
        self.node = ""
        self.deployment = ""
        self.index = 0
        self.allocs: dict[str, dict[str, Any]] = {}


def _report(old: _EvalState, new: _EvalState, length: int) -> None:
    """Nomad's `monitor.update`: a line for each thing that changed from `old` to `new`."""
    if not old.node and new.node:
        _out(f'Evaluation triggered by node "{limit(new.node, length)}"')
    if not old.job and new.job:
        _out(f'Evaluation triggered by job "{new.job}"')
    if not old.deployment and new.deployment:
        _out(f'Evaluation within deployment: "{limit(new.deployment, length)}"')
    for alloc_id, a in sorted(new.allocs.items(), key=lambda kv: kv[1].get("Name", "")):
        before = old.allocs.get(alloc_id)
        where = (f'node "{limit(a.get("NodeID", ""), length)}", '
                 f'group "{a.get("TaskGroup", "")}"')
        if before is None:
            if a.get("CreateIndex", 0) < new.index:
                _out(f'Allocation "{limit(alloc_id, length)}" modified: {where}')
            elif a.get("DesiredStatus") == "run":
                _out(f'Allocation "{limit(alloc_id, length)}" created: {where}')
        elif before.get("ClientStatus") != a.get("ClientStatus"):
            desc = f' ({a["ClientDescription"]})' if a.get("ClientDescription") else ""
            _out(f'Allocation "{limit(alloc_id, length)}" status changed: '
                 f'"{before.get("ClientStatus")}" -> "{a.get("ClientStatus")}"{desc}')
    if new.status != "pending" and old.status != new.status:
        _out(f'Evaluation status changed: "{old.status}" -> "{new.status}"')


def _placement_failures(ev: dict[str, Any], length: int) -> None:
    """Nomad's monitor lines for an evaluation that left groups unplaced."""
    _info(f'Evaluation "{limit(ev["ID"], length)}" finished with status "{ev["Status"]}" '
          "but failed to place all allocations:")
    for group, metric in sorted((ev.get("FailedTGAllocs") or {}).items()):
        count = 1 + (metric.get("CoalescedFailures") or 0)
        noun = "allocation" if count == 1 else "allocations"
        _out(f'Task Group "{group}" (failed to place {count} {noun}):')
        for line in format_alloc_metrics(metric, "  "):
            echo(f"    {line}")
    if ev.get("BlockedEval"):
        _out(f'Evaluation "{limit(ev["BlockedEval"], length)}" waiting for additional '
             "capacity to place remainder")


def monitor(client: AgentConnection, eval_id: str, length: int = SHORT_ID) -> int:
    """Follow evaluation `eval_id` (and its deployment); Nomad's exit code (module header)."""
    from yurt.runtime.cli.api_client import call

    state = _EvalState()
    _info(f'Monitoring evaluation "{limit(eval_id, length)}"')
    while True:
        response = client.request("GET", f"/v1/evaluation/{quote(eval_id, safe='')}")
        if response.status_code >= 400:
            _info(f'No evaluation with id "{eval_id}" found')
            return EXIT_ERROR
        ev: dict[str, Any] = response.json()
        new = _EvalState()
        new.status, new.job = ev.get("Status", ""), ev.get("JobID", "")
        new.node, new.deployment = ev.get("NodeID", ""), ev.get("DeploymentID", "")
        new.index = ev.get("CreateIndex", 0)
        allocs = call(client, "GET", f"/v1/evaluation/{quote(eval_id, safe='')}/allocations")
        new.allocs = {a["ID"]: a for a in allocs or []}
        _report(state, new, length)
        state = new
        if new.status not in EVAL_TERMINAL:
            time.sleep(POLL)
            continue
        failed = bool(ev.get("FailedTGAllocs"))
        if failed:
            _placement_failures(ev, length)
        else:
            _info(f'Evaluation "{limit(ev["ID"], length)}" finished with status '
                  f'"{ev["Status"]}"')
        if ev.get("NextEval"):
            wait = (ev.get("Wait") or 0) / 1e9
            if wait:
                _info(f'Monitoring next evaluation "{limit(ev["NextEval"], length)}" in '
                      f"{wait:g}s")
                time.sleep(wait)
            return monitor(client, ev["NextEval"], length)
        if failed:
            return EXIT_PLACEMENT
        break
    if state.deployment:
        _info(f'Monitoring deployment "{limit(state.deployment, length)}"')
        status = monitor_deployment(client, state.deployment, length,
                                    verbose=length == FULL_ID)  # Nomad's, with -verbose
        return EXIT_OK if status == "successful" else EXIT_ERROR
    return EXIT_OK


def monitor_deployment(client: AgentConnection, deployment_id: str, length: int, *,
                       wait: str = DEPLOYMENT_WAIT, verbose: bool = False) -> str:
    """Follow a deployment until it is terminal; its final status ("" if it cannot be read).
    At a terminal its status and groups are redrawn in place under a progress line (Nomad's
    `ttyMonitor`), elsewhere printed anew each time they change (`defaultMonitor`). `wait`:
    how long one blocking query waits (`deployment status -wait`); `verbose` adds the
    deployment's "Allocations" (`deployment status -monitor -verbose`)."""
    if not stdout_is_terminal():
        status, d = _follow_deployment(client, deployment_id, length, None, wait, verbose)
    else:
        from yurt.runtime.cli.output import live_block

        with live_block() as show:
            status, d = _follow_deployment(client, deployment_id, length, show, wait,
                                           verbose)
    if status == "failed" and any(g.get("AutoRevert")
                                  for g in (d.get("TaskGroups") or {}).values()):
        _follow_rollback(client, d, length, wait, verbose)
    return status


def _follow_deployment(client: AgentConnection, deployment_id: str, length: int,
                       show: Callable[[str], None] | None, wait: str, verbose: bool
                       ) -> tuple[str, dict[str, Any]]:
    """The deployment's final status and JSON ("" and {} when it cannot be read), shown
    through `show` at a terminal, else printed each time it changes."""
    from yurt.runtime.cli.deployfmt import status_text

    index, shown = 0, ""
    name = f'Deployment "{limit(deployment_id, length)}"'
    path = f"/v1/deployment/{quote(deployment_id, safe='')}"
    while True:
        response = client.request("GET", path, params={"index": str(index), "wait": wait})
        if response.status_code >= 400:
            echo(f"{now_stamp()}: Error fetching deployment: {response.text.strip()}",
                 err=True)
            return "", {}
        d: dict[str, Any] = response.json()
        index = int(response.headers.get("X-Nomad-Index", index) or index)
        text = status_text(d, length)
        if verbose:
            text += "\n\nAllocations\n" + _deployment_allocs(client, deployment_id, length)
        status = str(d.get("Status", ""))
        done = status in DEPLOYMENT_TERMINAL
        if show is not None:
            mark = ("✓ " if status == "successful" else "! ") if done else ""
            head = f"  {mark}{name} {status if done else 'in progress...'}"
            block = "\n".join("    " + line if line else "" for line in
                              [now_stamp(), *text.splitlines()])
            show(f"{head}\n\n{block}\n")
        elif text != shown:
            # Nomad's leading newline keeps the block clear of the monitor's indentation.
            echo(f"    \n{now_stamp()}\n{text}")
            shown = text
        if done:
            return status, d


def _deployment_allocs(client: AgentConnection, deployment_id: str, length: int) -> str:
    """The deployment's allocations as Nomad's verbose monitor lists them."""
    from yurt.runtime.cli.statusfmt import alloc_list

    response = client.request(
        "GET", f"/v1/deployment/allocations/{quote(deployment_id, safe='')}")
    if response.status_code >= 400:
        return f"Error fetching allocations: {response.text.strip()}"
    return alloc_list(response.json() or [], True, length)


def _follow_rollback(client: AgentConnection, failed: dict[str, Any], length: int,
                     wait: str = DEPLOYMENT_WAIT, verbose: bool = False) -> None:
    """After an auto-reverting deployment failed, follow the rollback's deployment (Nomad
    waits a second for it to be created); the failed one still decides the exit code."""
    time.sleep(1)
    response = client.request("GET", f"/v1/job/{quote(failed['JobID'], safe='')}/deployment")
    echo("")
    if response.status_code >= 400 or not response.content:
        return
    rollback = response.json()
    if rollback and rollback.get("ID") != failed["ID"]:
        monitor_deployment(client, rollback["ID"], length, wait=wait, verbose=verbose)

"""`yurt eval status` and `eval list`'s table, as Nomad's command/eval_status.go and
command/eval_list.go print them.

`show(eval_id, ...)`: the evaluation named by its ID or a unique prefix (Nomad's texts for
none, one character, several: exit 1, 2 for a one-character prefix, yurt's usage code);
`-monitor` follows it with runtime/cli/job_monitor.py `monitor` (its exit code); `-json`/`-t`
print the evaluation; otherwise Nomad's `formatEvalStatus`: the key/value block (short IDs and
relative times, full IDs and exact times with `-verbose`), "Related Evaluations", "Plan
Annotations" (optional columns only when non-zero, all with `-verbose`), "Placed
Allocations", "Failed Placements". `format_eval_list` is `formatEvalList`; both formatters
are pure.
"""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import quote

from yurt.runtime.cli.output import echo, fail, format_kv, format_list
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

_OPTIONAL = (("Migrate", "Migrate"), ("Canary", "Canary"), ("Preemptions", "Preemptions"),
             ("Reschedule Now", "RescheduleNow"), ("Reschedule Later", "RescheduleLater"),
             ("Disconnect", "Disconnect"), ("Reconnect", "Reconnect"))


def failure_status(ev: dict[str, Any]) -> str:
    """Nomad's `evalFailureStatus` text."""
    if ev.get("Status") == "blocked":
        return "N/A - In Progress"
    return "true" if ev.get("FailedTGAllocs") else "false"


def format_eval_list(evals: list[dict[str, Any]], verbose: bool) -> str:
    """Nomad's `formatEvalList`."""
    length = 36 if verbose else 8
    rows = [["ID", "Priority", "Triggered By", "Job ID", "Namespace", "Node ID", "Status",
             "Placement Failures"]]
    rows += [[e["ID"][:length], str(e.get("Priority", 0)), e.get("TriggeredBy", ""),
              e.get("JobID", ""), e.get("Namespace", ""), (e.get("NodeID") or "")[:length],
              e.get("Status", ""), failure_status(e)] for e in evals]
    return format_list(rows)


def format_plan_annotations(updates: dict[str, dict[str, int]], verbose: bool) -> str:
    """Nomad's `formatPlanAnnotations`: five columns always, the others when some group has
    a non-zero value, or all of them with `verbose`."""
    groups = sorted(updates)
    header = ["Task Group", "Ignore", "Place", "Stop", "InPlace", "Destructive"]
    rows = [[g, *(str(updates[g].get(k, 0)) for k in
                  ("Ignore", "Place", "Stop", "InPlaceUpdate", "DestructiveUpdate"))]
            for g in groups]
    for title, key in _OPTIONAL:
        if verbose or any(updates[g].get(key, 0) for g in groups):
            header.append(title)
            for row, g in zip(rows, groups, strict=True):
                row.append(str(updates[g].get(key, 0)))
    return format_list([header, *rows])


def status_text(ev: dict[str, Any], placed: list[dict[str, Any]], verbose: bool,
                now: float | None = None) -> str:
    """Nomad's `formatEvalStatus`."""
    import time

    from yurt.runtime.cli.evalfmt import format_alloc_metrics
    from yurt.runtime.cli.statusfmt import alloc_list, format_time_ns, pretty_time_diff

    length = 36 if verbose else 8

    def when(ns: int) -> str:
        return format_time_ns(ns) if verbose else pretty_time_diff(
            ns, time.time_ns() if now is None else int(now * 1e9))

    rows = [("ID", ev["ID"][:length]), ("Create Time", when(ev.get("CreateTime", 0))),
            ("Modify Time", when(ev.get("ModifyTime", 0))), ("Status", ev.get("Status", "")),
            ("Status Description", ev.get("StatusDescription") or ev.get("Status", "")),
            ("Type", ev.get("Type", "")), ("TriggeredBy", ev.get("TriggeredBy", "")),
            ("Job ID", ev.get("JobID", "")), ("Namespace", ev.get("Namespace", ""))]
    trigger = {"node-update": ("Node ID", ev.get("NodeID") or ""),
               "max-plan-attempts": ("Previous Eval", ev.get("PreviousEval") or "")}
    noun, subject = trigger.get(ev.get("TriggeredBy", ""), ("", ""))
    if noun and subject:
        rows.append((noun, subject))
    rows += [("Priority", str(ev.get("Priority", 0))),
             ("Placement Failures", failure_status(ev))]
    wait_until = ev.get("WaitUntil") or ""
    if wait_until and not wait_until.startswith("0001-01-01"):
        rows.append(("Wait Until", wait_until))
    if ev.get("QuotaLimitReached"):
        rows.append(("Quota Limit Reached", ev["QuotaLimitReached"]))
    rows += [("Previous Eval", (ev.get("PreviousEval") or "")[:length]),
             ("Next Eval", (ev.get("NextEval") or "")[:length]),
             ("Blocked Eval", (ev.get("BlockedEval") or "")[:length])]
    out = [format_kv(rows)]
    related = ev.get("RelatedEvals") or []
    if related:
        out.append("\nRelated Evaluations")
        out.append(format_list([["ID", "Priority", "Triggered By", "Node ID", "Status",
                                 "Description"]] + [
            [r["ID"][:length], str(r.get("Priority", 0)), r.get("TriggeredBy", ""),
             (r.get("NodeID") or "")[:length], r.get("Status", ""),
             r.get("StatusDescription", "")] for r in related]))
    updates = (ev.get("PlanAnnotations") or {}).get("DesiredTGUpdates") or {}
    if updates:
        out += ["\nPlan Annotations", format_plan_annotations(updates, verbose)]
    if placed:
        out += ["\nPlaced Allocations", alloc_list(placed, False, length)]
    failed = ev.get("FailedTGAllocs") or {}
    if failed:
        out.append("\nFailed Placements")
        for group in sorted(failed):
            metric = failed[group]
            count = 1 + (metric.get("CoalescedFailures") or 0)
            noun = "allocation" if count == 1 else "allocations"
            out.append(f'Task Group "{group}" (failed to place {count} {noun}):')
            out += format_alloc_metrics(metric, "  ")
        if ev.get("BlockedEval"):
            out.append(f'\nEvaluation "{ev["BlockedEval"][:length]}" waiting for additional '
                       "capacity to place remainder")
    return "\n".join(out)


def show(eval_id: str, *, monitor: bool, verbose: bool, json_output: bool,
         template: str) -> None:
    """`yurt eval status` (module header)."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import check_format, emit

    if len(eval_id) == 1:
        fail("Identifier must contain at least two characters.", EXIT_USAGE)
    check_format(json_output, template)
    with api() as client:
        found = call(client, "GET", "/v1/evaluations", params={"prefix": eval_id})
        if not found:
            fail(f'No evaluation(s) with prefix or id "{eval_id}" found', EXIT_FAILED)
        if len(found) > 1:
            fail("Prefix matched multiple evaluations\n\n"
                 + format_eval_list(found, verbose), EXIT_FAILED)
        ident = found[0]["ID"]
        if monitor:
            from yurt.runtime.cli.job_monitor import FULL_ID, SHORT_ID
            from yurt.runtime.cli.job_monitor import monitor as follow

            sys.exit(follow(client, ident, FULL_ID if verbose else SHORT_ID))
        ev = call(client, "GET", f"/v1/evaluation/{quote(ident, safe='')}")
        placed = [] if json_output or template else call(
            client, "GET", f"/v1/evaluation/{quote(ident, safe='')}/allocations")
    emit(ev, json_output, template, lambda: echo(status_text(ev, placed, verbose)))
    if not (json_output or template):
        from yurt.runtime.cli.ui_hint import ui_hint

        ui_hint("eval status", evalID=ev["ID"])

"""How `yurt` words an evaluation's placement failures, as Nomad's CLI does: `job eval`,
`eval status` (`evaluation_failures`), `job status`'s "Placement Failure" section
(`placement_failure_section`), each from the API's evaluation JSON; `job run`'s monitor
(runtime/cli/job_monitor.py) and `job plan`'s dry-run put `format_alloc_metrics`'s lines
under their own (timestamped, indented) headings.

The server fills the same `AllocMetric` as Nomad's (runtime/server/scheduler/generic.py), and
`format_alloc_metrics` is Nomad's `formatAllocMetrics` (command/monitor.go), so the words are
Nomad's.

Invariants: every function here is pure (a dict in, text out: no I/O, no clock), and the
module imports nothing of yurt, so every verb module may import it without a cycle (it
breaks the one runtime/cli/jobs.py and runtime/cli/job_run.py had).
"""

from __future__ import annotations

from typing import Any


def format_alloc_metrics(metric: dict[str, Any], prefix: str = "  ") -> list[str]:
    """Nomad's `formatAllocMetrics` (scores left out): why nodes were not chosen. Pure.

    Maps are printed sorted (Nomad prints them in Go's random map order).
    """
    out: list[str] = []
    if metric.get("NodesEvaluated", 0) == 0:
        out.append(f"{prefix}* No nodes were eligible for evaluation")
    for dc, available in sorted((metric.get("NodesAvailable") or {}).items()):
        if available == 0:
            out.append(f'{prefix}* No nodes are available in datacenter "{dc}"')
    for node_class, n in sorted((metric.get("ClassFiltered") or {}).items()):
        out.append(f'{prefix}* Class "{node_class}": {n} nodes excluded by filter')
    for constraint, n in sorted((metric.get("ConstraintFiltered") or {}).items()):
        out.append(f'{prefix}* Constraint "{constraint}": {n} nodes excluded by filter')
    if metric.get("NodesExhausted"):
        out.append(f"{prefix}* Resources exhausted on {metric['NodesExhausted']} nodes")
    for node_class, n in sorted((metric.get("ClassExhausted") or {}).items()):
        out.append(f'{prefix}* Class "{node_class}" exhausted on {n} nodes')
    for dim, n in sorted((metric.get("DimensionExhausted") or {}).items()):
        out.append(f'{prefix}* Dimension "{dim}" exhausted on {n} nodes')
    for dim in metric.get("QuotaExhausted") or []:
        out.append(f'{prefix}* Quota limit hit "{dim}"')
    return out


def evaluation_failures(ev: dict[str, Any]) -> str:
    """`job run`'s report of an evaluation that did not place everything ("" if it did),
    as Nomad's monitor words it. Pure."""
    failed = ev.get("FailedTGAllocs") or {}
    if not failed:
        return ""
    lines = [
        f'==> Evaluation "{ev["ID"][:8]}" finished with status "{ev["Status"]}" but '
        "failed to place all allocations:"
    ]
    for group, metric in sorted(failed.items()):
        count = 1 + (metric.get("CoalescedFailures") or 0)
        noun = "allocation" if count == 1 else "allocations"
        lines.append(f'    Task Group "{group}" (failed to place {count} {noun}):')
        lines += format_alloc_metrics(metric, "      ")
    if ev.get("BlockedEval"):
        lines.append(
            f'    Evaluation "{ev["BlockedEval"][:8]}" waiting for additional '
            "capacity to place remainder"
        )
    return "\n".join(lines)


def placement_failure_section(evals: list[dict[str, Any]]) -> str:
    """`job status`'s "Placement Failure" section ("" without one), Nomad's rule: only while
    an evaluation is blocked, from the latest evaluation that failed to place. Pure."""
    if not any(e.get("Status") == "blocked" for e in evals):
        return ""
    failed = [e for e in evals if e.get("FailedTGAllocs")]
    if not failed:
        return ""
    latest = max(failed, key=lambda e: e.get("CreateIndex", 0))
    lines = ["Placement Failure"]
    groups = sorted(latest["FailedTGAllocs"].items())
    for i, (group, metric) in enumerate(groups):
        lines.append(f'Task Group "{group}":')
        lines += format_alloc_metrics(metric, "  ")
        if i != len(groups) - 1:
            lines.append("")
    return "\n".join(lines)

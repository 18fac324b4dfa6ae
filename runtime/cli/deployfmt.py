"""How a deployment is printed, as Nomad's command/deployment_status.go prints it: the list,
the header and the per-group table (`formatDeploymentGroups`: optional columns only when a
group needs them). Pure (API JSON in, text out), shared by `deployment`, `job deployments`
and the monitors of runtime/cli/job_monitor.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from yurt.runtime.cli.output import format_kv, format_list


def _time(rfc3339: str) -> str:
    try:
        when = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except ValueError:
        return rfc3339
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def list_table(deployments: list[dict[str, Any]], length: int) -> str:
    if not deployments:
        return "No deployments found"
    rows = [["ID", "Job ID", "Job Version", "Status", "Description"]]
    rows += [[d["ID"][:length], d["JobID"], str(d["JobVersion"]), d["Status"],
              d["StatusDescription"]] for d in deployments]
    return format_list(rows)


def groups_table(groups: dict[str, dict[str, Any]]) -> str:
    """Nomad's `formatDeploymentGroups`: optional columns only when a group needs them."""
    autorevert = any(s["AutoRevert"] for s in groups.values())
    canaries = any(s["DesiredCanaries"] > 0 for s in groups.values())
    deadline = any(s["ProgressDeadline"] != 0 for s in groups.values())
    header = ["Task Group", *(["Auto Revert"] if autorevert else []),
              *(["Promoted"] if canaries else []), "Desired",
              *(["Canaries"] if canaries else []), "Placed", "Healthy", "Unhealthy",
              *(["Progress Deadline"] if deadline else [])]
    rows = [header]
    for name in sorted(groups):
        s = groups[name]
        row = [name]
        if autorevert:
            row.append(str(s["AutoRevert"]).lower())
        if canaries:
            row.append(str(s["Promoted"]).lower() if s["DesiredCanaries"] > 0 else "N/A")
        row.append(str(s["DesiredTotal"]))
        if canaries:
            row.append(str(s["DesiredCanaries"]))
        row += [str(s["PlacedAllocs"]), str(s["HealthyAllocs"]), str(s["UnhealthyAllocs"])]
        if deadline:
            by = s["RequireProgressBy"]
            row.append("N/A" if by.startswith("0001-01-01") else _time(by))
        rows.append(row)
    return format_list(rows)


def status_text(d: dict[str, Any], length: int) -> str:
    text = format_kv([("ID", d["ID"][:length]), ("Job ID", d["JobID"]),
                ("Job Version", str(d["JobVersion"])), ("Status", d["Status"]),
                ("Description", d["StatusDescription"])])
    if d["TaskGroups"]:
        text += "\n\nDeployed\n" + groups_table(d["TaskGroups"])
    return text

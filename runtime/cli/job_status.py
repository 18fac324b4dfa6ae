"""`yurt job status [JOB]`, as Nomad's command/job_status.go prints it.

No JOB: the jobs, `ID Type Priority Status Submit Date` (with `-namespace '*'`, Nomad's
`Namespace` column after the ID), or "No running jobs". A JOB (an ID or a unique prefix):
the `key = value` header (ID, Name, Submit Date, Type, Priority, Datacenters, Namespace, Node
Pool, Status, Periodic, Parameterized, and a periodic job's next launch), then by kind of
job, as Nomad's `outputJobInfo`, `outputPeriodicInfo` and `outputParameterizedInfo`:
- an ordinary job: `Summary` (one row per task group), `Children Job Summary` when it has
  children, `Evaluations` with `-verbose` or `-evals`, `Placement Failure` while an
  evaluation is blocked, `Latest Deployment` (with its `Deployed` groups), `Actions`, and
  `Allocations` (Nomad's columns; `-verbose` adds Eval ID and Node Name and full times);
- a periodic job: `Children Job Summary` and `Previously Launched Jobs`;
- a parameterized job: `Parameterized Job`, `Parameterized Job Summary`, `Dispatched Jobs`.
`-short` stops after the header; `-verbose` shows whole IDs.

`-json`/`-t` give, for one job, `{"Job", "Summary", "Allocations", "LatestDeployment",
"Evaluations"}`: Nomad's `JobJson` keys (its Summary, Allocations, LatestDeployment and
Evaluations), plus the job itself, which yurt's scripts read (`.Job.ID`); the list's data is
the job list, as before. `-all-allocs` is accepted and asks for every allocation of the job
ID, which is what yurt's API lists in any case. `-ui` opens the job's (or the list's) web UI
page (runtime/cli/ui_hint.py).

Exit codes (Nomad's): 0 shown; 1 no such job, a refused request or no agent; 2 an ambiguous
prefix (yurt's rule for every prefix, api_client.py `resolve_job`) or bad flags.

The text is made by pure functions (`job_list_text`, `job_detail_text`: API JSON in, text
out, "now" given) so they are tested without an agent; `job_status` only fetches.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from yurt.runtime.cli.output import format_kv, format_list, output_options
from yurt.runtime.cli.statusfmt import (
    alloc_table,
    format_time_ns,
    id_length,
    limit,
    section,
)
from yurt.runtime.cli.ui_hint import ui_option

if TYPE_CHECKING:
    from yurt.runtime.cli.http import AgentConnection

#: Nomad's `maxFailedTGs`: groups whose placement failures `job status` shows.
MAX_FAILED_GROUPS = 5


def status_string(status: str, stop: bool) -> str:
    """Nomad's `getStatusString`: a stopped job is `dead (stopped)` until it is purged."""
    return f"{status} (stopped)" if stop else status


def type_string(stub: dict[str, Any]) -> str:
    """Nomad's `getTypeString`: the type, `/periodic` and `/parameterized` appended."""
    text = str(stub.get("Type", ""))
    if stub.get("Periodic"):
        text += "/periodic"
    if stub.get("ParameterizedJob"):
        text += "/parameterized"
    return text


def job_list_text(jobs: Sequence[dict[str, Any]], all_namespaces: bool = False) -> str:
    """Nomad's `createStatusListOutput` ("No running jobs" for none)."""
    if not jobs:
        return "No running jobs"
    header = ["ID", *(["Namespace"] if all_namespaces else []), "Type", "Priority", "Status",
              "Submit Date"]
    rows = [[j["ID"], *([j.get("Namespace") or ""] if all_namespaces else []), type_string(j),
             str(j.get("Priority", "")), status_string(j["Status"], bool(j.get("Stop"))),
             format_time_ns(j.get("SubmitTime"))] for j in jobs]
    return format_list([header, *rows])


def is_periodic(job: dict[str, Any]) -> bool:
    return job.get("Periodic") is not None


def is_parameterized(job: dict[str, Any]) -> bool:
    """Nomad's api `IsParameterized`: a template, not one of its dispatched children."""
    return job.get("ParameterizedJob") is not None and not job.get("Dispatched")


def next_launch(job: dict[str, Any], now: datetime) -> str:
    """Nomad's "Next Periodic Launch" value: "" when no spec has a next time."""
    from yurt.runtime.lib.cron import CronError, load_zone, next_after

    periodic = job["Periodic"]
    specs = [periodic["Spec"]] if periodic.get("Spec") else list(periodic.get("Specs") or [])
    try:
        zone = load_zone(periodic.get("TimeZone") or "")
        found = [t for t in (next_after(s, zone, now) for s in specs) if t is not None]
    except CronError:
        return ""
    if not found:
        return ""
    nxt = min(found)
    seconds = int(nxt.timestamp()) - int(now.timestamp())
    return f"{format_time_ns(int(nxt.timestamp() * 1e9))} ({_go_duration(seconds)} from now)"


def _go_duration(seconds: int) -> str:
    """Go's `Duration.String` of whole seconds: "1h2m3s", "5m0s", "0s"."""
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def job_header(job: dict[str, Any], now: datetime) -> list[tuple[str, str]]:
    """The `key = value` block at the top of `job status JOB` (job_status.go `Run`)."""
    periodic, parameterized = is_periodic(job), is_parameterized(job)
    pairs = [("ID", job["ID"]), ("Name", job.get("Name") or job["ID"]),
             ("Submit Date", format_time_ns(job.get("SubmitTime"))),
             ("Type", job["Type"]), ("Priority", str(job["Priority"])),
             ("Datacenters", ",".join(job.get("Datacenters") or [])),
             ("Namespace", job.get("Namespace") or "default"),
             ("Node Pool", job.get("NodePool") or ""),
             ("Status", status_string(job["Status"], bool(job.get("Stop")))),
             ("Periodic", str(periodic).lower()),
             ("Parameterized", str(parameterized).lower())]
    if job.get("DispatchIdempotencyToken"):
        pairs.append(("Idempotency Token", job["DispatchIdempotencyToken"]))
    if periodic and not parameterized:
        if job.get("Stop"):
            pairs.append(("Next Periodic Launch", "none (job stopped)"))
        else:
            launch = next_launch(job, now)
            if launch:
                pairs.append(("Next Periodic Launch", launch))
    return pairs


def summary_text(job: dict[str, Any], summary: dict[str, Any] | None) -> str:
    """Nomad's `outputJobSummary`: `Summary` for an ordinary job, and the children's counts
    (`Children Job Summary`, or `Parameterized Job Summary`) where there are any or the job
    makes children."""
    if not summary:
        return ""
    periodic, parameterized = is_periodic(job), is_parameterized(job)
    out = ""
    if not (periodic or parameterized):
        rows = [["Task Group", "Queued", "Starting", "Running", "Failed", "Complete", "Lost",
                 "Unknown"]]
        for group, s in sorted((summary.get("Summary") or {}).items()):
            rows.append([group, *(str(s.get(k, 0)) for k in (
                "Queued", "Starting", "Running", "Failed", "Complete", "Lost", "Unknown"))])
        out += section("Summary", format_list(rows))
    children = summary.get("Children")
    if children is not None and (periodic or parameterized or sum(
            int(children.get(k, 0)) for k in ("Pending", "Running", "Dead")) > 0):
        title = "Parameterized Job Summary" if parameterized else "Children Job Summary"
        out += section(title, format_list([
            ["Pending", "Running", "Dead"],
            [str(children.get(k, 0)) for k in ("Pending", "Running", "Dead")]]))
    return out


def evals_table(evals: Sequence[dict[str, Any]], length: int) -> str:
    """The `Evaluations` section's table (Nomad's `evalFailureStatus` in the last column)."""
    rows = [["ID", "Priority", "Triggered By", "Status", "Placement Failures"]]
    for ev in evals:
        failures = ("N/A - In Progress" if ev.get("Status") == "blocked"
                    else str(bool(ev.get("FailedTGAllocs"))).lower())
        rows.append([limit(ev["ID"], length), str(ev.get("Priority", "")),
                     ev.get("TriggeredBy", ""), ev.get("Status", ""), failures])
    return format_list(rows)


def placement_failures(evals: Sequence[dict[str, Any]]) -> str:
    """Nomad's `outputFailedPlacements`, shown while an evaluation is blocked: the latest
    evaluation that failed to place, at most `MAX_FAILED_GROUPS` groups."""
    from yurt.runtime.cli.evalfmt import format_alloc_metrics

    if not any(e.get("Status") == "blocked" for e in evals):
        return ""
    failed = [e for e in evals if e.get("FailedTGAllocs")]
    if not failed:
        return ""
    latest = max(failed, key=lambda e: e.get("CreateIndex", 0))
    groups = sorted(latest["FailedTGAllocs"].items())
    lines: list[str] = []
    for i, (group, metric) in enumerate(groups[:MAX_FAILED_GROUPS]):
        lines.append(f'Task Group "{group}":')
        lines += format_alloc_metrics(metric, "  ")
        if i != len(groups) - 1:
            lines.append("")
    if len(groups) > MAX_FAILED_GROUPS:
        lines.append(f"\nPlacement failures truncated. To see remainder run:\n"
                     f"yurt eval status {latest['ID']}")
    return section("Placement Failure", "\n".join(lines))


def deployment_text(d: dict[str, Any], length: int) -> str:
    """Nomad's `formatDeployment` (job_status.go): ID, Status, Description, and the
    `Deployed` groups table (deployment.py `groups_table`, Nomad's `formatDeploymentGroups`)."""
    from yurt.runtime.cli.deployfmt import groups_table

    text = format_kv([("ID", limit(d["ID"], length)), ("Status", d.get("Status", "")),
                      ("Description", d.get("StatusDescription", ""))])
    if d.get("TaskGroups"):
        text += "\n\nDeployed\n" + groups_table(d["TaskGroups"])
    return text


def actions_text(job: dict[str, Any]) -> str:
    """Nomad's `Actions` section: `Action Name Task Group Task`; "" for a job with none."""
    rows = [[action["Name"], group["Name"], task["Name"]]
            for group in job.get("TaskGroups") or []
            for task in group.get("Tasks") or []
            for action in task.get("Actions") or []]
    if not rows:
        return ""
    return section("Actions", format_list([["Action Name", "Task Group", "Task"], *rows]))


def children_text(job: dict[str, Any], children: Sequence[dict[str, Any]]) -> str:
    """A periodic job's `Previously Launched Jobs`, a parameterized one's `Dispatched Jobs`
    (only the children whose parent is this job), or Nomad's words for none."""
    parameterized = is_parameterized(job)
    if not children:
        return ("\n\nNo dispatched instances of parameterized job found" if parameterized
                else "\n\nNo instances of periodic job found")
    rows = [["ID", "Status"]] + [[c["ID"], c["Status"]] for c in children
                                 if c.get("ParentID") == job["ID"]]
    return section("Dispatched Jobs" if parameterized else "Previously Launched Jobs",
                   format_list(rows))


def parameterized_text(job: dict[str, Any]) -> str:
    config = job["ParameterizedJob"]
    return section("Parameterized Job", format_kv([
        ("Payload", config.get("Payload", "")),
        ("Required Metadata", ", ".join(config.get("MetaRequired") or [])),
        ("Optional Metadata", ", ".join(config.get("MetaOptional") or []))]))


def job_detail_text(data: dict[str, Any], *, short: bool = False, verbose: bool = False,
                    evals: bool = False, now_ns: int | None = None) -> str:
    """`job status JOB`'s whole text from the data `job_status` fetched (`Job`, `Summary`,
    `Allocations`, `Evaluations`, `LatestDeployment`, and `Children` for a job that makes
    children). Pure: `now_ns` defaults to the clock only when not given."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    now = datetime.fromtimestamp(now_ns / 1e9, tz=UTC)
    job = data["Job"]
    length = id_length(verbose)
    out = format_kv(job_header(job, now))
    if short:
        return out
    if is_periodic(job) and not is_parameterized(job):
        return out + summary_text(job, data.get("Summary")) + children_text(
            job, data.get("Children") or [])
    if is_parameterized(job):
        return (out + parameterized_text(job) + summary_text(job, data.get("Summary"))
                + children_text(job, data.get("Children") or []))
    out += summary_text(job, data.get("Summary"))
    job_evals = data.get("Evaluations") or []
    if verbose or evals:
        out += section("Evaluations", evals_table(job_evals, length))
    out += placement_failures(job_evals)
    if data.get("LatestDeployment"):
        out += section("Latest Deployment", deployment_text(data["LatestDeployment"], length))
    out += actions_text(job)
    out += section("Allocations", alloc_table(data.get("Allocations") or [], verbose=verbose,
                                              length=length, now_ns=now_ns))
    return out


def fetch_job(client: AgentConnection, job_id: str, *, all_allocs: bool = False
              ) -> dict[str, Any]:
    """Everything `job status JOB` shows, by Nomad's calls (Info, Summary, Allocations,
    Evaluations, LatestDeployment; the children by ID prefix for a job that makes them)."""
    from urllib.parse import quote

    from yurt.runtime.cli.api_client import call

    path = f"/v1/job/{quote(job_id, safe='')}"
    job = call(client, "GET", path)
    data: dict[str, Any] = {
        "Job": job,
        "Summary": call(client, "GET", f"{path}/summary"),
        "Allocations": call(client, "GET", f"{path}/allocations",
                            params={"all": "true"} if all_allocs else None),
        "LatestDeployment": call(client, "GET", f"{path}/deployment"),
        "Evaluations": call(client, "GET", f"{path}/evaluations"),
    }
    if is_periodic(job) or is_parameterized(job):
        # api.JobPeriodicLaunchSuffix, api.JobDispatchLaunchSuffix
        suffix = "/dispatch-" if is_parameterized(job) else "/periodic-"
        data["Children"] = call(client, "GET", "/v1/jobs",
                                params={"prefix": job["ID"] + suffix})
    return data


def job_status(job_id: str | None, *, json_output: bool = False, template: str = "",
               short: bool = False, verbose: bool = False, all_allocs: bool = False,
               evals: bool = False) -> None:
    """`yurt job status [JOB]` (see the module docstring)."""
    from yurt.runtime.cli.api_client import api, call, resolve_job
    from yurt.runtime.cli.output import check_format, echo, emit
    from yurt.runtime.cli.ui_hint import job_ref, ui_hint

    check_format(json_output, template)
    with api() as client:
        if job_id is None:
            jobs = call(client, "GET", "/v1/jobs")
            # Nomad adds the column for `-namespace '*'` (meta.go `allNamespaces`): the one
            # way a listing holds jobs of several namespaces, which is what is looked at here.
            all_namespaces = any(j.get("Namespace") != jobs[0].get("Namespace") for j in jobs)
            emit(jobs, json_output, template, lambda: echo(job_list_text(jobs, all_namespaces)))
            if not (json_output or template):
                ui_hint("job status")
            return
        data = fetch_job(client, resolve_job(client, job_id.strip()), all_allocs=all_allocs)
    machine = {k: data.get(k) for k in ("Job", "Summary", "Allocations", "LatestDeployment",
                                        "Evaluations")}
    emit(machine, json_output, template, lambda: echo(job_detail_text(
        data, short=short, verbose=verbose, evals=evals)))
    if not (json_output or template):
        job = data.get("Job") or {}
        ui_hint("job status single", job=job_ref(job.get("ID", ""), job.get("Namespace")))


def status_flags(f: Any) -> Any:
    """`job status`'s own flags, shared with `yurt status` (which hands them on)."""
    for decorator in (
        click.option("-short", "--short", "short", is_flag=True,
                     help="Only the job's header: no summary, deployment or allocations."),
        click.option("-verbose", "--verbose", "verbose", is_flag=True,
                     help="Full IDs and times, and the job's evaluations."),
        click.option("-all-allocs", "--all-allocs", "all_allocs", is_flag=True,
                     help="Every allocation of the job ID (yurt lists them all anyway)."),
        click.option("-evals", "--evals", "evals", is_flag=True,
                     help="Also show the job's evaluations."),
    ):
        f = decorator(f)
    return f


def register(job_group: click.Group) -> None:
    """Add `job status` to the `job` group (called from runtime/cli/__init__.py)."""

    @job_group.command("status")
    @click.argument("job_id", metavar="[JOB]", required=False)
    @status_flags
    @ui_option
    @output_options
    def job_status_command(job_id: str | None, short: bool, verbose: bool, all_allocs: bool,
                           evals: bool, json_output: bool, template: str) -> None:
        """List jobs, or show one job (an ID or a unique prefix of one): its summary,
        latest deployment, placement failures and allocations, as Nomad's `job status`."""
        job_status(job_id, json_output=json_output, template=template, short=short,
                   verbose=verbose, all_allocs=all_allocs, evals=evals)

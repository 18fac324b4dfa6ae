"""`yurt job dispatch -wait`: follow the dispatched job until it is dead, as Nomad's
command/job_dispatch.go `monitorDispatchedJob` does.

Under the line `Monitoring allocations for job "<id>"...`, each time the job changes (a
blocking query on `/v1/job/<id>`, 5 s at a time) the time and the "Deployed" table of its
summary (`formatTaskGroups`: Task Group, Queued, Complete, Failed, Running, Starting, Lost,
Unknown), with `-verbose` also its "Allocations", indented four spaces; printed again only
when it changed. Returns Nomad's exit code: 0 dead with no failed allocation, 2 dead with
one, 1 an error or `TIMEOUT` seconds gone by ("Timeout reached after 5m0s").
"""

from __future__ import annotations

import time
from typing import Any, Final
from urllib.parse import quote

from yurt.runtime.cli.output import echo, format_list

#: Nomad's timeout for `-wait`.
TIMEOUT: Final = 300.0


def task_groups_table(summary: dict[str, dict[str, int]]) -> str:
    """Nomad's `formatTaskGroups`. Pure."""
    keys = ("Queued", "Complete", "Failed", "Running", "Starting", "Lost", "Unknown")
    rows = [["Task Group", *keys]]
    rows += [[name, *(str(summary[name].get(k, 0)) for k in keys)] for name in sorted(summary)]
    return format_list(rows)


def follow_child(client: Any, job_id: str, verbose: bool, length: int) -> int:
    """Follow `job_id` until it is dead; the exit code (module header)."""
    from yurt.runtime.cli.api_client import call
    from yurt.runtime.cli.job_monitor import now_stamp
    from yurt.runtime.cli.statusfmt import alloc_list

    path = f"/v1/job/{quote(job_id, safe='')}"
    echo(f'  Monitoring allocations for job "{job_id[:length]}"...')
    deadline = time.monotonic() + TIMEOUT
    index, shown = "0", ""
    while True:
        response = client.request("GET", path, params={"index": index, "wait": "5s"})
        if response.status_code >= 400:
            echo(f"yurt: Error querying allocations: {response.text.strip()}", err=True)
            return 1
        job = response.json()
        index = response.headers.get("X-Nomad-Index", index) or index
        summary = (call(client, "GET", f"{path}/summary").get("Summary") or {})
        block = ["", "Deployed", task_groups_table(summary)]
        if verbose:
            allocs = call(client, "GET", f"{path}/allocations", params={"all": "true"})
            block += ["", "Allocations",
                      alloc_list(allocs, True, length) if allocs
                      else "No allocations created"]
        text = "\n".join(block)
        if text != shown:
            lines = ["", now_stamp(), *text.splitlines()[1:]]
            echo("\n".join("    " + line if line else "" for line in lines))
            shown = text
        if job.get("Status") == "dead":
            return 2 if any(s.get("Failed", 0) for s in summary.values()) else 0
        if time.monotonic() > deadline:
            echo("Timeout reached after 5m0s", err=True)
            return 1

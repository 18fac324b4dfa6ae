"""`yurt job history`, as Nomad's command/job_history.go prints it: each version's `Version`,
`Stable`, `Submit Date`, with `-p` its `Diff` from the version before it (or from the one
`-diff-tag` or `-diff-version` names: the API's `diff_tag`/`diff_version`, runtime/api/
job_lifecycle.py `versions`), with `-full` the whole job as JSON; `-json`/`-t` print the
versions instead, and are refused with `-p` or `-full` (Nomad's texts). A diff of type
"None" (a version against itself) is not printed, as Nomad's.

Exit codes: 0 ok, 1 an error, 2 bad input (a flag, an unknown version or tag).
"""

from __future__ import annotations

import json
from urllib.parse import quote

from yurt.runtime.cli.output import check_format, echo, emit_template, fail
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE


def submit_date(unix_ns: int) -> str:
    """Nomad's `job history` date: local time, to the second, with the zone."""
    from datetime import datetime

    return datetime.fromtimestamp(unix_ns / 1e9).astimezone().strftime("%Y-%m-%dT%H:%M:%S%z")


def check_flags(*, diffs: bool, diff_tag: str, diff_version: str, full: bool,
                formatted: bool) -> None:
    """command/job_history.go's checks, with its texts (exit 2)."""
    if formatted and (diffs or full):
        fail("-json and -t are exclusive with -p and -full", EXIT_USAGE)
    if (diff_tag or diff_version) and not diffs:
        fail("-diff-tag and -diff-version can only be used with -p", EXIT_USAGE)
    if diff_tag and diff_version:
        fail("-diff-tag and -diff-version are mutually exclusive", EXIT_USAGE)
    if diff_version and not (diff_version.isascii() and diff_version.isdigit()):
        fail(f'Error parsing -diff-version: strconv.ParseUint: parsing "{diff_version}": '
             "invalid syntax", EXIT_USAGE)


def show(job_id: str, *, diffs: bool, diff_tag: str, diff_version: str, full: bool,
         version: int | None, json_output: bool, template: str) -> None:
    """`yurt job history` (module header)."""
    from yurt.runtime.cli.api_client import api, emit_json, resolve_job
    from yurt.runtime.cli.history_diff import diff_lines

    check_format(json_output, template)
    check_flags(diffs=diffs, diff_tag=diff_tag, diff_version=diff_version, full=full,
                formatted=json_output or bool(template))
    params = {k: v for k, v in (("diffs", "true" if diffs else ""), ("diff_tag", diff_tag),
                                ("diff_version", diff_version)) if v}
    with api() as client:
        job_id = resolve_job(client, job_id)
        response = client.request("GET", f"/v1/job/{quote(job_id, safe='')}/versions",
                                  params=params)
        if response.status_code >= 400:
            fail(f"Error retrieving job versions: {response.text.strip()}",
                 EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)
        result = response.json()
    versions = result["Versions"]
    changes = result.get("Diffs") or []
    rows = [(v, changes[i] if i < len(changes) else None) for i, v in enumerate(versions)
            if version is None or v["Version"] == version]
    if version is not None and not rows:
        fail(f"job {job_id!r} has no version {version}", EXIT_USAGE)
    if template:
        emit_template(template, [v for v, _ in rows])
        return
    if json_output:
        emit_json([v for v, _ in rows])
        return
    for v, diff in rows:
        echo(f"Version     = {v['Version']}\nStable      = {str(v['Stable']).lower()}\n"
             f"Submit Date = {submit_date(v['SubmitTime'])}")
        if diff is not None and diff.get("Type") != "None":
            echo("\n".join(["Diff        =", *diff_lines(diff)]))
        if full:  # Nomad's "Full|JSON Job:" row, the job as its JSON formatter indents it
            echo("Full        = JSON Job:\n" + json.dumps(v, indent=4))
        echo()

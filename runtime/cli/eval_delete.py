"""`yurt eval delete [-filter EXPR] [-yes] [EVAL]`: Nomad's command/eval_delete.go, deleting
evaluations through `DELETE /v1/evaluations` (runtime/api/evaluations.py).

`register(cli)` attaches `delete` to the existing `eval` group (runtime/cli/jobs.py builds the
group; this module only adds a verb to it, from runtime/cli/cmds.py after jobs.py registered).

As Nomad's: the scheduler's eval broker must be paused first (`PauseEvalBroker` in the
scheduler configuration); when it is not, the command says how to pause it and exits 1
without deleting anything. An ID (or a unique prefix) deletes that one evaluation; `-filter`
deletes every evaluation the filter expression matches that is safe to delete (Nomad's
`deleteEvalsByFilter`, runtime/api/evaluations.py; a filter that does not parse: 400, exit 2),
after asking unless `-yes`. Output:
`Successfully deleted N evaluation(s)`, or `No evaluations were deleted`. Exit codes: 0 ok,
1 refused or failed (not paused, unknown, not safe to delete), 2 bad input.
"""

from __future__ import annotations

from urllib.parse import quote

import click

from yurt.runtime.cli.output import echo, fail
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

NOT_PAUSED_HINTS = (
    'To delete evaluations you must first pause the eval broker by running '
    '"yurt operator scheduler set-config -pause-eval-broker=true"',
    'After the deletion is complete, unpause the eval broker by running '
    '"yurt operator scheduler set-config -pause-eval-broker=false"',
)


def deleted_text(count: int) -> str:
    """Nomad's result line (`correctGrammar`)."""
    if count <= 0:
        return "No evaluations were deleted"
    return f"Successfully deleted {count} evaluation{'s' if count > 1 else ''}"


@click.command("delete")
@click.argument("eval_id", metavar="[EVAL]", required=False)
@click.option("-filter", "--filter", "filter_expr", default="", metavar="EXPR",
              help="Delete the evaluations this expression selects instead of one by ID.")
@click.option("-yes", "--yes", is_flag=True,
              help="Do not ask for confirmation when deleting by filter.")
def eval_delete(eval_id: str | None, filter_expr: str, yes: bool) -> None:
    """Delete an evaluation (the eval broker must be paused first)."""
    from yurt.runtime.cli.api_client import api, call

    if bool(eval_id) == bool(filter_expr):
        fail("Error validating command args and flags: evaluation ID or filter flag required",
             EXIT_USAGE)
    with api() as client:
        config = call(client, "GET", "/v1/operator/scheduler/configuration")
        if not (config.get("SchedulerConfig") or {}).get("PauseEvalBroker"):
            echo("yurt: Eval broker is not paused", err=True)
            for line in NOT_PAUSED_HINTS:
                echo(line)
            raise SystemExit(EXIT_FAILED)
        if eval_id:
            response = client.request("GET", f"/v1/evaluation/{quote(eval_id, safe='')}")
            if response.status_code >= 400:
                fail("Error deleting evaluations: " + response.text.strip(),
                     EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)
            body: dict[str, object] = {"EvalIDs": [response.json()["ID"]]}
        else:
            if not yes and not click.confirm("Are you sure you want to delete the evals the "
                                             "filter selects?", default=False):
                echo("Cancelling eval deletion")
                return
            body = {"Filter": filter_expr}
        response = client.request("DELETE", "/v1/evaluations", json=body)
    if response.status_code >= 400:
        fail("Error deleting evaluations: " + response.text.strip(),
             EXIT_USAGE if response.status_code == 400 else EXIT_FAILED)
    echo(deleted_text(int(response.json().get("Count", 0))))


def register(cli: click.Group) -> None:
    """Attach `delete` to the `eval` group jobs.py made."""
    group = cli.commands["eval"]
    assert isinstance(group, click.Group)
    group.add_command(eval_delete)

"""`yurt deployment list|status|promote|fail|pause|resume|unblock`: a job version's rollout,
through the agent, in the shape of Nomad's `command/deployment_*.go`.

`register(cli)` adds the `deployment` group. IDs are shown shortened to 8 characters unless
`-verbose`; a deployment is named by its ID or a unique prefix (an ambiguous one lists the
candidates, as Nomad does). How a deployment prints lives in deployfmt.py. Exit codes: 0 ok,
1 the request failed (unknown deployment, a refusal, agent unreachable), 2 bad input.

`resume` and `unblock` then follow the evaluation the server created with `job run`'s monitor
(runtime/cli/job_monitor.py, as Nomad's deployment_resume.go uses command/monitor.go), unless
`-detach`, which prints `Evaluation ID: <id>`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from yurt.runtime.cli.deployfmt import list_table, status_text
from yurt.runtime.cli.output import check_format, echo, emit
from yurt.runtime.cli.paging import filter_option
from yurt.runtime.cli.ui_hint import job_ref, ui_hint, ui_option
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

SHORT = 8


def _resolve(client: Any, prefix: str, length: int) -> dict[str, Any]:
    from yurt.runtime.cli.api_client import call
    from yurt.runtime.cli.output import fail

    found = call(client, "GET", "/v1/deployments", params={"prefix": prefix})
    if not found:
        fail(f"Error retrieving deployment: no deployment with prefix or id {prefix!r} "
              "found", EXIT_FAILED)
    if len(found) > 1:
        fail("Prefix matched multiple deployments\n\n" + list_table(found, length),
              EXIT_USAGE)
    return found[0]  # type: ignore[no-any-return]


def _wait_duration(text: str) -> str:
    """`-wait` as Nomad's flag.Duration reads it, for the blocking query's `wait`."""
    from yurt.runtime.cli.output import fail
    from yurt.runtime.lib.durations import parse_duration

    try:
        ns = parse_duration(text)
    except ValueError:
        fail(f'invalid value "{text}" for flag -wait: parse error', EXIT_USAGE)
    return f"{max(ns // 1_000_000, 1)}ms"


def _monitor(client: Any, deployment_id: str, length: int, wait: str, verbose: bool) -> None:
    """Nomad's `deployment status -monitor`: the headline, then the deployment monitor
    (runtime/cli/job_monitor.py `monitor_deployment`) until it ends; exit 0 however it
    ends, as Nomad's."""
    from yurt.runtime.cli.job_monitor import monitor_deployment, now_stamp

    echo(f'{now_stamp()}: Monitoring deployment "{deployment_id[:length]}"')
    monitor_deployment(client, deployment_id, length, wait=wait, verbose=verbose)


def _post(client: Any, path: str, body: dict[str, Any] | None, what: str) -> Any:
    from yurt.runtime.cli.output import fail

    response = client.request("POST", path, json=body)
    if response.status_code >= 400:
        fail(f"Error {what} deployment: {response.text.strip()}",
              EXIT_FAILED)
    return response.json()


def register(cli: click.Group) -> None:
    """Add the `deployment` group and its verbs to `yurt`."""
    json_flag = click.option("-json", "--json", "json_output", is_flag=True,
                             help="Print the API's JSON instead of text.")
    template_flag = click.option("-t", "template", default="", metavar="TEMPLATE",
                                 help="Format the API's data with a Go template (Nomad's -t).")
    verbose_flag = click.option("-verbose", "--verbose", "verbose", is_flag=True,
                                help="Show full IDs.")

    @cli.group("deployment")
    def deployment() -> None:
        """Interact with deployments (a job version's rollout)."""

    @deployment.command("list")
    @json_flag
    @template_flag
    @verbose_flag
    @filter_option
    def deployment_list(json_output: bool, template: str, verbose: bool,
                        filter_expr: str) -> None:
        """List deployments, oldest first."""
        from yurt.runtime.cli.api_client import api, call
        from yurt.runtime.cli.paging import page_params

        check_format(json_output, template)
        with api() as client:
            found = call(client, "GET", "/v1/deployments", params=page_params(filter_expr))
        emit(found, json_output, template,
             lambda: echo(list_table(found, 36 if verbose else SHORT)))

    @deployment.command("status")
    @click.argument("deployment_id", metavar="DEPLOYMENT")
    @json_flag
    @template_flag
    @verbose_flag
    @click.option("-monitor", "--monitor", "monitor", is_flag=True,
                  help="Follow the deployment until it ends, printing each change.")
    @click.option("-wait", "--wait", "wait", default="2s", metavar="DURATION",
                  help="With -monitor: how long each poll waits for a change (default 2s).")
    @ui_option
    def deployment_status(deployment_id: str, json_output: bool, template: str,
                          verbose: bool, monitor: bool, wait: str) -> None:
        """Show a deployment's status, per task group (with -monitor, until it ends)."""
        from yurt.runtime.cli.api_client import api, call

        if monitor and (json_output or template):
            from yurt.runtime.cli.output import fail

            fail("The monitor flag cannot be used with the '-json' or '-t' flags", EXIT_USAGE)
        check_format(json_output, template)
        wait = _wait_duration(wait)
        length = 36 if verbose else SHORT
        with api() as client:
            d = _resolve(client, deployment_id, length)
            if monitor:
                _monitor(client, d["ID"], length, wait, verbose)
                return
            d = call(client, "GET", f"/v1/deployment/{quote(d['ID'], safe='')}")
        emit(d, json_output, template, lambda: echo(status_text(d, length)))
        if not (json_output or template):
            ui_hint("deployment status", job=job_ref(d["JobID"], d.get("Namespace")))

    @deployment.command("promote")
    @click.argument("deployment_id", metavar="DEPLOYMENT")
    @click.option("-group", "groups", multiple=True, metavar="GROUP",
                  help="Promote only this task group's canaries (repeatable).")
    @click.option("-detach", "detach", is_flag=True,
                  help="Return once promoted (yurt never waits here).")
    @verbose_flag
    def deployment_promote(deployment_id: str, groups: tuple[str, ...], detach: bool,
                           verbose: bool) -> None:
        """Promote a deployment's canaries, so the rollout goes on."""
        from yurt.runtime.cli.api_client import api

        with api() as client:
            d = _resolve(client, deployment_id, 36 if verbose else SHORT)
            body: dict[str, Any] = {"DeploymentID": d["ID"]}
            body.update({"Groups": list(groups)} if groups else {"All": True})
            out = _post(client, f"/v1/deployment/promote/{quote(d['ID'], safe='')}", body,
                        "promoting")
        if out.get("EvalID"):
            echo("Evaluation ID: " + out["EvalID"])

    def _act(deployment_id: str, verbose: bool, path: str, body: dict[str, Any] | None,
             doing: str, done: str, detach: bool | None) -> None:
        """pause/resume/unblock: resolve, act, say so; then monitor (`detach` False) or
        print the evaluation (`detach` True); `detach` None never monitors."""
        import sys

        from yurt.runtime.cli.api_client import api

        length = 36 if verbose else SHORT
        with api() as client:
            d = _resolve(client, deployment_id, length)
            out = _post(client, f"/v1/deployment/{path}/{quote(d['ID'], safe='')}",
                        {"DeploymentID": d["ID"], **(body or {})}, doing)
            echo(f'Deployment "{d["ID"]}" {done}')
            if not out.get("EvalID") or detach is None:
                return
            if detach:
                echo("Evaluation ID: " + out["EvalID"])
                return
            echo()
            from yurt.runtime.cli.job_monitor import monitor

            sys.exit(monitor(client, out["EvalID"], length))  # deployment_resume.go's monitor

    detach_flag = click.option(
        "-detach", "--detach", "detach", is_flag=True,
        help="Return at once, printing the evaluation ID, instead of monitoring it.")

    @deployment.command("pause")
    @click.argument("deployment_id", metavar="DEPLOYMENT")
    @verbose_flag
    def deployment_pause(deployment_id: str, verbose: bool) -> None:
        """Pause a deployment: no new allocations are placed for its rollout."""
        _act(deployment_id, verbose, "pause", {"Pause": True}, "pausing", "paused", None)

    @deployment.command("resume")
    @click.argument("deployment_id", metavar="DEPLOYMENT")
    @detach_flag
    @verbose_flag
    def deployment_resume(deployment_id: str, detach: bool, verbose: bool) -> None:
        """Resume a paused deployment, then monitor the evaluation it makes."""
        _act(deployment_id, verbose, "pause", {"Pause": False}, "resuming", "resumed",
             detach)

    @deployment.command("unblock")
    @click.argument("deployment_id", metavar="DEPLOYMENT")
    @detach_flag
    @verbose_flag
    def deployment_unblock(deployment_id: str, detach: bool, verbose: bool) -> None:
        """Unblock a multiregion deployment waiting for its peer regions."""
        _act(deployment_id, verbose, "unblock", None, "unblocking", "unblocked", detach)

    @deployment.command("fail")
    @click.argument("deployment_id", metavar="DEPLOYMENT")
    @click.option("-detach", "detach", is_flag=True,
                  help="Return once failed (yurt never waits here).")
    @verbose_flag
    def deployment_fail(deployment_id: str, detach: bool, verbose: bool) -> None:
        """Mark a running deployment failed (and roll back if its groups auto-revert)."""
        from yurt.runtime.cli.api_client import api

        with api() as client:
            d = _resolve(client, deployment_id, 36 if verbose else SHORT)
            out = _post(client, f"/v1/deployment/fail/{quote(d['ID'], safe='')}", None,
                        "failing")
        if out.get("RevertedJobVersion") is None:
            echo(f'Deployment "{d["ID"]}" failed')
        else:
            echo(f'Deployment "{d["ID"]}" failed. Auto-reverted to job version '
                       f'{out["RevertedJobVersion"]}.')
        if out.get("EvalID"):
            echo("Evaluation ID: " + out["EvalID"])

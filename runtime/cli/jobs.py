"""CLI verbs for a job's lifecycle and evaluations, in Nomad's spelling: `yurt job plan|history|
revert|scale|inspect|eval` and `yurt eval list|status`. Thin clients of the agent's API
(runtime/cli/api_client.py's `api()`/`call()`), human output by default, the API's JSON with
`--json`. Job files are read by runtime/cli/jobfile.py, placement failures worded by
runtime/cli/evalfmt.py.

Exit codes: 0 ok, 1 failed, 2 bad input (and a group that cannot be placed: evalfmt.py's
`evaluation_failures`). `job plan` has Nomad's: 0 no change, 1 allocations would be created,
destroyed, migrated, replaced or canaried (or fail to place), 255 no plan could be made.
Its text is Nomad's `job plan`'s (`print_plan`): the diff (runtime/cli/job_diff.py: three lines
for a new job unless `-verbose`), "Scheduler dry-run:", and the `job run -check-index N` hint;
`-json` means the input is JSON, as Nomad's, and `-json-output`/`-t` print the result.
The commands' bodies live beside it: `job history` in runtime/cli/job_history.py, `job
revert|scale|eval` (which monitor their evaluation unless `-detach`) in job_actions.py,
`eval status` and `eval list`'s table in eval_status.py.
"""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import quote

import click

from yurt.runtime.cli.jobfile import var_options
from yurt.runtime.cli.output import echo, output_options
from yurt.runtime.cli.paging import filter_option, page_options
from yurt.runtime.cli.ui_hint import ui_hint, ui_option
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE

#: `job plan`'s exit code when no plan could be made, Nomad's.
EXIT_PLAN_ERROR = 255


def plan_changes(result: dict[str, Any]) -> bool:
    """Nomad's `job plan` exit rule (`getExitCode`): an unchanged job changes nothing;
    otherwise allocations stopped, placed, migrated, replaced or canaried are changes. A group
    that fails to place counts too: Nomad counts those in Place, yurt's plan in
    FailedTGAllocs only."""
    if (result.get("Diff") or {}).get("Type") == "None":
        return False
    updates = (result.get("Annotations") or {}).get("DesiredTGUpdates") or {}
    return bool(result.get("FailedTGAllocs")) or any(
        sum(u.get(k) or 0 for k in ("Stop", "Place", "Migrate", "DestructiveUpdate", "Canary"))
        for u in updates.values())


def _json_flag(f: Any) -> Any:
    return click.option("--json", "json_output", is_flag=True,
                        help="Print the API's JSON instead of text.")(f)


def _detach_flag(f: Any) -> Any:
    return click.option("--detach", is_flag=True,
                        help="Return at once, printing the evaluation ID, instead of "
                             "monitoring it.")(f)


def _verbose_flag(f: Any) -> Any:
    return click.option("--verbose", is_flag=True, help="Show full IDs.")(f)


def print_evals(evals: list[dict[str, Any]], verbose: bool = False) -> None:
    """Nomad's `eval list` table (`formatEvalList`), or its "No evals found"."""
    from yurt.runtime.cli.eval_status import format_eval_list

    echo(format_eval_list(evals, verbose) if evals else "No evals found")


def print_plan(spec: Any, result: dict[str, Any], path: str, *, show_diff: bool,
               verbose: bool, strict: bool) -> None:
    """`job plan`'s text as Nomad's `outputPlannedJob` and `formatJobModifyIndex` print it:
    the diff (runtime/cli/job_diff.py), "Scheduler dry-run:", warnings, and the
    `-check-index` hint naming the -var/-var-file flags the plan was given."""
    import shlex

    from yurt.runtime.cli.evalfmt import format_alloc_metrics
    from yurt.runtime.cli.job_diff import format_job_diff
    from yurt.runtime.cli.jobfile import given_variables

    if show_diff:
        diff = result.get("Diff") or {"Type": "None", "ID": spec.id}
        echo(format_job_diff(diff, verbose) + "\n")
    echo("Scheduler dry-run:")
    failed = result.get("FailedTGAllocs") or {}
    if not failed:
        echo("- All tasks successfully allocated.")
    else:
        lines = ["- WARNING: Failed to place allocations on all nodes." if spec.type == "system"
                 else "- WARNING: Failed to place all allocations."]
        for group, metric in sorted(failed.items()):
            count = 1 + (metric.get("CoalescedFailures") or 0)
            noun = "allocation" if count == 1 else "allocations"
            lines.append(f'  Task Group "{group}" (failed to place {count} {noun}):')
            lines += format_alloc_metrics(metric, "    ")
            lines.append("")
        echo("\n".join(lines).rstrip("\n"))
    echo()
    if result.get("Warnings"):
        echo(f"Job Warnings:\n{result['Warnings']}\n")
    variables, var_files = given_variables()
    args = "".join([*(f"-var={shlex.quote(v)} " for v in variables),
                    *(f"-var-file={shlex.quote(f)} " for f in var_files),
                    "" if strict else "-hcl2-strict=false "])
    index = result.get("JobModifyIndex", 0)
    echo(f"Job Modify Index: {index}\n"
         "To submit the job with version verification run:\n\n"
         f"yurt job run -check-index {index} {args}{shlex.quote(path)}\n\n"
         "When running the job with the check-index flag, the job will only be run if the\n"
         "job modify index given matches the server-side version. If the index has\n"
         "changed, another user has modified the job and the plan's results are\n"
         "potentially invalid.")


def register(cli: click.Group, job: click.Group) -> None:
    """Attach the verbs to yurt's `job` group and a new `eval` group under `cli`."""

    @job.command("plan")
    @click.argument("file", metavar="FILE")
    @click.option("--diff", "show_diff", default=True, is_flag=False, flag_value=True,
                  type=click.BOOL, metavar="[=BOOL]",
                  help="Show the diff between the job and the server's (default true).")
    @click.option("--verbose", is_flag=True,
                  help="Show every field of added and deleted groups and tasks.")
    @click.option("--json", "as_json", is_flag=True,
                  help="Parse the job file as JSON (Nomad's -json; -json-output prints JSON).")
    @click.option("--json-output", "json_output", is_flag=True,
                  help="Print the plan result as JSON.")
    @click.option("-t", "template", default="", metavar="TEMPLATE",
                  help="Format the plan result with a Go template.")
    @click.option("--hcl2-strict", "strict", default=True, is_flag=False,
                  flag_value=True, type=click.BOOL, metavar="[=BOOL]",
                  help="Refuse -var values for variables the file does not declare.")
    @click.option("--policy-override", is_flag=True,
                  help="Accepted for Nomad's scripts (yurt has no Sentinel policies).")
    @click.option("--vault-namespace", default="", metavar="NAMESPACE",
                  help="Refused: yurt has no Vault.")
    @var_options
    def job_plan(file: str, show_diff: bool, verbose: bool, as_json: bool, json_output: bool,
                 template: str, strict: bool, policy_override: bool,
                 vault_namespace: str) -> None:
        """Dry-run a job: what registering it would place, stop or update (changes nothing).
        FILE `-` reads stdin. Exit 0: no allocations created or destroyed; 1: some would
        be; 255: no plan could be made (Nomad's codes)."""
        from yurt.runtime.cli.api_client import api, call
        from yurt.runtime.cli.jobfile import load_job_file, read_options
        from yurt.runtime.jobspec import encode_job

        if json_output and template:
            echo("yurt: Both -json-output and -t formatting are not allowed", err=True)
            sys.exit(EXIT_PLAN_ERROR)
        if vault_namespace:
            echo("yurt: -vault-namespace is not supported: yurt has no Vault", err=True)
            sys.exit(EXIT_PLAN_ERROR)
        read_options(as_json=as_json, strict=strict)
        try:
            from yurt.runtime.cli.general import into_namespace

            spec = into_namespace(load_job_file(file))  # unless the file names one
            body = {**json.loads(encode_job(spec)), "Diff": True,
                    "PolicyOverride": policy_override}
            with api() as client:
                result = call(client, "PUT", f"/v1/job/{quote(spec.id, safe='')}/plan",
                              json=body)
        except SystemExit as e:
            # Nomad's plan: 255 when the plan could not be made (job file, agent, request).
            sys.exit(EXIT_PLAN_ERROR if e.code not in (0, None) else 0)
        code = EXIT_FAILED if plan_changes(result) else 0
        if json_output or template:
            from yurt.runtime.cli.output import emit

            emit(result, json_output, template, lambda: None)
            sys.exit(code)
        print_plan(spec, result, file, show_diff=show_diff, verbose=verbose, strict=strict)
        sys.exit(code)

    @job.command("history")
    @click.argument("job_id", metavar="JOB")
    @click.option("-p", "diffs", is_flag=True,
                  help="Show each version's diff from the one before it (or the reference "
                       "-diff-tag or -diff-version names).")
    @click.option("--diff-tag", "diff_tag", default="", metavar="TAG",
                  help="With -p: diff against the version with this tag.")
    @click.option("--diff-version", "diff_version", default="", metavar="VERSION",
                  help="With -p: diff against this version.")
    @click.option("--full", is_flag=True, help="Show each version's whole job as JSON.")
    @click.option("--version", "version", type=int, default=None, help="Only this version.")
    @output_options
    def job_history(job_id: str, diffs: bool, diff_tag: str, diff_version: str, full: bool,
                    version: int | None, json_output: bool, template: str) -> None:
        """The job's versions, newest first (with -p, what each changed)."""
        from yurt.runtime.cli.job_history import show

        show(job_id, diffs=diffs, diff_tag=diff_tag, diff_version=diff_version, full=full,
             version=version, json_output=json_output, template=template)

    @job.command("revert")
    @click.argument("job_id", metavar="JOB")
    @click.argument("version", type=int)
    @_detach_flag
    @_verbose_flag
    @_json_flag
    def job_revert(job_id: str, version: int, detach: bool, verbose: bool,
                   json_output: bool) -> None:
        """Register an earlier version of the job again, as a new version, then monitor
        its evaluation (runtime/cli/job_actions.py)."""
        from yurt.runtime.cli.job_actions import revert

        revert(job_id, version, detach=detach, verbose=verbose, json_output=json_output)

    @job.command("scale")
    @click.argument("job_id", metavar="JOB")
    @click.argument("args", nargs=-1, metavar="[GROUP] COUNT")
    @click.option("--check-index", "check_index", type=click.IntRange(0), default=0,
                  help="Scale only if the job's modify index is this (0: no check).")
    @_detach_flag
    @_verbose_flag
    @_json_flag
    def job_scale(job_id: str, args: tuple[str, ...], check_index: int, detach: bool,
                  verbose: bool, json_output: bool) -> None:
        """Set a group's count (the group may be left out when the job has only one), then
        monitor the evaluation (runtime/cli/job_actions.py)."""
        from yurt.runtime.cli.job_actions import scale

        scale(job_id, args, check_index=check_index, detach=detach, verbose=verbose,
              json_output=json_output)

    @job.command("inspect")
    @click.argument("job_id", metavar="[JOB]", required=False)
    @click.option("--version", "version", type=int, default=None, help="An earlier version.")
    @click.option("-t", "template", default="", metavar="TEMPLATE",
                  help="Format the job with a Go template (Nomad's -t) instead of JSON.")
    @click.option("-hcl", "--hcl", "hcl", is_flag=True,
                  help="The job file the version was registered from (its submission).")
    @click.option("-with-vars", "--with-vars", "with_vars", is_flag=True,
                  help="With -hcl: how to run it again with the variables it was given.")
    @click.option("--json", "as_json", is_flag=True,
                  help="The job itself as JSON, without the {\"Job\": ...} wrapper "
                       "(Nomad's -json); without JOB, every job.")
    def job_inspect(job_id: str | None, version: int | None, template: str, hcl: bool,
                    with_vars: bool, as_json: bool) -> None:
        """The job as the server has it, as JSON (`{"Job": ...}`, as Nomad prints it); with
        -hcl, the source it was registered from (command/job_inspect.go `getJobHCL`)."""
        from yurt.runtime.cli.api_client import api, call, emit_json, resolve_job
        from yurt.runtime.cli.output import check_format, emit_template, fail

        if hcl and as_json:
            fail("can only use one of -hcl or -json", EXIT_USAGE)
        if with_vars and not hcl:
            fail("can only use -with-vars with -hcl", EXIT_USAGE)
        check_format(as_json, template)
        if job_id is None:
            if not (as_json or template):
                fail("This command takes one argument: <job>", EXIT_USAGE)
            with api() as client:  # Nomad: every job's stub, formatted
                jobs = call(client, "GET", "/v1/jobs")
            emit_template(template, jobs) if template else emit_json(jobs)
            return
        with api() as client:
            job_id = resolve_job(client, job_id)
            path = f"/v1/job/{quote(job_id, safe='')}"
            if hcl:
                _inspect_hcl(client, job_id, path, version, with_vars)
                return
            if version is None:
                spec = call(client, "GET", path)
            else:
                versions = call(client, "GET", f"{path}/versions")["Versions"]
                found = [v for v in versions if v["Version"] == version]
                if not found:
                    fail(f"job {job_id!r} has no version {version}", EXIT_USAGE)
                spec = found[0]
        if template:  # Nomad's -t sees the job itself, not the {"Job": ...} wrapper
            emit_template(template, spec)
            return
        emit_json(spec if as_json else {"Job": spec})

    def _inspect_hcl(client: Any, job_id: str, path: str, version: int | None,
                     with_vars: bool) -> None:
        """`job inspect -hcl [-with-vars]`: the version's submitted source on stdout, and
        with -with-vars, on stderr, how to run it again (command/job_inspect.go
        `getWithVarsOutput`: the -var flags sorted, then each line of the variables)."""
        import shlex

        from yurt.runtime.cli.api_client import call, fail_on_error
        from yurt.runtime.cli.output import echo_raw, fail

        if version is None:
            version = int(call(client, "GET", path)["Version"])
        response = client.request("GET", f"{path}/submission", params={"version": version})
        if response.status_code == 404:
            fail(f"Error inspecting job: job {job_id!r} with version {version} couldn't be "
                 "found (registered without its source?)")
        fail_on_error(response)
        sub = response.json()
        echo_raw(sub["Source"])
        if with_vars:
            args = [f"-var={k}={v}" for k, v in sorted((sub.get("VariableFlags") or {}).items())]
            args += [f"-var={line.strip()}" for line in sub.get("Variables", "").split("\n")
                     if line.strip()]
            file = f"{job_id.replace('/', '_')}.nomad.hcl"
            ns = f" -namespace {shlex.quote(sub['Namespace'])}" if sub.get("Namespace") else ""
            run = " ".join(shlex.quote(a) for a in args)
            echo(f"\nTo run this job as originally submitted:\n\n"
                 f"$ yurt job inspect{ns} -hcl {shlex.quote(job_id)} > {shlex.quote(file)}\n"
                 f"$ yurt job run {run + ' ' if run else ''}{shlex.quote(file)}", err=True)

    @job.command("eval")
    @click.argument("job_id", metavar="JOB")
    @click.option("--force-reschedule", "force_reschedule", is_flag=True,
                  help="Replace failed allocations now, even those their reschedule policy "
                       "would not replace yet.")
    @_detach_flag
    @_verbose_flag
    @_json_flag
    def job_eval(job_id: str, force_reschedule: bool, detach: bool, verbose: bool,
                 json_output: bool) -> None:
        """Force a new evaluation of the job (places what is missing), then monitor it."""
        from yurt.runtime.cli.job_actions import evaluate

        evaluate(job_id, force_reschedule=force_reschedule, detach=detach, verbose=verbose,
                 json_output=json_output)

    @cli.group("eval")
    def eval_group() -> None:
        """Evaluations: why the scheduler ran, and what it could not place."""

    @eval_group.command("list")
    @click.option("--job", "job_id", default="", help="Only this job's.")
    @click.option("--status", default="", help="Only with this status.")
    @filter_option
    @page_options
    @_verbose_flag
    @ui_option
    @output_options
    def eval_list(job_id: str, status: str, filter_expr: str, per_page: int, page_token: str,
                  verbose: bool, json_output: bool, template: str) -> None:
        """List evaluations, newest first."""
        from yurt.runtime.cli.api_client import api
        from yurt.runtime.cli.output import check_format, emit
        from yurt.runtime.cli.paging import get_page, next_page_hint, page_params

        check_format(json_output, template)
        params = {k: v for k, v in (("job", job_id), ("status", status)) if v}
        with api() as client:
            paging = page_params("", per_page, page_token)
            # Pages go newest first too: the API's order, reversed.
            evals, next_token = get_page(client, "/v1/evaluations", {
                **params, **page_params(filter_expr), **paging,
                **({"reverse": "true"} if paging else {})})
        # Newest first, as Nomad lists them.
        evals = sorted(evals, key=lambda e: -e.get("CreateIndex", 0))

        def human() -> None:
            print_evals(evals, verbose)
            if next_token:
                echo(next_page_hint(next_token))
        emit(evals, json_output, template, human)
        if not (json_output or template):
            ui_hint("eval list")

    @eval_group.command("status")
    @click.argument("eval_id", metavar="EVAL")
    @click.option("--monitor", is_flag=True,
                  help="Follow the evaluation until it is done, as `job run` does.")
    @click.option("--verbose", is_flag=True,
                  help="Full IDs, exact times, and every plan annotation column.")
    @ui_option
    @output_options
    def eval_status(eval_id: str, monitor: bool, verbose: bool, json_output: bool,
                    template: str) -> None:
        """One evaluation: status, trigger, placements and placement failures (Nomad's
        `eval status`; runtime/cli/eval_status.py)."""
        from yurt.runtime.cli.eval_status import show

        show(eval_id, monitor=monitor, verbose=verbose, json_output=json_output,
             template=template)

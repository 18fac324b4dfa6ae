"""`yurt var get|put|list|purge` (`var lock|init`: var_lock.py) and
`yurt namespace list|apply|delete|status`.

Thin clients of /v1/var(s) and /v1/namespace(s), in Nomad's spelling: flags take one dash as
Nomad's do (`-check-index`, `-namespace`), or two as the rest of yurt's. Messages are Nomad's
(`Created variable "p" with modify index 12`, `Successfully purged variable "p"!`). As with
Nomad, `var put` is a check-and-set: it creates a variable that does not exist yet, and
overwrites one only with `-check-index=<its ModifyIndex>` or `-force`; a conflict is reported
with both indexes and exits 1. Exit codes: 0 ok, 1 failed (or not found), 2 bad input.

Items on the command line are `key=value`; `key=@file` reads the value from a file, `key=-`
from stdin, and `key=` removes the item, as `nomad var put` reads them.
"""

from __future__ import annotations

from typing import Any

import click

from yurt.runtime.cli.output import echo
from yurt.runtime.cli.paging import filter_option, page_options
from yurt.runtime.cli.ui_hint import refuse_ui
from yurt.runtime.cli.var_common import (
    _cas_conflict,
    _params,
    _print_pairs,
    _print_variable,
    _send,
    _time,
)
from yurt.runtime.errors import EXIT_USAGE


def register(cli: click.Group) -> None:
    """Attach the `var` and `namespace` groups to the top-level group."""
    from yurt.runtime.cli.var_lock import register as register_lock_and_init

    register_lock_and_init(var)  # var lock, var init
    cli.add_command(var)
    cli.add_command(namespace)


def _namespace_option(f: Any) -> Any:
    return click.option("-namespace", "--namespace", "ns", default="",
                        help="Namespace (default: default; `*` lists every one).")(f)


def _json_option(f: Any) -> Any:
    """`-json` and Nomad's `-t TEMPLATE` (a Go template over the API's data)."""
    from yurt.runtime.cli.output import output_options

    return output_options(f)


def _check_index(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) >= 1 << 64:
        from yurt.runtime.cli.output import fail

        fail(f"Invalid -check-index value {value!r}: not parsable as uint64", EXIT_USAGE)
    return int(value)


# --------------------------------------------------------------------------- var


@click.group()
def var() -> None:
    """Nomad Variables: secrets and settings at a path, encrypted at rest."""


@var.command("get")
@_namespace_option
@refuse_ui("variables")
@click.option("-item", "--item", default="", help="Print only this item's value.")
@click.option("-out", "--out", "out", type=click.Choice(["table", "json", "go-template"]),
              default="table", help="The output format (go-template: with -template).")
@click.option("-json", "--json", "json_output", is_flag=True, help="The same as -out json.")
@click.option("-t", "-template", "--template", "template", default="", metavar="TEMPLATE",
              help="Format the variable with a Go template (Nomad's -template).")
@click.argument("path")
def var_get(ns: str, item: str, out: str, json_output: bool, template: str, path: str
            ) -> None:
    """Print a variable (or one of its items)."""
    from yurt.runtime.cli.api_client import api, call, emit_json
    from yurt.runtime.cli.output import check_format, echo_raw, emit_template, fail

    check_format(json_output or out == "json", template)
    if out == "go-template" and not template:
        fail("A template must be supplied using '-template' when using go-template "
              "formatting", EXIT_USAGE)
    with api() as client:
        found = call(client, "GET", f"/v1/var/{path}", params=_params(ns))
    if item:
        items = found.get("Items") or {}
        if item not in items:
            fail(f"Variable does not contain {item!r} item")
        echo_raw(items[item])  # the value itself, as Nomad's -item prints it for scripts
    elif template:
        emit_template(template, found)
    elif json_output or out == "json":
        emit_json(found)
    else:
        _print_variable(found)


@var.command("put")
@_namespace_option
@refuse_ui("variables")
@click.option("-check-index", "--check-index", "check_index", default=None,
              help="Write only if the variable's ModifyIndex is this (0: only if new).")
@click.option("-force", "--force", is_flag=True, help="Write whatever is stored now.")
@click.option("-in", "--in", "in_fmt", default="json", metavar="hcl|json",
              help="The format of a specification read from stdin (`-`) or from a file "
                   "whose extension does not say.")
@click.option("-out", "--out", "out", default="none",
              metavar="go-template|hcl|json|none|table", help="How to print the variable.")
@click.option("-template", "--template", "template", default="", metavar="TEMPLATE",
              help="With -out go-template: the Go template.")
@click.option("-verbose", "--verbose", is_flag=True, help="Say each step on stderr.")
@click.argument("args", nargs=-1, required=True, metavar="PATH|@SPEC|- [@SPEC|-] [K=V]...")
def var_put(ns: str, check_index: str | None, force: bool, in_fmt: str, out: str,
            template: str, verbose: bool, args: tuple[str, ...]) -> None:
    """Create or update a variable from a specification (@file or - for stdin) and/or
    key=value items."""
    from yurt.runtime.cli.output import fail
    from yurt.runtime.cli.var_put import put

    if ns == "*":
        fail("Cannot use the '*' wildcard namespace", EXIT_USAGE)
    put(args, ns=ns, check_index=_check_index(check_index), force=force, in_fmt=in_fmt,
        out=out, template=template, verbose=verbose)


@var.command("list")
@_namespace_option
@refuse_ui("variables")
@_json_option
@filter_option
@page_options
@click.option("-out", "--out", "out", default="", metavar="go-template|json|table|terse",
              help="How to print the list (default table; terse: the paths alone).")
@click.option("-template", "--template", "go_template", default="", metavar="TEMPLATE",
              help="With -out go-template: the Go template.")
@click.argument("prefix", default="")
def var_list(ns: str, json_output: bool, template: str, filter_expr: str, per_page: int,
             page_token: str, out: str, go_template: str, prefix: str) -> None:
    """List variables (their metadata, never their items) under a prefix."""
    from yurt.runtime.cli.api_client import api
    from yurt.runtime.cli.output import check_format, emit, emit_json, fail, format_list
    from yurt.runtime.cli.paging import get_page, page_params
    from yurt.runtime.cli.var_put import LIST_FORMATS, list_out, output_problem

    check_format(json_output, template)
    if out or go_template:  # Nomad's -out/-template (command/var_list.go)
        problem = output_problem(out or "table", go_template, LIST_FORMATS)
        if problem is None and (json_output or template):
            problem = "-out cannot be used with -json or -t"
        if problem is not None:
            fail(problem, EXIT_USAGE)
    if filter_expr:  # command/var_list.go `msgWarnFilterPerformance`, on stderr
        echo("Filter queries require a full scan of the data; use prefix searching where "
             "possible", err=True)
    with api() as client:
        found, next_token = get_page(client, "/v1/vars", {
            **_params(ns, prefix=prefix), **page_params(filter_expr, per_page, page_token)})
    if json_output and per_page > 0:
        # command/var_list.go: a paged answer is wrapped so its next token reaches scripts.
        emit_json({"Data": found, "QueryMeta": {"NextToken": next_token}})
        return

    def human() -> None:
        if not found:
            echo("No variables found")
            return
        echo(format_list([["Namespace", "Path", "Last Updated"],
                                *([v["Namespace"], v["Path"], _time(v["ModifyTime"])]
                                  for v in found)]))

    if out and out != "table":
        list_out(found, out, go_template, ns)
    else:
        emit(found, json_output, template, human)
    if next_token:  # on stderr, so scripts reading paths from stdout need no special case
        echo(f"Next page token: {next_token}", err=True)

@var.command("purge")
@_namespace_option
@click.option("-check-index", "--check-index", "check_index", default=None,
              help="Delete only if the variable's ModifyIndex is this.")
@click.argument("path")
def var_purge(ns: str, check_index: str | None, path: str) -> None:
    """Delete a variable."""
    from yurt.runtime.cli.api_client import api
    from yurt.runtime.cli.output import fail

    if ns == "*":
        fail("Cannot use the '*' wildcard namespace", EXIT_USAGE)
    index = _check_index(check_index)
    with api() as client:
        response = _send(client, "DELETE", f"/v1/var/{path}", params=_params(
            ns, **({} if index is None else {"cas": str(index)})))
    if response.status_code == 409:
        _cas_conflict(response, index or 0)
    echo(f'Successfully purged variable "{path}"!')


# --------------------------------------------------------------------------- namespace


@click.group()
def namespace() -> None:
    """Namespaces: scopes for jobs, allocations and variables."""


@namespace.command("list")
@_json_option
def namespace_list(json_output: bool, template: str) -> None:
    """List namespaces."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import check_format, emit, format_list

    check_format(json_output, template)
    with api() as client:
        found = call(client, "GET", "/v1/namespaces")

    def human() -> None:
        if not found:
            echo("No namespaces found")
            return
        echo(format_list([["Name", "Description"],
                                *([ns["Name"], ns["Description"]] for ns in found)]))

    emit(found, json_output, template, human)


@namespace.command("apply")
@click.option("-description", "--description", default=None, help="A description.")
@click.option("-quota", "--quota", default=None, help="Kept, not enforced (Enterprise).")
@click.option("-meta", "--meta", "meta", multiple=True, help="key=value (repeatable).")
@click.option("-json", "--json", "json_input", is_flag=True,
              help="Read the specification file as JSON (the API's Namespace), not HCL.")
@click.argument("name", metavar="NAME|FILE|-")
def namespace_apply(description: str | None, quota: str | None, meta: tuple[str, ...],
                    json_input: bool, name: str) -> None:
    """Create or update a namespace (flags not given keep their current value), or apply a
    specification file (`-`: stdin; HCL, or JSON with -json)."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.namespace_spec import NamespaceSpecError, is_spec_argument, read_spec
    from yurt.runtime.cli.output import fail

    if is_spec_argument(name):  # Nomad's command/namespace_apply.go: a file wins over flags
        if description is not None or quota is not None or meta:
            echo("Flags are ignored when a file is specified!", err=True)
        try:
            spec = read_spec(name, json_input)
        except NamespaceSpecError as e:
            fail(str(e), EXIT_USAGE)
        if not isinstance(spec.get("Name"), str) or not spec["Name"]:
            fail("Namespace name required", EXIT_USAGE)
        with api() as client:
            call(client, "PUT", f"/v1/namespace/{spec['Name']}", json=spec)
        echo(f'Successfully applied namespace "{spec["Name"]}"!')
        return
    if json_input:
        fail(f"-json reads a specification file, and {name!r} is none", EXIT_USAGE)
    with api() as client:
        existing = client.get(f"/v1/namespace/{name}")
        body: dict[str, Any] = existing.json() if existing.status_code == 200 else {}
        body["Name"] = name
        if description is not None:
            body["Description"] = description
        if quota is not None:
            body["Quota"] = quota
        for pair in meta:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                fail(f"-meta takes key=value, got {pair!r}", EXIT_USAGE)
            body["Meta"] = {**(body.get("Meta") or {}), key: value}
        call(client, "PUT", f"/v1/namespace/{name}", json=body)
    echo(f'Successfully applied namespace "{name}"!')


@namespace.command("delete")
@click.argument("name")
def namespace_delete(name: str) -> None:
    """Delete a namespace (refused while it has live jobs or any variable)."""
    from yurt.runtime.cli.api_client import api, call

    with api() as client:
        call(client, "DELETE", f"/v1/namespace/{name}")
    echo(f'Successfully deleted namespace "{name}"!')


@namespace.command("status")
@_json_option
@click.argument("name")
def namespace_status(json_output: bool, template: str, name: str) -> None:
    """Show one namespace."""
    from yurt.runtime.cli.api_client import api, call, emit_json
    from yurt.runtime.cli.output import check_format, emit_template

    check_format(json_output, template)
    with api() as client:
        found = call(client, "GET", f"/v1/namespace/{name}")
    if template:
        emit_template(template, found)
        return
    if json_output:
        emit_json(found)
        return
    rows = [("Name", found["Name"]), ("Description", found["Description"]),
            ("Quota", found.get("Quota") or "<none>")]
    width = max(len(k) for k, _ in rows)
    for k, value in rows:
        echo(f"{k.ljust(width)} = {value}")
    meta = found.get("Meta") or {}
    if meta:
        echo("\nMetadata")
        _print_pairs(meta)

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

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from yurt.runtime.cli.output import echo
from yurt.runtime.cli.ui_hint import refuse_ui
from yurt.runtime.errors import EXIT_FAILED, EXIT_USAGE
from yurt.runtime.lib.printable import printable


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


def _params(ns: str, **extra: str) -> dict[str, str]:
    return {**({"namespace": ns} if ns else {}), **extra}


def _time(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).astimezone().isoformat(timespec="seconds")


def _check_index(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or int(value) >= 1 << 64:
        from yurt.runtime.cli.output import fail

        fail(f"Invalid -check-index value {value!r}: not parsable as uint64", EXIT_USAGE)
    return int(value)


def _cas_conflict(response: Any, check_index: int) -> None:
    """Nomad's report of a check-and-set conflict; exit 1."""
    current = response.json()
    last = (f" The variable was last updated {_time(current['ModifyTime'])}."
            if current.get("ModifyIndex") else "")
    echo("\nCheck-and-Set conflict\n", err=True)
    echo(f"    Your provided check-index ({check_index}) does not match the server-side "
               f"index ({current.get('ModifyIndex', 0)}).{last}\n    If you are sure you "
               "want to perform this operation, add the -force or "
               f"-check-index={current.get('ModifyIndex', 0)} flag before the positional "
               "arguments.", err=True)
    sys.exit(EXIT_FAILED)


def _send(client: Any, method: str, path: str, **kw: Any) -> Any:
    """The response, 2xx or a 409 (a check-and-set conflict, for the caller to report);
    any other error ends the command as `api_client.call` ends it."""
    from yurt.runtime.cli.api_client import fail_on_error

    response = client.request(method, path, **kw)
    # A 409 with a text body is no check-and-set conflict: the variable is locked
    # (api/varlocks.py `refuse_if_locked`, Nomad's "attempting to modify locked variable").
    if response.status_code != 409 or not response.content.lstrip().startswith(b"{"):
        fail_on_error(response)
    return response


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


def _print_variable(v: dict[str, Any]) -> None:
    rows = [("Namespace", v["Namespace"]), ("Path", v["Path"]),
            ("Create Time", _time(v["CreateTime"])), ("Check Index", str(v["ModifyIndex"]))]
    width = max(len(k) for k, _ in rows)
    for k, value in rows:
        echo(f"{k.ljust(width)} = {value}")
    echo("\nItems")
    _print_pairs(v.get("Items") or {})


def _print_pairs(pairs: dict[str, str]) -> None:
    """`key = value` lines, sorted, the keys (made printable first) padded to the longest; a
    value of several lines keeps them."""
    keys = {printable(k): k for k in pairs}
    width = max((len(k) for k in keys), default=0)
    for shown in sorted(keys):
        echo(f"{shown.ljust(width)} = {pairs[keys[shown]]}")


def _items(args: tuple[str, ...]) -> dict[str, str]:
    from yurt.runtime.cli.output import fail

    items: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            fail(f"Failed to parse K=V data: {arg!r} is not key=value", EXIT_USAGE)
        if value == "-":
            value = sys.stdin.read()
        elif value.startswith("@"):
            try:
                value = Path(value[1:]).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                fail(f"error reading {value[1:]!r}: {e}", EXIT_USAGE)
        if value:
            items[key] = value
        else:
            items.pop(key, None)
    return items


@var.command("put")
@_namespace_option
@refuse_ui("variables")
@click.option("-check-index", "--check-index", "check_index", default=None,
              help="Write only if the variable's ModifyIndex is this (0: only if new).")
@click.option("-force", "--force", is_flag=True, help="Write whatever is stored now.")
@click.option("-out", "--out", "out", type=click.Choice(["none", "table", "json"]),
              default="none")
@click.argument("path")
@click.argument("items", nargs=-1, required=True)
def var_put(ns: str, check_index: str | None, force: bool, out: str, path: str,
            items: tuple[str, ...]) -> None:
    """Create or update a variable from key=value items."""
    from yurt.runtime.cli.api_client import api, emit_json
    from yurt.runtime.cli.output import fail

    if ns == "*":
        fail("Cannot use the '*' wildcard namespace", EXIT_USAGE)
    index = _check_index(check_index)
    cas = None if force else (index if index is not None else 0)
    body = {"Path": path, "Items": _items(items), **({"Namespace": ns} if ns else {})}
    with api() as client:
        response = _send(client, "PUT", f"/v1/var/{path}",
                         params=_params(ns, **({} if cas is None else {"cas": str(cas)})),
                         json=body)
    if response.status_code == 409:
        _cas_conflict(response, cas or 0)
    written = response.json()
    if out == "json":
        emit_json(written)
    elif out == "table":
        _print_variable(written)
    else:
        echo(f'Created variable "{written["Path"]}" with modify index '
                   f'{written["ModifyIndex"]}')


@var.command("list")
@_namespace_option
@refuse_ui("variables")
@_json_option
@click.argument("prefix", default="")
def var_list(ns: str, json_output: bool, template: str, prefix: str) -> None:
    """List variables (their metadata, never their items) under a prefix."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import check_format, emit, format_list

    check_format(json_output, template)
    with api() as client:
        found = call(client, "GET", "/v1/vars", params=_params(ns, prefix=prefix))

    def human() -> None:
        if not found:
            echo("No variables found")
            return
        echo(format_list([["Namespace", "Path", "Last Updated"],
                                *([v["Namespace"], v["Path"], _time(v["ModifyTime"])]
                                  for v in found)]))

    emit(found, json_output, template, human)


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
@click.argument("name")
def namespace_apply(description: str | None, quota: str | None, meta: tuple[str, ...],
                    name: str) -> None:
    """Create or update a namespace (flags not given keep their current value)."""
    from yurt.runtime.cli.api_client import api, call
    from yurt.runtime.cli.output import fail

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
